import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { clientBucket, RateLimiter } from '../src/engine/rate-limiter.ts';
import { assertError, assertRateHeaders, ingest, pv, storedEvents, testClock, type TestClock } from './contract-helpers.ts';
import { api, createProject, startTestService, type ApiOptions, type ApiResponse, type CreatedProject, type TestService } from './helpers.ts';

/**
 * CONTRACT "Limits": token buckets per key and per client IP (pk_), RateLimit-* on every authenticated answer, the
 * monthly allowance (UTC months, survives restarts, nothing of a refused batch stored). The engine's clock is a
 * test clock, so buckets refill only when a test moves time: every count below is exact.
 */

let svc: TestService;
let clock: TestClock;
let a: CreatedProject;
let b: CreatedProject;

before(async () => {
  clock = testClock('2026-11-21T12:00:00Z');
  svc = await startTestService({}, { now: clock.now });
  a = await createProject(svc.url, svc.adminKey, { name: 'A' });
  b = await createProject(svc.url, svc.adminKey, { name: 'B' });
});
after(() => svc.destroy());

const rate = (r: ApiResponse) => ({
  limit: Number(r.headers.get('ratelimit-limit')),
  remaining: Number(r.headers.get('ratelimit-remaining')),
  reset: Number(r.headers.get('ratelimit-reset')),
});

describe('rate limit per key', () => {
  test('a key gets its burst, then 429 rate_limited with Retry-After and RateLimit-*, and nothing of the refused requests is counted', async () => {
    const c = await createProject(svc.url, svc.adminKey, { rate_limit: { per_key: 1, burst_per_key: 3 } });
    const remaining: number[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await ingest(svc.url, c.keys.secret, pv(`/${i}`));
      assert.equal(r.status, 200);
      assert.equal(rate(r).limit, 3);
      remaining.push(rate(r).remaining);
    }
    assert.deepEqual(remaining, [2, 1, 0]);
    for (let i = 0; i < 3; i++) {
      const r = await ingest(svc.url, c.keys.secret, [pv('/over'), pv('/over2')]);
      assertError(r, 429, 'rate_limited');
      assert.ok(Number(r.headers.get('retry-after')) >= 1, `Retry-After ${r.headers.get('retry-after')}`);
      assert.deepEqual({ limit: rate(r).limit, remaining: rate(r).remaining }, { limit: 3, remaining: 0 });
      assert.ok(rate(r).reset >= 1);
    }
    // reads with the same key share the bucket
    assertError(await api(svc.url, '/metrics', { key: c.keys.secret }), 429, 'rate_limited');
    // another project is unaffected, and so is an admin
    assert.equal((await ingest(svc.url, a.keys.secret, pv('/a'))).status, 200);
    assert.equal((await api(svc.url, `/metrics?projectId=${c.project.id}`, { key: svc.adminKey })).body.pageviews, 3);

    clock.advance(1000); // one token back at 1/s
    assert.equal((await ingest(svc.url, c.keys.secret, pv('/after'))).status, 200);
    assertError(await ingest(svc.url, c.keys.secret, pv('/again')), 429, 'rate_limited');
    clock.advance(3000);
    const m = await api(svc.url, '/metrics', { key: c.keys.secret });
    assert.equal(m.body.pageviews, 4);
  });

  test('the publishable and secret keys of one project have separate buckets', async () => {
    const c = await createProject(svc.url, svc.adminKey, { rate_limit: { per_key: 1, burst_per_key: 1 } });
    assert.equal((await ingest(svc.url, c.keys.secret, pv())).status, 200);
    assertError(await ingest(svc.url, c.keys.secret, pv()), 429, 'rate_limited');
    assert.equal((await ingest(svc.url, c.keys.publishable, pv())).status, 200);
  });

  test('the default policy is 2,000 requests of burst per key (1,000/s) and 100 per client IP (50/s) for pk_ keys', async () => {
    const sk = await ingest(svc.url, b.keys.secret, pv('/defaults'));
    assert.deepEqual({ limit: rate(sk).limit, remaining: rate(sk).remaining }, { limit: 2000, remaining: 1999 });
    const pk = await ingest(svc.url, b.keys.publishable, pv('/defaults'));
    assert.deepEqual({ limit: rate(pk).limit, remaining: rate(pk).remaining }, { limit: 100, remaining: 99 });
    const admin = await api(svc.url, '/projects', { key: svc.adminKey });
    assert.equal(rate(admin).limit, 2000);
  });
});

