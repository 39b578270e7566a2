import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { check, rebuild } from '../src/engine/maintenance.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';
import { startProxy } from './forwarding-proxy.ts';
import { api, createProject, startTestService, todayUtc, type TestService } from './helpers.ts';

const BIN = fileURLToPath(new URL('../bin/analytics.js', import.meta.url));
const DAY_MS = 86_400_000;
const CHROME_WIN = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36';
const SAFARI_IPHONE = 'Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1';

let svc: TestService;
before(async () => {
  svc = await startTestService();
});
after(() => svc.destroy());

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function cli(args: string[], input?: string, url = svc.url): Promise<Run> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [BIN, ...args],
      { env: { PATH: process.env.PATH ?? '', ANALYTICS_URL: url, ANALYTICS_KEY: svc.adminKey }, timeout: 60_000, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr }),
    );
    if (input !== undefined) child.stdin!.end(input);
  });
}

const at = (date: string, hour: number, minute = 0) => Date.parse(`${date}T${String(hour).padStart(2, '0')}:${String(minute).padStart(2, '0')}:00Z`);

/** A day's answer without what names the project (and the ring, which keeps the last events received). */
async function dayFigures(key: string, date: string): Promise<Record<string, unknown>> {
  const res = await api(svc.url, `/metrics?date=${date}`, { key });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const { projectId: _p, recentEvents: _r, ...rest } = res.body as Record<string, unknown>;
  return rest;
}

async function history(key: string, projectId: string, events: unknown[]) {
  return api(svc.url, `/projects/${projectId}/history`, { key, body: events });
}

