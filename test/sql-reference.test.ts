import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { testClock } from './contract-helpers.ts';
import { api, createProject, startTestService, type TestService } from './helpers.ts';

/**
 * 20,000 generated events over five days go in over HTTP; the same events go into SQLite, and every figure of
 * /metrics, per day and for ranges, must equal what plain SQL computes from the rows.
 */

const EVENTS = 20_000;
const DAYS = 5;
const DAY_MS = 86_400_000;

/** Deterministic generator (mulberry32) so a failure reproduces. */
function rng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const REFERRERS: Array<[string, string]> = [
  ['', 'Direct'],
  ['https://www.google.com/', 'Google'],
  ['https://news.ycombinator.com/item?id=1', 'Hacker News'],
  ['https://blog.example/post', 'blog.example'],
  ['https://site.example/other', 'Direct'], // self-referral
];

interface Row {
  seq: number;
  day: string;
  event: string;
  path: string;
  session: string;
  user: string;
  source: string;
  country: string;
  device: string;
}

let svc: TestService;
let key: string;
let dir: string;
let db: string;
let days: string[];

before(async () => {
  svc = await startTestService();
  ({ keys: { secret: key } } = await createProject(svc.url, svc.adminKey, { monthly_quota: 0 }));
  dir = mkdtempSync(path.join(tmpdir(), 'analytics-sql-'));
  db = path.join(dir, 'ref.db');

  const rand = rng(42);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const now = Date.now();
  const start = Math.floor(now / DAY_MS) * DAY_MS - (DAYS - 1) * DAY_MS;
  days = Array.from({ length: DAYS }, (_, i) => new Date(start + i * DAY_MS).toISOString().slice(0, 10));
  const span = now - start - 1000;
  const stamps = Array.from({ length: EVENTS }, () => start + Math.floor(rand() * span)).sort((x, y) => x - y);

  const events: object[] = [];
  const rows: Row[] = [];
  stamps.forEach((ts, i) => {
    const s = Math.floor(rand() * 3000);
    const userId = s % 3 === 0 ? undefined : `u${s % 1500}`;
    const [referrer, source] = pick(REFERRERS);
    const event = rand() < 0.7 ? 'page_view' : pick(['signup', 'click', 'download']);
    const p = pick(['/', '/pricing', '/docs', '/blog/a', '/blog/b']);
    const country = pick(['de', 'US', 'fr', 'JP']);
    const device = pick(['Desktop', 'mobile', 'tablet']);
    const e: Record<string, unknown> = { event, url: `https://site.example${p}?x=${i}`, referrer, sessionId: `s${s}`, country, device, timestamp: ts };
    if (userId) e.userId = userId;
    events.push(e);
    rows.push({
      seq: i,
      day: new Date(ts).toISOString().slice(0, 10),
      event,
      path: p,
      session: `s${s}`,
      user: userId ? `u:${userId}` : `s:s${s}`,
      source,
      country: country.toUpperCase(),
      device: device.toLowerCase(),
    });
  });
  for (let i = 0; i < events.length; i += 500) {
    const r = await api(svc.url, '/analytics', { key, body: { events: events.slice(i, i + 500) } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }

  const csv = rows.map((r) => [r.seq, r.day, r.event, r.path, r.session, r.user, r.source, r.country, r.device].join(',')).join('\n');
  writeFileSync(path.join(dir, 'rows.csv'), `${csv}\n`);
  execFileSync('sqlite3', [db], {
    input: `CREATE TABLE e(seq INTEGER PRIMARY KEY, day TEXT, event TEXT, path TEXT, session TEXT, user TEXT, source TEXT, country TEXT, device TEXT);\n.mode csv\n.import ${path.join(dir, 'rows.csv')} e\n`,
  });
});

after(async () => {
  await svc.destroy();
  rmSync(dir, { recursive: true, force: true });
});

function sql<T>(query: string, file = db): T[] {
  const out = execFileSync('sqlite3', ['-json', file, query], { encoding: 'utf8' });
  return out.trim() === '' ? [] : (JSON.parse(out) as T[]);
}

function breakdown(query: string, file = db): Record<string, number> {
  return Object.fromEntries(sql<{ k: string; n: number }>(query, file).map((r) => [r.k, r.n]));
}

function expected(from: string, to: string, file = db) {
  const w = `day BETWEEN '${from}' AND '${to}'`;
  const one = <T>(q: string) => sql<T>(q, file)[0]!;
  const { users } = one<{ users: number }>(`SELECT COUNT(DISTINCT user) users FROM e WHERE ${w}`);
  const { sessions } = one<{ sessions: number }>(`SELECT COUNT(*) sessions FROM (SELECT DISTINCT session, day FROM e WHERE ${w})`);
  const { pageviews } = one<{ pageviews: number }>(`SELECT COUNT(*) pageviews FROM e WHERE ${w} AND event = 'page_view'`);
  const { b, s } = one<{ b: number | null; s: number | null }>(
    `SELECT SUM(pv = 1) b, SUM(pv >= 1) s FROM (SELECT SUM(event = 'page_view') pv FROM e WHERE ${w} GROUP BY session, day)`,
  );
  const first = `(SELECT MIN(seq) seq FROM e WHERE ${w} GROUP BY session, day) f JOIN e USING (seq)`;
  return {
    users,
    sessions,
    pageviews,
    bounceRate: s ? `${(((b ?? 0) / s) * 100).toFixed(1)}%` : '0.0%',
    trafficSources: breakdown(`SELECT e.source k, COUNT(*) n FROM ${first} GROUP BY k`, file),
    countries: breakdown(`SELECT e.country k, COUNT(*) n FROM ${first} GROUP BY k`, file),
    devices: breakdown(`SELECT e.device k, COUNT(*) n FROM ${first} GROUP BY k`, file),
    pages: breakdown(`SELECT path k, COUNT(*) n FROM e WHERE ${w} AND event = 'page_view' GROUP BY k`, file),
    events: breakdown(`SELECT event k, COUNT(*) n FROM e WHERE ${w} GROUP BY k`, file),
  };
}

async function actual(query: string, on = svc, secret = key) {
  const r = await api(on.url, `/metrics?${query}`, { key: secret });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const { users, sessions, pageviews, bounceRate, trafficSources, countries, devices, pages, events } = r.body;
  return { figures: { users, sessions, pageviews, bounceRate, trafficSources, countries, devices, pages, events }, daily: r.body.daily };
}

test('metrics of 20,000 events equal an independent SQL aggregation for every day', async () => {
  for (const day of days) {
    const { figures } = await actual(`date=${day}`);
    assert.deepEqual(figures, expected(day, day), day);
  }
});

test('metrics equal the SQL aggregation for ranges, and the daily series matches each day', async () => {
  for (const [from, to] of [[days[0]!, days[DAYS - 1]!], [days[1]!, days[3]!]] as const) {
    const { figures, daily } = await actual(`from=${from}&to=${to}`);
    assert.deepEqual(figures, expected(from, to), `${from}..${to}`);
    for (const d of daily as Array<{ date: string; users: number; sessions: number; pageviews: number; bounceRate: string }>) {
      const e = expected(d.date, d.date);
      assert.deepEqual([d.users, d.sessions, d.pageviews, d.bounceRate], [e.users, e.sessions, e.pageviews, e.bounceRate], d.date);
    }
  }
});

test('figures survive a restart unchanged', async () => {
  const range = `from=${days[0]}&to=${days[DAYS - 1]}`;
  const beforeRestart = (await api(svc.url, `/metrics?${range}`, { key })).body;
  svc = await svc.restart();
  const afterRestart = (await api(svc.url, `/metrics?${range}`, { key })).body;
  assert.deepEqual(afterRestart, beforeRestart);
});

describe('across the seal boundary', () => {
  /** Sealed days (written to LMDB, dropped from the heap) and live days in one range give what SQL gives. */
  const SEALED_DAYS = 5;
  const LIVE_DAYS = 3;
  /** receive time moves on this far: the first days' windows (31 days + margins) close and they are sealed */
  const LATER_MS = 36 * DAY_MS;
  const clock = testClock(Math.floor(Date.now() / DAY_MS) * DAY_MS - 60 * DAY_MS);
  let sealedSvc: TestService;
  let secret: string;
  let file: string;
  let allDays: string[];

  function traffic(rand: () => number, start: number, n: number, count: number, offset: number): { events: object[]; rows: Row[] } {
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const stamps = Array.from({ length: count }, () => start + Math.floor(rand() * (n * DAY_MS - 1000))).sort((x, y) => x - y);
    const events: object[] = [];
    const rows: Row[] = [];
    stamps.forEach((ts, i) => {
      const s = Math.floor(rand() * 800);
      const userId = s % 3 === 0 ? undefined : `u${s % 400}`;
      const [referrer, source] = pick(REFERRERS);
      const event = rand() < 0.7 ? 'page_view' : pick(['signup', 'click']);
      const p = pick(['/', '/pricing', '/docs']);
      const country = pick(['de', 'US']);
      const device = pick(['Desktop', 'mobile']);
      const e: Record<string, unknown> = { event, url: `https://site.example${p}`, referrer, sessionId: `s${s}`, country, device, timestamp: ts };
      if (userId) e.userId = userId;
      events.push(e);
      rows.push({ seq: offset + i, day: new Date(ts).toISOString().slice(0, 10), event, path: p, session: `s${s}`, user: userId ? `u:${userId}` : `s:s${s}`, source, country: country.toUpperCase(), device: device.toLowerCase() });
    });
    return { events, rows };
  }

  async function send(events: object[]): Promise<void> {
    for (let i = 0; i < events.length; i += 500) {
      const r = await api(sealedSvc.url, '/analytics', { key: secret, body: { events: events.slice(i, i + 500) } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
  }

  before(async () => {
    sealedSvc = await startTestService({}, { now: clock.now });
    ({ keys: { secret } } = await createProject(sealedSvc.url, sealedSvc.adminKey, { monthly_quota: 0 }));
    const rand = rng(7);
    const t0 = clock.now();
    const first = traffic(rand, t0 - SEALED_DAYS * DAY_MS, SEALED_DAYS, 4000, 0);
    await send(first.events);
    clock.advance(LATER_MS);
    const second = traffic(rand, clock.now() - LIVE_DAYS * DAY_MS, LIVE_DAYS, 3000, 4000);
    await send(second.events);
    await sealedSvc.service.engine.sealingIdle();
    allDays = [...new Set([...first.rows, ...second.rows].map((r) => r.day))].sort();
    file = path.join(dir, 'sealed.db');
    const csv = [...first.rows, ...second.rows].map((r) => [r.seq, r.day, r.event, r.path, r.session, r.user, r.source, r.country, r.device].join(',')).join('\n');
    writeFileSync(path.join(dir, 'sealed.csv'), `${csv}\n`);
    execFileSync('sqlite3', [file], {
      input: `CREATE TABLE e(seq INTEGER PRIMARY KEY, day TEXT, event TEXT, path TEXT, session TEXT, user TEXT, source TEXT, country TEXT, device TEXT);\n.mode csv\n.import ${path.join(dir, 'sealed.csv')} e\n`,
    });
  });

  after(async () => {
    await sealedSvc.destroy();
  });

  async function check(): Promise<void> {
    const firstDay = allDays[0]!;
    const lastDay = allDays.at(-1)!;
    const lastSealed = allDays[SEALED_DAYS - 1]!;
    const firstLive = allDays[SEALED_DAYS]!;
    const ranges = [[firstDay, lastDay], [firstDay, lastSealed], [allDays[2]!, firstLive], [lastSealed, lastSealed], [firstLive, lastDay]] as const;
    // Every answer first: the SQL below blocks this process for seconds, longer than the server keeps an idle connection.
    const answers: Array<Awaited<ReturnType<typeof actual>>> = [];
    for (const [from, to] of ranges) answers.push(await actual(`from=${from}&to=${to}`, sealedSvc, secret));
    for (const [i, [from, to]] of ranges.entries()) {
      const { figures, daily } = answers[i]!;
      assert.deepEqual(figures, expected(from, to, file), `${from}..${to}`);
      for (const d of daily as Array<{ date: string; users: number; sessions: number; pageviews: number; bounceRate: string }>) {
        if (!allDays.includes(d.date)) {
          assert.deepEqual([d.users, d.sessions, d.pageviews], [0, 0, 0], d.date);
          continue;
        }
        const e = expected(d.date, d.date, file);
        assert.deepEqual([d.users, d.sessions, d.pageviews, d.bounceRate], [e.users, e.sessions, e.pageviews, e.bounceRate], d.date);
      }
    }
  }

  test('ranges over sealed days, live days and both equal the SQL aggregation', async () => {
    await check();
  });

  test('and still do after a restart (sealed days are read from LMDB, live days from the snapshot)', async () => {
    sealedSvc = await sealedSvc.restart();
    await check();
  });
});