describe('RateLimit-* headers on every answer of an authenticated endpoint', () => {
  let q: CreatedProject;
  before(async () => {
    q = await createProject(svc.url, svc.adminKey, { monthly_quota: 1, allowed_origins: [], allowed_referrers: [] });
    await ingest(svc.url, q.keys.secret, pv('/fills-the-quota'));
  });
  const cases: Array<{ name: string; route: string; opts: () => ApiOptions; status: number; code?: string }> = [
    { name: 'an accepted event', route: '/analytics', opts: () => ({ key: a.keys.secret, body: pv() }), status: 200 },
    { name: 'an invalid event', route: '/analytics', opts: () => ({ key: a.keys.secret, body: { event: '' } }), status: 400, code: 'invalid_event' },
    { name: 'an empty batch', route: '/analytics', opts: () => ({ key: a.keys.secret, body: [] }), status: 400, code: 'invalid_request' },
    { name: 'a body that is not JSON', route: '/analytics', opts: () => ({ key: a.keys.secret, raw: '{' }), status: 400, code: 'invalid_json' },
    { name: 'an empty body', route: '/analytics', opts: () => ({ key: a.keys.secret, raw: '' }), status: 400, code: 'invalid_json' },
    { name: 'a __proto__ key', route: '/analytics', opts: () => ({ key: a.keys.secret, raw: '{"event":"x","__proto__":{}}' }), status: 400, code: 'invalid_request' },
    { name: '{"events": 1}', route: '/analytics', opts: () => ({ key: a.keys.secret, raw: '{"events":1}' }), status: 400, code: 'invalid_request' },
    { name: 'a wrong content type', route: '/analytics', opts: () => ({ key: a.keys.secret, raw: '{}', headers: { 'content-type': 'application/xml' } }), status: 415, code: 'unsupported_media_type' },
    { name: 'a body over 1 MiB', route: '/analytics', opts: () => ({ key: a.keys.secret, raw: `"${'x'.repeat(1024 * 1024)}"` }), status: 413, code: 'payload_too_large' },
    { name: 'a batch of 501 events', route: '/analytics', opts: () => ({ key: a.keys.secret, body: Array.from({ length: 501 }, () => pv()) }), status: 413, code: 'payload_too_large' },
    { name: 'an event of another project', route: '/analytics', opts: () => ({ key: a.keys.secret, body: pv('/', { projectId: b.project.id }) }), status: 403, code: 'forbidden' },
    { name: 'an admin key ingesting', route: '/analytics', opts: () => ({ key: svc.adminKey, body: pv() }), status: 403, code: 'forbidden' },
    { name: 'a request over the monthly quota', route: '/analytics', opts: () => ({ key: q.keys.secret, body: pv() }), status: 429, code: 'quota_exceeded' },
    { name: 'a request without a key', route: '/analytics', opts: () => ({ body: pv() }), status: 401, code: 'unauthorized' },
    { name: 'a metrics read', route: '/metrics', opts: () => ({ key: a.keys.secret }), status: 200 },
    { name: 'a metrics read with a bad date', route: '/metrics?date=2026-13-01', opts: () => ({ key: a.keys.secret }), status: 400, code: 'invalid_request' },
    { name: 'a metrics read with a pk_ key', route: '/metrics', opts: () => ({ key: a.keys.publishable }), status: 403, code: 'forbidden' },
    { name: 'a metrics read of another project', route: `/metrics?projectId=__B__`, opts: () => ({ key: a.keys.secret }), status: 403, code: 'forbidden' },
    { name: 'an admin metrics read without projectId', route: '/metrics', opts: () => ({ key: svc.adminKey }), status: 400, code: 'invalid_request' },
    { name: 'an admin metrics read of an unknown project', route: '/metrics?projectId=p_unknown', opts: () => ({ key: svc.adminKey }), status: 404, code: 'not_found' },
    { name: 'a metrics read without a key', route: '/metrics', opts: () => ({}), status: 401, code: 'unauthorized' },
    { name: 'a project list', route: '/projects', opts: () => ({ key: a.keys.secret }), status: 200 },
    { name: 'an invalid project', route: '/projects', opts: () => ({ key: svc.adminKey, body: { allowed_origins: 'x' } }), status: 400, code: 'invalid_request' },
    { name: 'a project body that is not JSON', route: '/projects', opts: () => ({ key: svc.adminKey, raw: 'nope' }), status: 400, code: 'invalid_json' },
    { name: 'a project body of the wrong type', route: '/projects', opts: () => ({ key: svc.adminKey, raw: 'x', headers: { 'content-type': 'text/html' } }), status: 415, code: 'unsupported_media_type' },
  ];
  for (const c of cases) {
    test(`${c.name} answers ${c.status}${c.code ? ` ${c.code}` : ''} with RateLimit-Limit, -Remaining and -Reset`, async () => {
      const res = await api(svc.url, c.route.replace('__B__', b.project.id), c.opts());
      if (c.code) assertError(res, c.status, c.code);
      else assert.equal(res.status, c.status, JSON.stringify(res.body));
      assertRateHeaders(res);
      assert.ok(rate(res).remaining <= rate(res).limit);
    });
  }

  test('a request the wire refuses still costs its key a token', async () => {
    const c = await createProject(svc.url, svc.adminKey, { rate_limit: { per_key: 1, burst_per_key: 2 } });
    const first = await ingest(svc.url, c.keys.secret, undefined, { raw: '{' });
    assertError(first, 400, 'invalid_json');
    assert.equal(rate(first).remaining, 1);
    assertError(await ingest(svc.url, c.keys.secret, undefined, { raw: 'x', headers: { 'content-type': 'image/gif' } }), 415, 'unsupported_media_type');
    assertError(await ingest(svc.url, c.keys.secret, pv()), 429, 'rate_limited');
  });

  test('a bad key is answered 401 before a bad body is looked at', async () => {
    for (const opts of [{ raw: '{' }, { raw: 'x', headers: { 'content-type': 'image/gif' } }, { raw: '"' + 'x'.repeat(1024 * 1024 + 1) + '"' }]) {
      assertError(await ingest(svc.url, `sk_${'Z'.repeat(32)}`, undefined, opts), 401, 'unauthorized');
    }
  });
});