/** Waits until no day that took history is live (they are sealed seconds after their last history event). */
async function sealedOut(): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    await svc.service.engine.sealingIdle();
    if (svc.service.engine.historyDaysLive() === 0) return;
    if (Date.now() > deadline) assert.fail(`days still live: ${svc.service.engine.historyDaysLive()}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('POST /projects/{id}/history', () => {
  test('old events count in their own day, once per eventId, not in realtime nor against the allowance', async () => {
    const p = await createProject(svc.url, svc.adminKey, { monthly_quota: 5 });
    const id = p.project.id;
    const events = Array.from({ length: 20 }, (_, i) => ({
      event: 'page_view',
      url: `https://shop.example/p${i % 3}`,
      referrer: i % 2 ? 'https://www.google.com/search' : '',
      sessionId: `s${i % 4}`,
      timestamp: at('2019-05-01', 10, i),
      eventId: `old-${i}`,
    }));
    const first = await history(p.keys.secret, id, events);
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.deepEqual(first.body, { ok: true, accepted: 20, duplicates: 0 });
    const again = await history(svc.adminKey, id, [...events.slice(0, 5), { ...events[0], eventId: 'new-1' }]);
    assert.deepEqual(again.body, { ok: true, accepted: 1, duplicates: 5 });
    const m = await dayFigures(p.keys.secret, '2019-05-01');
    assert.equal(m.pageviews, 21);
    assert.equal(m.sessions, 4);
    assert.deepEqual(m.trafficSources, { Direct: 2, Google: 2 });
    // not live traffic
    const rt = await api(svc.url, '/metrics/realtime', { key: p.keys.secret });
    assert.equal(rt.body.pageviews, 0);
    // the allowance of 5 is untouched: live ingest still takes 5 events
    const live = await api(svc.url, '/analytics', { key: p.keys.secret, body: Array.from({ length: 5 }, () => ({ event: 'signup' })) });
    assert.equal(live.status, 200, JSON.stringify(live.body));
    // the ring keeps history by its day: a read of today does not show it, a read of its day does
    const today = await api(svc.url, '/metrics', { key: p.keys.secret });
    assert.ok((today.body.recentEvents as Array<{ event: string }>).every((e) => e.event === 'signup'));
    const then = await api(svc.url, '/metrics?date=2019-05-01', { key: p.keys.secret });
    assert.equal((then.body.recentEvents as unknown[]).length, 21);
  });

  test('the rules: a timestamp is required, from 2000-01-01 to 5 minutes ahead; keys ak_ and the project\'s sk_ only', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    const id = p.project.id;
    const bad = await history(p.keys.secret, id, [
      { event: 'page_view', url: '/a', timestamp: at('2019-01-01', 1) },
      { event: 'page_view', url: '/b' },
      { event: 'page_view', url: '/c', timestamp: '1999-12-31T23:59:59Z' },
      { event: 'page_view', url: '/d', timestamp: Date.now() + 3_600_000 },
      { event: 'x', timestamp: at('2019-01-01', 1), browser: '' },
      { event: 'page_view', url: '/e', timestamp: at('2019-01-01', 1) / 1000 },
    ]);
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.code, 'invalid_event');
    const details = bad.body.error.details as Array<{ index: number; path: string; message: string }>;
    const byIndex = new Map(details.map((d) => [d.index, d.path]));
    assert.deepEqual([...byIndex.keys()].sort(), [1, 2, 3, 4, 5]);
    assert.equal(byIndex.get(1), 'timestamp');
    assert.equal(byIndex.get(4), 'browser');
    assert.match(details.find((d) => d.index === 2)!.message, /before 2000-01-01/);
    // a timestamp in seconds reads as 1970: history says so, as live ingest does
    assert.equal(byIndex.get(5), 'timestamp');
    assert.match(details.find((d) => d.index === 5)!.message, /looks like seconds since epoch \(1546304400\); milliseconds since epoch are expected \(1546304400000\)/);
    assert.equal((await dayFigures(p.keys.secret, '2019-01-01')).pageviews, 0, 'a refused batch stores nothing');
    assert.equal((await history(p.keys.publishable, id, [{ event: 'x', timestamp: at('2019-01-01', 1) }])).status, 403);
    const other = await createProject(svc.url, svc.adminKey);
    assert.equal((await history(other.keys.secret, id, [{ event: 'x', timestamp: at('2019-01-01', 1) }])).status, 403);
    assert.equal((await history(p.keys.secret, 'p_nope', [{ event: 'x', timestamp: at('2019-01-01', 1) }])).status, 403);
    assert.equal((await history(svc.adminKey, 'p_nope', [{ event: 'x', timestamp: at('2019-01-01', 1) }])).status, 404);
    assert.equal((await history(p.keys.secret, id, [])).status, 400);
    assert.equal((await api(svc.url, `/projects/${id}/export?from=2019-01-01&to=2019-01-02&x=1`, { key: p.keys.secret })).status, 400);
    assert.equal((await api(svc.url, `/projects/${id}/export?from=2009-01-01&to=2019-12-31`, { key: p.keys.secret })).status, 400, 'over ten years');
    assert.equal((await api(svc.url, `/projects/${id}/export?from=2010-01-01&to=2019-12-31`, { key: p.keys.secret })).status, 200);
    assert.equal((await api(svc.url, `/projects/${id}/export?from=2019-01-02&to=2019-01-01`, { key: p.keys.secret })).status, 400);
  });

  test('a day imported after it was sealed counts exactly once, and restart and rebuild keep it', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    const id = p.project.id;
    const key = p.keys.secret;
    const date = '2018-03-04';
    const part = (from: number, n: number) =>
      Array.from({ length: n }, (_, i) => ({ event: 'page_view', url: `/p${(from + i) % 5}`, sessionId: `v${from + i}`, userId: `u${(from + i) % 30}`, timestamp: at(date, 8, (from + i) % 60), eventId: `e${from + i}` }));
    assert.equal((await history(key, id, part(0, 40))).body.accepted, 40);
    await sealedOut();
    assert.ok(svc.service.engine.stats().sealedDays > 0);
    const sealedOnce = await dayFigures(key, date);
    assert.equal(sealedOnce.pageviews, 40);
    // more of the same day, and a repeat of the first part
    const second = await history(key, id, [...part(40, 20), ...part(0, 10)]);
    assert.deepEqual(second.body, { ok: true, accepted: 20, duplicates: 10 });
    await sealedOut();
    const whole = await dayFigures(key, date);
    assert.equal(whole.pageviews, 60);
    assert.equal(whole.sessions, 60);
    const month = await api(svc.url, '/metrics?from=2018-03-01&to=2018-03-31', { key });
    assert.equal(month.body.pageviews, 60, 'the month rollup holds both segments');
    assert.equal(month.body.daily.find((d: { date: string }) => d.date === date).pageviews, 60);

    svc = await svc.restart();
    assert.deepEqual(await dayFigures(key, date), whole);
    await svc.stop();
    const checked = await check(svc.dataDir);
    assert.ok(checked.ok, checked.problems.join('\n'));
    await rebuild(svc.dataDir);
    svc = await svc.restart();
    assert.deepEqual(await dayFigures(key, date), whole);
    assert.equal((await api(svc.url, '/metrics?from=2018-03-01&to=2018-03-31', { key })).body.pageviews, 60);
    // the ids outlive restarts and rebuilds
    assert.deepEqual((await history(key, id, part(0, 60))).body, { ok: true, accepted: 0, duplicates: 60 });
  });

  test('a day sent in consecutive batches is sealed whole: a visit across two batches counts once', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    const key = p.keys.secret;
    const date = '2017-07-07';
    const events = Array.from({ length: 900 }, (_, i) => ({ event: 'page_view', url: `/x${i % 9}`, sessionId: `s${Math.floor(i / 3)}`, timestamp: at(date, 0) + i * 60_000 }));
    for (let i = 0; i < events.length; i += 200) assert.equal((await history(key, p.project.id, events.slice(i, i + 200))).status, 200);
    await sealedOut();
    const m = await dayFigures(key, date);
    assert.equal(m.sessions, 300);
    assert.equal(m.bounceRate, '0.0%');
  });
});

