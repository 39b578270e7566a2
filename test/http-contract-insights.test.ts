import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { assertError, ingest, pv, testClock, type TestClock } from './contract-helpers.ts';
import { api, createProject, startTestService, type CreatedProject, type TestService } from './helpers.ts';

/**
 * CONTRACT "Insights": compare, the new breakdowns, revenue, tracked props and GET /metrics/realtime, over HTTP on a
 * test clock, across restarts (from a snapshot and from a full replay of the log).
 */

const NOW = '2026-11-21T12:00:30Z';
const MINUTE = 60_000;
const CHROME_WINDOWS = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36';
const SAFARI_IPHONE =
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1';
const GOOGLEBOT = 'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)';

let svc: TestService;
let clock: TestClock;

before(async () => {
  clock = testClock(NOW);
  svc = await startTestService({}, { now: clock.now });
});
after(() => svc.destroy());

async function metrics(key: string, query: string) {
  const m = await api(svc.url, `/metrics?${query}`, { key });
  assert.equal(m.status, 200, JSON.stringify(m.body));
  return m.body;
}

async function realtime(key: string, query = '') {
  const r = await api(svc.url, `/metrics/realtime${query}`, { key });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

async function send(key: string, events: object[], ua = CHROME_WINDOWS): Promise<void> {
  const r = await ingest(svc.url, key, { events }, { headers: { 'user-agent': ua } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
}

describe('compare', () => {
  test('compare=previous is the range of the same length ending the day before `from`, with its own figures and daily series', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    await send(p.keys.secret, [
      pv('/a', { sessionId: 'x1', timestamp: '2026-11-18T10:00:00Z' }),
      pv('/b', { sessionId: 'x1', timestamp: '2026-11-18T10:01:00Z' }),
      pv('/a', { sessionId: 'x2', timestamp: '2026-11-19T10:00:00Z' }),
      pv('/a', { sessionId: 'x3', timestamp: '2026-11-20T10:00:00Z' }),
    ]);
    const day = await metrics(p.keys.secret, 'date=2026-11-19&compare=previous');
    assert.deepEqual(day.compare, {
      from: '2026-11-18',
      to: '2026-11-18',
      users: 1,
      sessions: 1,
      pageviews: 2,
      bounceRate: '0.0%',
      daily: [{ date: '2026-11-18', users: 1, sessions: 1, pageviews: 2, bounceRate: '0.0%' }],
    });
    assert.equal(day.pageviews, 1, 'the main figures stay those of the asked range');
    const range = await metrics(p.keys.secret, 'from=2026-11-20&to=2026-11-21&compare=previous');
    assert.deepEqual([range.compare.from, range.compare.to, range.compare.sessions], ['2026-11-18', '2026-11-19', 2]);
    assert.deepEqual(range.compare.daily.map((d: { date: string }) => d.date), ['2026-11-18', '2026-11-19']);
  });

  test('compare=year is the same dates a year earlier, and Feb 29 maps to Feb 28', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    const leap = await metrics(p.keys.secret, 'from=2028-02-29&to=2028-03-01&compare=year');
    assert.deepEqual([leap.compare.from, leap.compare.to, leap.compare.daily.length], ['2027-02-28', '2027-03-01', 2]);
    const plain = await metrics(p.keys.secret, 'date=2026-11-20&compare=year');
    assert.deepEqual([plain.compare.from, plain.compare.to], ['2025-11-20', '2025-11-20']);
  });

  test('any other value of compare is 400 invalid_request, and no compare means no compare object', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    for (const bad of ['', 'Previous', 'week', 'year,previous']) {
      assertError(await api(svc.url, `/metrics?compare=${encodeURIComponent(bad)}`, { key: p.keys.secret }), 400, 'invalid_request');
    }
    assert.equal('compare' in (await metrics(p.keys.secret, 'date=2026-11-20')), false);
  });
});