describe('rate limit per client IP for pk_ keys', () => {
  let proxied: TestService;
  let pclock: TestClock;
  let p: CreatedProject;
  let tight: CreatedProject;
  const A = '8.8.8.8';
  const B = '1.1.1.1';
  before(async () => {
    pclock = testClock('2026-11-21T12:00:00Z');
    proxied = await startTestService({ TRUST_PROXY: '1' }, { now: pclock.now });
    p = await createProject(proxied.url, proxied.adminKey, { name: 'default per-IP' });
    tight = await createProject(proxied.url, proxied.adminKey, { name: 'tight per-IP', rate_limit: { per_ip: 1, burst_per_ip: 2 } });
  });
  after(() => proxied.destroy());
  const from = (ip: string) => ({ headers: { 'x-forwarded-for': ip } });

  test('one IP that sends its 100-request burst is refused with 429; another IP, and the sk_ key from the first, still pass', async () => {
    for (let i = 0; i < 100; i++) {
      const r = await ingest(proxied.url, p.keys.publishable, pv(`/${i}`), from(A));
      assert.equal(r.status, 200, `request ${i}: ${JSON.stringify(r.body)}`);
    }
    const limited = await ingest(proxied.url, p.keys.publishable, pv('/101'), from(A));
    assertError(limited, 429, 'rate_limited');
    assert.ok(Number(limited.headers.get('retry-after')) >= 1);
    assert.deepEqual({ limit: rate(limited).limit, remaining: rate(limited).remaining }, { limit: 100, remaining: 0 });
    // a proxy chain ending in A is still A
    assertError(await ingest(proxied.url, p.keys.publishable, pv('/chain'), from(`${B}, ${A}`)), 429, 'rate_limited');

    const other = await ingest(proxied.url, p.keys.publishable, pv('/b'), from(B));
    assert.equal(other.status, 200);
    assert.equal(rate(other).remaining, 99);
    assert.equal((await ingest(proxied.url, p.keys.secret, pv('/sk'), from(A))).status, 200);
    assert.equal(await storedEvents(proxied.url, p.keys.secret), 102);

    pclock.advance(1000); // 50 tokens back for A
    assert.equal((await ingest(proxied.url, p.keys.publishable, pv('/later'), from(A))).status, 200);
  });

  test('a project\'s rate_limit.per_ip and burst_per_ip replace the default', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await ingest(proxied.url, tight.keys.publishable, pv(), from(A))).status);
    assert.deepEqual(statuses, [200, 200, 429]);
    assert.equal((await ingest(proxied.url, tight.keys.publishable, pv(), from(B))).status, 200);
    assert.equal(await storedEvents(proxied.url, tight.keys.secret), 3);
  });

  test('IPv6 clients are limited per /64: two addresses of one /64 share a bucket, another /64 has its own', async () => {
    const v6 = await createProject(proxied.url, proxied.adminKey, { rate_limit: { per_ip: 1, burst_per_ip: 2 } });
    assert.equal((await ingest(proxied.url, v6.keys.publishable, pv(), from('2a00:1450:4001:81c::1'))).status, 200);
    assert.equal((await ingest(proxied.url, v6.keys.publishable, pv(), from('2a00:1450:4001:81c:dead:beef:0:2'))).status, 200);
    assertError(await ingest(proxied.url, v6.keys.publishable, pv(), from('2a00:1450:4001:81c:ffff::3')), 429, 'rate_limited');
    assert.equal((await ingest(proxied.url, v6.keys.publishable, pv(), from('2a00:1450:4001:81d::1'))).status, 200);
  });

  test('without TRUST_PROXY, X-Forwarded-For is ignored: every local client is the same IP', async () => {
    const local = await createProject(svc.url, svc.adminKey, { rate_limit: { per_ip: 1, burst_per_ip: 2 } });
    assert.equal((await ingest(svc.url, local.keys.publishable, pv(), from(A))).status, 200);
    assert.equal((await ingest(svc.url, local.keys.publishable, pv(), from(B))).status, 200);
    assertError(await ingest(svc.url, local.keys.publishable, pv(), from('9.9.9.9')), 429, 'rate_limited');
  });
});