describe('export and import', () => {
  test('a project exported and imported into an empty one answers every day the same (sources and browsers included); a re-run counts nothing twice', async () => {
    const a = await createProject(svc.url, svc.adminKey, { tracked_props: ['plan'] });
    const aKey = a.keys.secret;
    // live traffic of the last days, derived values from the request
    const sentOn: string[] = []; // the UTC date of each batch, taken as it is sent (the test may run over midnight)
    for (const [offset, ua] of [[2, CHROME_WIN], [1, SAFARI_IPHONE], [0, CHROME_WIN]] as const) {
      let ts = Date.now() - offset * DAY_MS - 60_000;
      if (todayUtc(ts) !== todayUtc(ts + 4000)) ts -= 5000; // a batch's five events on one date
      sentOn.push(todayUtc(ts));
      const batch = [
        { event: 'page_view', url: 'https://shop.example/?utm_source=newsletter&utm_medium=email&utm_campaign=nov', timestamp: ts },
        { event: 'page_view', url: 'https://shop.example/pricing', referrer: 'https://shop.example/', timestamp: ts + 1000 },
        { event: 'signup', eventParams: { plan: 'pro', seats: 3 }, timestamp: ts + 2000, country: 'de' },
        { event: 'purchase', eventParams: { value: 12.5, currency: 'eur' }, items: [{ item_id: 'sku1', price: 12.5, quantity: 1 }], timestamp: ts + 3000 },
        { event: 'page_view', url: 'https://shop.example/blog', referrer: 'https://news.ycombinator.com/item?id=1', sessionId: `hn-${offset}`, timestamp: ts + 4000 },
      ];
      const res = await api(svc.url, '/analytics', { key: aKey, body: batch, headers: { 'user-agent': ua } });
      assert.equal(res.status, 200, JSON.stringify(res.body));
    }
    // and old history with its own derived values
    const old = Array.from({ length: 30 }, (_, i) => ({
      event: i % 5 === 4 ? 'download' : 'page_view',
      url: i % 5 === 4 ? undefined : `https://shop.example/doc/${i % 4}`,
      referrer: i % 3 === 0 ? 'https://twitter.com/x' : undefined,
      sessionId: `old${i % 7}`,
      timestamp: at(i < 15 ? '2020-02-28' : '2020-02-29', 12, i),
      browser: i % 2 ? 'Firefox' : 'Chrome',
      os: 'Linux',
      device: 'desktop',
      country: 'FR',
    }));
    assert.equal((await history(aKey, a.project.id, old)).body.accepted, 30);
    await sealedOut();

    const from = '2020-01-01';
    const to = todayUtc();
    const exported = await cli(['export', '--raw', '--format', 'ndjson', '--project', a.project.id, '--from', from, '--to', to, '--key', aKey]);
    assert.equal(exported.code, 0, exported.stderr);
    const lines = exported.stdout.trim().split('\n');
    assert.equal(lines.length, 45);
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.ok(parsed.every((e, i) => i === 0 || (e.timestamp as number) >= (parsed[i - 1]!.timestamp as number)), 'time order');
    assert.ok(parsed.every((e) => typeof e.timestamp === 'number' && e.url !== '' && e.ts === undefined));
    // the endpoint streams the same lines
    const http = await fetch(`${svc.url}/projects/${a.project.id}/export?from=${from}&to=${to}`, { headers: { authorization: `Bearer ${svc.adminKey}` } });
    assert.equal(http.status, 200);
    assert.match(http.headers.get('content-type') ?? '', /^application\/x-ndjson/);
    assert.deepEqual((await http.text()).trim().split('\n'), lines);
    // local export of the data directory writes the same lines too
    const local = await cli(['export', '--raw', '--format', 'ndjson', '--project', a.project.id, '--from', from, '--to', to, '--data-dir', svc.dataDir]);
    assert.equal(local.code, 0, local.stderr);
    assert.deepEqual(local.stdout.trim().split('\n'), lines);

    const b = await createProject(svc.url, svc.adminKey, { tracked_props: ['plan'] });
    const file = path.join(svc.dataDir, 'a.ndjson');
    writeFileSync(file, exported.stdout);
    const imported = await cli(['import', '--project', b.project.id, file, '--key', b.keys.secret, '--json']);
    assert.equal(imported.code, 0, imported.stderr);
    assert.deepEqual(JSON.parse(imported.stdout), { ok: true, lines: 45, accepted: 45, duplicates: 0, sent: 45, refused: [] });
    await sealedOut();
    for (const date of ['2020-02-28', '2020-02-29', ...sentOn]) {
      const want = await dayFigures(aKey, date);
      assert.ok((want.pageviews as number) > 0, date);
      assert.deepEqual(await dayFigures(b.keys.secret, date), want, date);
    }
    // history reaches the column store: POST /query over the imported old days says what /metrics says
    for (const key of [aKey, b.keys.secret]) {
      for (const q of [{ date: '2020-02-28' }, { date: '2020-02-29' }, { from: '2020-02-28', to: '2020-02-29' }] as Array<Record<string, string>>) {
        const asked = await api(svc.url, '/query', { key, body: { ...q, metrics: ['visitors', 'visits', 'pageviews'] } });
        assert.equal(asked.status, 200, JSON.stringify(asked.body));
        const m = (await api(svc.url, `/metrics?${new URLSearchParams(q)}`, { key })).body;
        assert.ok(m.pageviews > 0);
        assert.deepEqual(asked.body.totals, [m.users, m.sessions, m.pageviews], JSON.stringify(q));
      }
    }
    const range = `/metrics?from=${sentOn[0]}&to=${sentOn[2]}`;
    const ra = (await api(svc.url, range, { key: aKey })).body;
    const rb = (await api(svc.url, range, { key: b.keys.secret })).body;
    assert.deepEqual({ ...rb, projectId: '', recentEvents: [] }, { ...ra, projectId: '', recentEvents: [] });
    assert.ok(Object.keys(ra.browsers).length >= 2 && ra.trafficSources['Hacker News'] === 3 && ra.trafficSources.newsletter === 3);

    // the same file from stdin: nothing counts twice
    const rerun = await cli(['import', '--project', b.project.id, '-', '--key', b.keys.secret, '--json'], exported.stdout);
    assert.equal(rerun.code, 0, rerun.stderr);
    assert.equal(JSON.parse(rerun.stdout).duplicates, 45);
    assert.deepEqual(await dayFigures(b.keys.secret, '2020-02-28'), await dayFigures(aKey, '2020-02-28'));
  });

  test('CSV import; refused lines are reported with their numbers and never stop the rest', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    const csv = [
      'timestamp,event,url,referrer,sessionId,eventParams,param.plan',
      '2015-06-01T10:00:00Z,page_view,https://a.example/,https://www.google.com/,s1,,',
      '2015-06-01T10:01:00Z,page_view,/b,,s1,"{""k"":1}",',
      ',page_view,/no-time,,s2,,', // line 4: no timestamp
      '1433152920000,signup,,,s1,,pro',
      '2015-06-01T10:03:00Z,page_view,,,s3,,', // line 6: page_view without url
    ].join('\n');
    const file = path.join(svc.dataDir, 'events.csv');
    writeFileSync(file, `${csv}\n`);
    const run = await cli(['import', '--project', p.project.id, file, '--key', p.keys.secret, '--json']);
    assert.equal(run.code, 1, 'refused lines: exit 1 after the summary');
    const summary = JSON.parse(run.stdout);
    assert.equal(summary.accepted, 3);
    assert.deepEqual(summary.refused.map((r: { line: number }) => r.line), [4, 6]);
    assert.match(summary.refused[0].message, /timestamp/);
    const m = await dayFigures(p.keys.secret, '2015-06-01');
    assert.equal(m.pageviews, 2);
    assert.deepEqual(m.events, { page_view: 2, signup: 1 });
    assert.deepEqual(m.trafficSources, { Google: 1 });

    const nd = ['{"event":"a","timestamp":1433152920000}', 'not json', '{"event":"b"}', '[1]', '{"event":"c","timestamp":1433152920001}'].join('\n');
    const text = await cli(['import', '--project', p.project.id, '-', '--key', p.keys.secret], nd);
    assert.equal(text.code, 1);
    assert.match(text.stdout, /2 accepted, 0 duplicates \(seen before\), 3 refused/);
    assert.match(text.stdout, /line 2: not JSON/);
    assert.match(text.stdout, /line 3: timestamp: is required/);
    assert.match(text.stdout, /line 4: not a JSON object/);
  });

  test('analytics import starts each lane with small batches and doubles them up to 500 events', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    const proxy = await startProxy(svc.url);
    try {
      const start = at('2016-03-01', 0);
      const lines = Array.from({ length: 3000 }, (_, i) => JSON.stringify({ event: 'page_view', url: `https://a.example/${i % 7}`, sessionId: `s${i % 40}`, timestamp: start + i * 1000, eventId: `ramp-${i}` }));
      const run = await cli(['import', '--project', p.project.id, '-', '--key', p.keys.secret, '--json'], lines.join('\n'), proxy.origin);
      assert.equal(run.code, 0, run.stderr);
      assert.equal(JSON.parse(run.stdout).accepted, 3000);
      const sizes = proxy.log.filter((x) => x.path.endsWith('/history')).map((x) => (JSON.parse(x.body) as unknown[]).length);
      assert.equal(sizes.reduce((a, b) => a + b, 0), 3000, 'every line sent once');
      // a lane's second batch waits for its first answer, so the first exchange is a first batch
      assert.ok(sizes[0]! <= 16, `first batch of ${sizes[0]} events`);
      for (const step of [16, 32, 64, 128, 256]) assert.ok(sizes.includes(step), `a batch of ${step} in ${sizes.join(', ')}`);
      assert.equal(Math.max(...sizes), 500);
      assert.equal((await dayFigures(p.keys.secret, '2016-03-01')).pageviews, 3000);
    } finally {
      await proxy.close();
    }
  });

  test('deleting a project erases its history and the ids it remembered', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    const id = p.project.id;
    await history(p.keys.secret, id, Array.from({ length: 10 }, (_, i) => ({ event: 'e', timestamp: at('2014-01-01', 1, i), eventId: `gone-${i}` })));
    await sealedOut();
    await svc.stop();
    const held = (dir: string) => {
      const store = LogStore.open(dir, 'flush', { readOnly: true });
      try {
        return store.openHistoryIds().count(id);
      } finally {
        void store.close();
      }
    };
    assert.equal(held(svc.dataDir), 10);
    svc = await svc.restart();
    assert.equal((await api(svc.url, `/projects/${id}`, { key: svc.adminKey, method: 'DELETE' })).status, 200);
    assert.equal((await api(svc.url, `/metrics?date=2014-01-01&projectId=${id}`, { key: svc.adminKey })).status, 404);
    // the erasure runs after the answer; a snapshot waits for it (a stop would pause it until the next start)
    await svc.service.engine.snapshotNow();
    await svc.stop();
    assert.equal(held(svc.dataDir), 0);
    svc = await svc.restart();
  });
});