describe('breakdowns, revenue and props', () => {
  let p: CreatedProject;
  before(async () => {
    p = await createProject(svc.url, svc.adminKey, { tracked_props: ['plan', 'seats'] });
  });

  test('entry pages count a session at its first page_view; browsers and OS at its first event, Unknown when unnamed', async () => {
    await send(p.keys.secret, [
      { event: 'signup', sessionId: 'e1', url: 'https://a.example/ignored' },
      pv('/landing', { sessionId: 'e1' }),
      pv('/second', { sessionId: 'e1' }),
      pv('/docs', { sessionId: 'e2' }),
    ]);
    await send(p.keys.secret, [pv('/docs', { sessionId: 'e3' }), pv('/x', { sessionId: 'e1' })], SAFARI_IPHONE);
    await send(p.keys.secret, [{ event: 'ping', sessionId: 'e4' }], 'curl/8.5.0');
    const m = await metrics(p.keys.secret, 'date=2026-11-21');
    assert.deepEqual(m.entryPages, { '/docs': 2, '/landing': 1 });
    assert.deepEqual(m.browsers, { Chrome: 2, 'Mobile Safari': 1, Unknown: 1 });
    assert.deepEqual(m.operatingSystems, { Windows: 2, iOS: 1, Unknown: 1 });
    assert.deepEqual(Object.keys(m.entryPages), ['/docs', '/landing'], 'ordered by count');
  });

  test('utm_medium and utm_campaign come from the first event of the session; sessions without one are not counted', async () => {
    await send(p.keys.secret, [
      pv('/?utm_source=nl&utm_medium=email&utm_campaign=black%20friday', { sessionId: 'u1' }),
      pv('/?utm_medium=cpc', { sessionId: 'u1' }),
      pv('/', { sessionId: 'u2' }),
      pv('/?utm_medium=cpc&utm_campaign=launch', { sessionId: 'u2' }),
      pv('/?utm_medium=cpc', { sessionId: 'u3' }),
    ]);
    const m = await metrics(p.keys.secret, 'date=2026-11-21');
    assert.deepEqual(m.utmMediums, { cpc: 1, email: 1 });
    assert.deepEqual(m.utmCampaigns, { 'black friday': 1 });
  });

  test('revenue sums numeric values of purchases by upper-case currency, rounded to 2 decimals; other purchases do not count', async () => {
    const buy = (value: unknown, currency: unknown) => ({ event: 'purchase', sessionId: 'r1', eventParams: { value, currency } });
    await send(p.keys.secret, [
      buy(0.1, 'eur'),
      buy(0.2, 'EUR'),
      buy(19.999, 'usd'),
      buy('10', 'EUR'),
      buy(5, 'EURO'),
      buy(5, 'E1R'),
      { event: 'purchase', sessionId: 'r1', eventParams: { value: 3 } },
      { event: 'checkout', sessionId: 'r1', eventParams: { value: 7, currency: 'EUR' } },
    ]);
    const m = await metrics(p.keys.secret, 'date=2026-11-21');
    assert.deepEqual(m.revenue, { EUR: { total: 0.3, purchases: 2 }, USD: { total: 20, purchases: 1 } });
  });

  test('props count events by value for tracked keys only, values as strings', async () => {
    await send(p.keys.secret, [
      { event: 'signup', sessionId: 'p1', eventParams: { plan: 'pro', seats: 5, other: 'x' } },
      { event: 'signup', sessionId: 'p2', eventParams: { plan: 'pro', seats: true } },
      { event: 'upgrade', sessionId: 'p2', eventParams: { plan: null } },
    ]);
    const m = await metrics(p.keys.secret, 'date=2026-11-21');
    assert.deepEqual(m.props, { plan: { pro: 2, null: 1 }, seats: { '5': 1, true: 1 } });
    const untracked = await createProject(svc.url, svc.adminKey);
    await send(untracked.keys.secret, [{ event: 'signup', sessionId: 'p1', eventParams: { plan: 'pro' } }]);
    assert.deepEqual((await metrics(untracked.keys.secret, 'date=2026-11-21')).props, {});
  });

  test('props keep at most 100 values per key per day, the rest under (other); revenue at most 200 currencies', async () => {
    const q = await createProject(svc.url, svc.adminKey, { tracked_props: ['v'], monthly_quota: 0 });
    await send(q.keys.secret, Array.from({ length: 150 }, (_, i) => ({ event: 'e', sessionId: 'c', eventParams: { v: `v${i}` } })));
    const codes = Array.from({ length: 210 }, (_, i) => String.fromCharCode(65 + Math.floor(i / 26 / 26), 65 + (Math.floor(i / 26) % 26), 65 + (i % 26)));
    await send(q.keys.secret, codes.map((currency) => ({ event: 'purchase', sessionId: 'c', eventParams: { value: 1, currency } })));
    const m = await metrics(q.keys.secret, 'date=2026-11-21');
    assert.equal(Object.keys(m.props.v).length, 101);
    assert.equal(m.props.v['(other)'], 50);
    assert.equal(Object.keys(m.revenue).length, 200);
  });

  test('tracked_props is at most 10 keys of at most 40 characters, on create and on PATCH; counting starts when a key is tracked', async () => {
    const tooMany = Array.from({ length: 11 }, (_, i) => `k${i}`);
    for (const tracked_props of [tooMany, ['x'.repeat(41)], [''], 'plan', [1]]) {
      const r = await api(svc.url, '/projects', { key: svc.adminKey, body: { allowed_origins: [], allowed_referrers: [], tracked_props } });
      assertError(r, 400, 'invalid_request');
      assert.match(JSON.stringify(r.body.error.details), /tracked_props/);
    }
    const ok = await createProject(svc.url, svc.adminKey, { tracked_props: tooMany.slice(0, 10) });
    assert.deepEqual((ok.project as { tracked_props?: string[] }).tracked_props, tooMany.slice(0, 10));
    await send(ok.keys.secret, [{ event: 'e', sessionId: 't', eventParams: { k9: 'x', k10: 'y', later: 'before' } }]);
    let m = await metrics(ok.keys.secret, 'date=2026-11-21');
    assert.deepEqual(Object.keys(m.props), tooMany.slice(0, 10));
    assert.deepEqual(m.props.k9, { x: 1 });

    const patched = await api(svc.url, `/projects/${ok.project.id}`, { method: 'PATCH', key: ok.keys.secret, body: { tracked_props: ['k9', 'later'] } });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    await send(ok.keys.secret, [{ event: 'e', sessionId: 't', eventParams: { k9: 'x', later: 'after' } }]);
    m = await metrics(ok.keys.secret, 'date=2026-11-21');
    assert.deepEqual(m.props, { k9: { x: 2 }, later: { after: 1 } }, 'no backfill: the event sent before `later` was tracked does not count');
    svc = await svc.restart();
    assert.deepEqual((await metrics(ok.keys.secret, 'date=2026-11-21')).props, m.props, 'the same after a restart (values are in the log records)');
  });
});