describe('RateLimiter memory', () => {
  test('drops buckets that have refilled, and keeps those still draining', () => {
    const limiter = new RateLimiter();
    const t0 = 1_000_000;
    for (let i = 0; i < 10_000; i++) limiter.take(`idle:${i}`, 50, 100, t0);
    for (let i = 0; i < 200; i++) limiter.take('busy', 1, 1000, t0);
    assert.equal(limiter.size(), 10_001);
    // 60 s later every idle bucket is full again (100 tokens at 50/s take 2 s); the busy one needs 200 s
    limiter.take('new', 50, 100, t0 + 60_000);
    assert.equal(limiter.size(), 2);
    const busy = limiter.take('busy', 1, 1000, t0 + 60_000);
    assert.ok(busy.info.remaining < 1000);
  });

  test('never holds more than 200,000 buckets, however many callers arrive at once', () => {
    const limiter = new RateLimiter();
    for (let i = 0; i < 200_500; i++) limiter.take(`ip:${i}`, 50, 100, 5_000);
    assert.ok(limiter.size() <= 200_000, String(limiter.size()));
  });

  const buckets: Array<[string, string]> = [
    ['203.0.113.9', '203.0.113.9'],
    ['2a00:1450:4001:81c::1', '2a00:1450:4001:81c::/64'],
    ['2A00:1450:4001:081C:FFFF:0:0:1', '2a00:1450:4001:81c::/64'],
    ['2a00::1', '2a00:0:0:0::/64'],
    ['fe80::1:2:3:4:5', 'fe80:0:0:1::/64'],
  ];
  for (const [ip, bucket] of buckets) {
    test(`the client bucket of ${ip} is ${bucket}`, () => assert.equal(clientBucket(ip), bucket));
  }

  test('a clock that steps back neither drains nor refills a bucket', () => {
    const limiter = new RateLimiter();
    const t0 = 10_000_000;
    limiter.take('k', 1000, 2000, t0);
    const back = limiter.take('k', 1000, 2000, t0 - 3_600_000);
    assert.equal(back.allowed, true);
    assert.equal(back.info.remaining, 1998);
    assert.equal(limiter.take('k', 1000, 2000, t0).info.remaining, 1997);
  });

  test('a refused take reports Retry-After of at least one second and no remaining tokens', () => {
    const limiter = new RateLimiter();
    limiter.take('k', 1000, 1, 0);
    const r = limiter.take('k', 1000, 1, 0);
    assert.equal(r.allowed, false);
    assert.equal(r.info.remaining, 0);
    assert.ok(r.retryAfterSeconds >= 1);
  });
});

