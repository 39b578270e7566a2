import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { api, createProject, startTestService, todayUtc, type ApiResponse, type CreatedProject, type TestService } from './helpers.ts';

let svc: TestService;
let a: CreatedProject;
let b: CreatedProject;

before(async () => {
  svc = await startTestService();
  a = await createProject(svc.url, svc.adminKey, { name: 'A' });
  b = await createProject(svc.url, svc.adminKey, { name: 'B' });
});
after(() => svc.destroy());

const pv = (path = '/', extra: object = {}) => ({ event: 'page_view', url: `https://a.example${path}`, sessionId: 's1', ...extra });

async function pageviews(key: string): Promise<number> {
  const m = await api(svc.url, '/metrics', { key });
  assert.equal(m.status, 200);
  return m.body.pageviews as number;
}

describe('GET /health', () => {
  test('answers 200 with status, version and uptime, without a key', async () => {
    const r = await api(svc.url, '/health');
    assert.equal(r.status, 200);
    assert.equal(r.body.status, 'ok');
    assert.match(r.body.version, /^\d+\.\d+\.\d+/);
    assert.equal(typeof r.body.uptimeSeconds, 'number');
  });
});

describe('POST /analytics', () => {
  test('acknowledges one event with ok, an integer ms timestamp and the accepted count', async () => {
    const before = Date.now();
    const r = await api(svc.url, '/analytics', { key: a.keys.secret, body: pv('/one') });
    assert.equal(r.status, 200);
    assert.equal(r.body.ok, true);
    assert.equal(r.body.accepted, 1);
    assert.ok(Number.isInteger(r.body.ts) && r.body.ts >= before && r.body.ts <= Date.now());
    assert.equal(r.headers.get('set-cookie'), null);
  });

  test('accepts a JSON array and an {events} object as batches', async () => {
    const start = await pageviews(b.keys.secret);
    const arr = await api(svc.url, '/analytics', { key: b.keys.secret, body: [pv('/x'), pv('/y')] });
    const obj = await api(svc.url, '/analytics', { key: b.keys.secret, body: { events: [pv('/z'), pv('/w'), pv('/v')] } });
    assert.equal(arr.body.accepted, 2);
    assert.equal(obj.body.accepted, 3);
    assert.equal(await pageviews(b.keys.secret), start + 5);
  });

  test('accepts text/plain bodies (beacons) and a leading BOM', async () => {
    const r = await api(svc.url, '/analytics', { key: a.keys.secret, raw: `\ufeff${JSON.stringify(pv())}`, headers: { 'content-type': 'text/plain;charset=UTF-8' } });
    assert.equal(r.status, 200);
  });

  const refusals: Array<{ name: string; opts: () => Parameters<typeof api>[2]; status: number; code: string }> = [
    { name: 'a request without a key', opts: () => ({ body: pv() }), status: 401, code: 'unauthorized' },
    { name: 'a malformed Authorization header', opts: () => ({ body: pv(), headers: { authorization: 'Token abc' } }), status: 401, code: 'unauthorized' },
    { name: 'an unknown key', opts: () => ({ body: pv(), key: 'sk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' }), status: 401, code: 'unauthorized' },
    { name: "an event naming another project", opts: () => ({ key: a.keys.secret, body: pv('/', { projectId: b.project.id }) }), status: 403, code: 'forbidden' },
    { name: 'an admin key', opts: () => ({ key: svc.adminKey, body: pv() }), status: 403, code: 'forbidden' },
    { name: 'a body that is not JSON', opts: () => ({ key: a.keys.secret, raw: '{"event":' }), status: 400, code: 'invalid_json' },
    { name: 'an empty body', opts: () => ({ key: a.keys.secret, raw: '' }), status: 400, code: 'invalid_json' },
    { name: 'an empty batch', opts: () => ({ key: a.keys.secret, body: [] }), status: 400, code: 'invalid_request' },
    { name: 'an event without a name', opts: () => ({ key: a.keys.secret, body: { url: '/' } }), status: 400, code: 'invalid_event' },
    { name: 'a page_view without url', opts: () => ({ key: a.keys.secret, body: { event: 'page_view' } }), status: 400, code: 'invalid_event' },
    { name: 'a __proto__ key', opts: () => ({ key: a.keys.secret, raw: '{"event":"x","eventParams":{"__proto__":{"a":1}}}' }), status: 400, code: 'invalid_request' },
    { name: 'an infinite number (1e309)', opts: () => ({ key: a.keys.secret, raw: '{"event":"x","eventParams":{"n":1e309}}' }), status: 400, code: 'invalid_event' },
    { name: 'a form-encoded body', opts: () => ({ key: a.keys.secret, raw: 'event=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } }), status: 415, code: 'unsupported_media_type' },
    { name: 'a body over 1 MiB', opts: () => ({ key: a.keys.secret, raw: JSON.stringify({ event: 'x', pad: 'y'.repeat(1024 * 1024) }) }), status: 413, code: 'payload_too_large' },
    { name: 'a batch of 501 events', opts: () => ({ key: a.keys.secret, body: Array.from({ length: 501 }, () => pv()) }), status: 413, code: 'payload_too_large' },
  ];
  for (const r of refusals) {
    test(`refuses ${r.name} with ${r.status} ${r.code} and counts nothing`, async () => {
      const start = await pageviews(a.keys.secret);
      const res = await api(svc.url, '/analytics', r.opts());
      assert.equal(res.status, r.status, JSON.stringify(res.body));
      assert.equal(res.body.ok, false);
      assert.equal(res.body.error.code, r.code);
      assert.equal(typeof res.body.error.message, 'string');
      assert.equal(await pageviews(a.keys.secret), start);
    });
  }

  test('refuses a batch with one bad event, lists its index and field, and stores none of it', async () => {
    const start = await pageviews(a.keys.secret);
    const res = await api(svc.url, '/analytics', { key: a.keys.secret, body: [pv('/ok'), pv('/ok2'), { event: 'page_view', url: 'ftp://x' }, pv()] });
    assert.equal(res.status, 400);
    assert.equal(res.body.error.code, 'invalid_event');
    assert.deepEqual(res.body.error.details.map((d: { index: number; path: string }) => [d.index, d.path]), [[2, 'url']]);
    assert.equal(await pageviews(a.keys.secret), start);
  });
});

describe('GET /metrics', () => {
  test('answers the contract shape for today', async () => {
    const r = await api(svc.url, '/metrics', { key: a.keys.secret });
    assert.equal(r.status, 200);
    for (const f of ['users', 'sessions', 'pageviews', 'bounceRate', 'trafficSources', 'countries', 'devices', 'pages', 'events', 'recentEvents', 'daily']) {
      assert.ok(f in r.body, f);
    }
    assert.equal(r.body.from, todayUtc());
    assert.equal(r.body.to, todayUtc());
    assert.match(r.body.bounceRate, /^\d+\.\d%$/);
    assert.ok(r.headers.get('ratelimit-limit'));
  });

  const refusals: Array<{ name: string; key: () => string; q: string | (() => string); status: number; code: string }> = [
    { name: 'a publishable key', key: () => a.keys.publishable, q: '', status: 403, code: 'forbidden' },
    { name: "another project's id", key: () => a.keys.secret, q: () => `?projectId=${b.project.id}`, status: 403, code: 'forbidden' },
    { name: 'an admin key without projectId', key: () => svc.adminKey, q: '', status: 400, code: 'invalid_request' },
    { name: 'an admin key with an unknown projectId', key: () => svc.adminKey, q: '?projectId=p_nope', status: 404, code: 'not_found' },
    { name: '`to` without `from`', key: () => a.keys.secret, q: '?to=2026-11-01', status: 400, code: 'invalid_request' },
    { name: '`date` with `from`', key: () => a.keys.secret, q: '?date=2026-11-01&from=2026-11-01', status: 400, code: 'invalid_request' },
    { name: 'an impossible date', key: () => a.keys.secret, q: '?date=2026-02-30', status: 400, code: 'invalid_request' },
    { name: '`from` after `to`', key: () => a.keys.secret, q: '?from=2026-11-02&to=2026-11-01', status: 400, code: 'invalid_request' },
    { name: 'a range over 366 days', key: () => a.keys.secret, q: '?from=2025-01-01&to=2026-01-02', status: 400, code: 'invalid_request' },
  ];
  for (const r of refusals) {
    test(`refuses ${r.name} with ${r.status} ${r.code}`, async () => {
      const res = await api(svc.url, `/metrics${typeof r.q === 'function' ? r.q() : r.q}`, { key: r.key() });
      assert.equal(res.status, r.status, JSON.stringify(res.body));
      assert.equal(res.body.error.code, r.code);
    });
  }

  test('lets an admin key read any project by projectId', async () => {
    const res = await api(svc.url, `/metrics?projectId=${b.project.id}`, { key: svc.adminKey });
    assert.equal(res.status, 200);
    assert.equal(res.body.projectId, b.project.id);
  });
});

describe('projects', () => {
  test('an admin sees every project; a secret key sees only its own', async () => {
    const all = await api(svc.url, '/projects', { key: svc.adminKey });
    const ids = all.body.projects.map((p: { id: string }) => p.id);
    assert.ok(ids.includes(a.project.id) && ids.includes(b.project.id));
    const own = await api(svc.url, '/projects', { key: a.keys.secret });
    assert.deepEqual(own.body.projects.map((p: { id: string }) => p.id), [a.project.id]);
    const pk = await api(svc.url, '/projects', { key: a.keys.publishable });
    assert.equal(pk.status, 403);
  });

  test('creating a project returns sk_ and pk_ keys that work', async () => {
    const c = await createProject(svc.url, svc.adminKey, { name: 'C', timezone: 'Europe/Berlin', monthly_quota: 0 });
    assert.match(c.keys.secret, /^sk_[A-Za-z0-9_-]{22,}$/);
    assert.match(c.keys.publishable, /^pk_[A-Za-z0-9_-]{22,}$/);
    assert.equal(c.project.timezone, 'Europe/Berlin');
    const r = await api(svc.url, '/analytics', { key: c.keys.publishable, body: pv() });
    assert.equal(r.status, 200);
  });

  test('refuses invalid project bodies with 400 and details', async () => {
    for (const body of [
      { allowed_origins: ['not a url'], allowed_referrers: [] },
      { allowed_origins: ['https://a.example/path'], allowed_referrers: [] },
      { allowed_origins: [], allowed_referrers: ['https://x.example'] },
      { allowed_origins: [], allowed_referrers: [], timezone: 'Mars/Olympus' },
      { allowed_origins: [], allowed_referrers: [], monthly_quota: -1 },
      { allowed_referrers: [] },
    ]) {
      const r = await api(svc.url, '/projects', { key: svc.adminKey, body });
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.body.error.code, 'invalid_request');
      assert.ok(r.body.error.details.length > 0);
    }
  });
});

describe('the wire', () => {
  test('answers 404 not_found for an unknown path', async () => {
    const r = await api(svc.url, '/nope');
    assert.equal(r.status, 404);
    assert.equal(r.body.error.code, 'not_found');
  });

  test('answers 405 with Allow for a wrong method', async () => {
    const r = await api(svc.url, '/analytics', { method: 'DELETE' });
    assert.equal(r.status, 405);
    assert.equal(r.body.error.code, 'method_not_allowed');
    assert.match(r.headers.get('allow') ?? '', /POST/);
  });

  test('answers CORS preflights on any path, reflecting the origin', async () => {
    const r = await fetch(`${svc.url}/analytics`, {
      method: 'OPTIONS',
      headers: { origin: 'https://site.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
    });
    assert.equal(r.status, 204);
    assert.equal(r.headers.get('access-control-allow-origin'), 'https://site.example');
    assert.match(r.headers.get('access-control-allow-headers') ?? '', /Authorization/);
    assert.ok(Number(r.headers.get('access-control-max-age')) >= 600);
  });

  test('rate limits a key with 429, Retry-After and RateLimit headers, leaving other projects alone', async () => {
    const c = await createProject(svc.url, svc.adminKey, { rate_limit: { per_key: 1, burst_per_key: 3 } });
    const statuses: number[] = [];
    let limited: ApiResponse | undefined;
    for (let i = 0; i < 5; i++) {
      const r = await api(svc.url, '/analytics', { key: c.keys.secret, body: pv() });
      statuses.push(r.status);
      if (r.status === 429) limited = r;
    }
    assert.deepEqual(statuses.slice(0, 3), [200, 200, 200]);
    assert.ok(limited, 'a burst past the bucket is refused');
    assert.equal(limited.body.error.code, 'rate_limited');
    assert.ok(Number(limited.headers.get('retry-after')) >= 1);
    assert.equal(limited.headers.get('ratelimit-limit'), '3');
    assert.equal(limited.headers.get('ratelimit-remaining'), '0');
    const other = await api(svc.url, '/analytics', { key: a.keys.secret, body: pv() });
    assert.equal(other.status, 200);
  });

  test('refuses events beyond the monthly quota with 429 quota_exceeded and stores none of them', async () => {
    const c = await createProject(svc.url, svc.adminKey, { monthly_quota: 3 });
    assert.equal((await api(svc.url, '/analytics', { key: c.keys.secret, body: [pv('/1'), pv('/2')] })).status, 200);
    const over = await api(svc.url, '/analytics', { key: c.keys.secret, body: [pv('/3'), pv('/4')] });
    assert.equal(over.status, 429);
    assert.equal(over.body.error.code, 'quota_exceeded');
    assert.ok(Number(over.headers.get('retry-after')) >= 1);
    assert.equal((await api(svc.url, '/analytics', { key: c.keys.secret, body: pv('/3') })).status, 200);
    assert.equal(await pageviews(c.keys.secret), 3);
  });
});

describe('GET /script.js', () => {
  test('serves the tracker gzipped with caching headers, and only the current hash under /script.<hash>.js', async () => {
    const r = await fetch(`${svc.url}/script.js`, { headers: { 'accept-encoding': 'gzip' } });
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type') ?? '', /javascript/);
    assert.match(r.headers.get('cache-control') ?? '', /max-age=\d+/);
    const code = await r.text(); // fetch decodes Content-Encoding: gzip
    assert.ok(code.length > 100 && !code.includes('import '));
    const hash = (r.headers.get('etag') ?? '').replaceAll('"', '');
    const pinned = await fetch(`${svc.url}/script.${hash}.js`);
    assert.equal(pinned.status, 200);
    assert.match(pinned.headers.get('cache-control') ?? '', /immutable/);
    assert.equal(await pinned.text(), code);
    const stale = await fetch(`${svc.url}/script.0123456789abcdef.js`);
    assert.equal(stale.status, 404);
  });
});