describe('GET /metrics/realtime', () => {
  test('counts the last 30 minutes by event time, visitors over the last 5, sources by visit, on the engine clock', async () => {
    clock.set(NOW);
    const p = await createProject(svc.url, svc.adminKey, { monthly_quota: 0 });
    const empty = await realtime(p.keys.secret);
    assert.deepEqual(empty, { projectId: p.project.id, visitors: 0, pageviews: 0, perMinute: new Array(30).fill(0), pages: {}, sources: {} });

    // 40 minutes ago .. now: one page view per minute from its own session, plus a custom event.
    const start = Date.parse(NOW) - 40 * MINUTE;
    for (let i = 0; i <= 40; i++) {
      clock.set(start + i * MINUTE);
      await send(p.keys.secret, [pv(`/p${i % 12}`, { sessionId: `rt${i}`, referrer: i % 2 ? 'https://www.google.com/' : '' })]);
    }
    await send(p.keys.secret, [
      { event: 'click', sessionId: 'rt40' },
      // stamped before the window (a backfill, a queue flushed late): not live traffic, though it arrives now
      pv('/p0', { sessionId: 'extra', timestamp: Date.parse('2026-11-01T00:00:00Z') }),
      pv('/p0', { sessionId: 'late', timestamp: Date.parse(NOW) - 35 * MINUTE }),
      // stamped 3 minutes ago, arriving now: counts in its own minute
      pv('/off', { sessionId: 'offline', timestamp: Date.parse(NOW) - 3 * MINUTE }),
      // one visit from Google moving between pages of the site: one visit for Google, not page views for Direct
      pv('/a', { sessionId: 'nav', referrer: 'https://www.google.com/' }),
      pv('/b', { sessionId: 'nav', referrer: 'https://a.example/a' }),
      pv('/c', { sessionId: 'nav', referrer: 'https://a.example/b' }),
    ]);
    await ingest(svc.url, p.keys.secret, pv('/bot', { sessionId: 'bot' }), { headers: { 'user-agent': GOOGLEBOT } });

    const r = await realtime(p.keys.secret);
    assert.equal(r.perMinute.length, 30);
    assert.deepEqual(r.perMinute, [...new Array(26).fill(1), 2, 1, 1, 4], 'one per minute, the offline one in its minute, three more now');
    assert.equal(r.pageviews, 34);
    assert.equal(r.visitors, 7, 'sessions of the last 5 minutes: rt36..rt40, offline and nav');
    assert.equal(Object.keys(r.pages).length, 10, 'top 10 pages');
    assert.deepEqual(r.sources, { Direct: 16, Google: 16 }, 'visits by source: rt11..rt40, offline and nav once each');
    assert.equal(r.pages['/p0'], 3, '/p0 at minutes 12, 24 and 36; none from the events stamped before the window');

    clock.advance(10 * MINUTE);
    const later = await realtime(p.keys.secret);
    assert.deepEqual(later.perMinute, [...new Array(16).fill(1), 2, 1, 1, 4, ...new Array(10).fill(0)]);
    assert.equal(later.visitors, 0);
  });

  test('survives a restart from a snapshot and from a full replay of the log', async () => {
    clock.set(NOW);
    const p = await createProject(svc.url, svc.adminKey);
    for (let i = 0; i < 6; i++) {
      clock.set(Date.parse(NOW) - i * MINUTE);
      await send(p.keys.secret, [pv(`/r${i}`, { sessionId: `s${i}`, eventParams: {} })]);
    }
    clock.set(NOW);
    const before = await realtime(p.keys.secret);
    const figures = await metrics(p.keys.secret, 'date=2026-11-21');
    assert.equal(before.visitors, 5);
    svc = await svc.restart(); // graceful: a snapshot is written and restored
    assert.deepEqual(await realtime(p.keys.secret), before);
    await svc.stop();
    rmSync(path.join(svc.dataDir, 'snapshots'), { recursive: true, force: true });
    svc = await startTestService({}, { now: clock.now, dataDir: svc.dataDir, adminKey: svc.adminKey });
    assert.deepEqual(await realtime(p.keys.secret), before, 'a full replay folds the same minutes');
    assert.deepEqual(await metrics(p.keys.secret, 'date=2026-11-21'), figures);
  });

  test('takes the same keys as GET /metrics: admin names the project, pk_ is refused, another project is forbidden', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    const other = await createProject(svc.url, svc.adminKey);
    assert.equal((await realtime(svc.adminKey, `?projectId=${p.project.id}`)).projectId, p.project.id);
    assertError(await api(svc.url, '/metrics/realtime', { key: svc.adminKey }), 400, 'invalid_request');
    assertError(await api(svc.url, '/metrics/realtime', { key: p.keys.publishable }), 403, 'forbidden');
    assertError(await api(svc.url, `/metrics/realtime?projectId=${other.project.id}`, { key: p.keys.secret }), 403, 'forbidden');
    assertError(await api(svc.url, '/metrics/realtime'), 401, 'unauthorized');
    assertError(await api(svc.url, '/metrics/realtime?window=60', { key: p.keys.secret }), 400, 'invalid_request');
    assertError(await api(svc.url, '/metrics/realtime', { key: p.keys.secret, method: 'POST', body: {} }), 405, 'method_not_allowed');
  });
});