describe('monthly quota', () => {
  test('stores nothing of a batch that would pass the quota, and the rest of the allowance stays usable', async () => {
    const c = await createProject(svc.url, svc.adminKey, { monthly_quota: 5 });
    assert.equal((await ingest(svc.url, c.keys.secret, [pv('/1'), pv('/2'), pv('/3')])).status, 200);
    const over = await ingest(svc.url, c.keys.secret, [pv('/4'), pv('/5'), pv('/6')]);
    assertError(over, 429, 'quota_exceeded');
    assert.ok(Number(over.headers.get('retry-after')) >= 1);
    assertRateHeaders(over);
    assert.equal(await storedEvents(svc.url, c.keys.secret), 3);
    assert.equal((await ingest(svc.url, c.keys.secret, [pv('/4'), pv('/5')])).status, 200);
    assertError(await ingest(svc.url, c.keys.secret, pv('/6')), 429, 'quota_exceeded');
    assert.equal(await storedEvents(svc.url, c.keys.secret), 5);
  });

  test('monthly_quota 0 means unlimited', async () => {
    const c = await createProject(svc.url, svc.adminKey, { monthly_quota: 0 });
    const batch = Array.from({ length: 500 }, (_, i) => pv(`/${i}`));
    for (let i = 0; i < 3; i++) assert.equal((await ingest(svc.url, c.keys.secret, batch)).status, 200);
    assert.equal(await storedEvents(svc.url, c.keys.secret), 1500);
    const listed = (await api(svc.url, '/projects', { key: c.keys.secret })).body.projects[0];
    assert.equal(listed.monthly_quota, 0);
  });

  test('the allowance renews at the start of the UTC month, whatever the project\'s timezone, with Retry-After counting down to it', async () => {
    const saved = clock.now();
    try {
      clock.set('2026-11-30T23:59:00Z'); // already 1 December, 12:59, in Auckland
      const c = await createProject(svc.url, svc.adminKey, { monthly_quota: 1, timezone: 'Pacific/Auckland' });
      assert.equal((await ingest(svc.url, c.keys.secret, pv('/nov'))).status, 200);
      const over = await ingest(svc.url, c.keys.secret, pv('/nov2'));
      assertError(over, 429, 'quota_exceeded');
      assert.equal(over.headers.get('retry-after'), '60');
      clock.set('2026-12-01T00:00:00Z');
      assert.equal((await ingest(svc.url, c.keys.secret, pv('/dec'))).status, 200);
      assertError(await ingest(svc.url, c.keys.secret, pv('/dec2')), 429, 'quota_exceeded');
    } finally {
      clock.set(saved);
    }
  });

  test('the count of the month survives a restart, with and without a snapshot', async () => {
    const qclock = testClock('2026-11-21T12:00:00Z');
    let q = await startTestService({}, { now: qclock.now });
    try {
      const c = await createProject(q.url, q.adminKey, { monthly_quota: 4 });
      assert.equal((await ingest(q.url, c.keys.secret, [pv('/1'), pv('/2')])).status, 200);
      q = await q.restart();
      assertError(await ingest(q.url, c.keys.secret, [pv('/3'), pv('/4'), pv('/5')]), 429, 'quota_exceeded');
      assert.equal(await storedEvents(q.url, c.keys.secret), 2);
      assert.equal((await ingest(q.url, c.keys.secret, pv('/3'))).status, 200);
      await q.service.engine.snapshotNow();
      q = await q.restart();
      assert.equal((await ingest(q.url, c.keys.secret, pv('/4'))).status, 200);
      q = await q.restart();
      assertError(await ingest(q.url, c.keys.secret, pv('/5')), 429, 'quota_exceeded');
      assert.equal(await storedEvents(q.url, c.keys.secret), 4);
    } finally {
      await q.destroy();
    }
  });
});
