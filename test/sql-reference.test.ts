import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { testClock } from './contract-helpers.ts';
import { api, createProject, startTestService, type TestService } from './helpers.ts';
import { rng } from '../bench/lib/seeded-random.ts';

/**
 * 20,000 generated events over five days go in over HTTP; the same events go into SQLite, and every figure of
 * /metrics, per day and for ranges, with and without `compare`, must equal what plain SQL computes from the rows.
 */

const EVENTS = 20_000;
const DAYS = 5;
const DAY_MS = 86_400_000;

/** Each batch goes with one User-Agent; the names are the parser's (as asserted in enrich.test.ts), curl names none. */
const AGENTS: Array<[string, string, string]> = [
  ['Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36', 'Chrome', 'Windows'],
  ['Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0', 'Firefox', 'Ubuntu'],
  ['Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1', 'Mobile Safari', 'iOS'],
  ['curl/8.5.0', 'Unknown', 'Unknown'],
];
const BATCH = 500;
const TRACKED = ['plan', 'seats'];

const REFERRERS: Array<[string, string]> = [
  ['', 'Direct'],
  ['https://www.google.com/', 'Google'],
  ['https://news.ycombinator.com/item?id=1', 'Hacker News'],
  ['https://blog.example/post', 'blog.example'],
  ['https://site.example/other', 'Direct'], // self-referral
];

interface Row {
  seq: number;
  ts: number;
  day: string;
  event: string;
  path: string;
  session: string;
  user: string;
  source: string;
  country: string;
  device: string;
  browser: string;
  os: string;
  medium: string;
  campaign: string;
  value: number | '';
  currency: string;
  plan: string;
  seats: string;
}

let svc: TestService;
let key: string;
let dir: string;
let db: string;
let days: string[];

/**
 * Events with every field the figures need (insights, revenue, props included), `count` stamps in [start, start+span),
 * sessions from `sessions` ids; rows carry what SQL needs, `seq` from `offset`. Each batch of BATCH goes with one
 * User-Agent (send), so a row's browser and OS follow from its index.
 */
function generate(rand: () => number, start: number, span: number, count: number, offset: number, sessions: number): { events: object[]; rows: Row[] } {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const stamps = Array.from({ length: count }, () => start + Math.floor(rand() * span)).sort((x, y) => x - y);
  // Some events arrive out of time order (an offline queue flushed late): a visit's first event by time may come later.
  for (let i = 0; i < count; i++) {
    if (rand() < 0.1) {
      const j = Math.floor(rand() * count);
      [stamps[i], stamps[j]] = [stamps[j]!, stamps[i]!];
    }
  }
  const events: object[] = [];
  const rows: Row[] = [];
  stamps.forEach((ts, i) => {
    const s = Math.floor(rand() * sessions);
    // Some visits sign in part way (only some of their events carry the userId), so visitor != any event's user.
    const userId = s % 3 === 0 || (s % 3 === 1 && rand() < 0.5) ? undefined : `u${s % (sessions / 2)}`;
    const [referrer, source] = pick(REFERRERS);
    const event = rand() < 0.7 ? 'page_view' : pick(['signup', 'click', 'download', 'purchase']);
    const p = pick(['/', '/pricing', '/docs', '/blog/a', '/blog/b']);
    const country = pick(['de', 'US', 'fr', 'JP']);
    const device = pick(['Desktop', 'mobile', 'tablet']);
    const medium = pick(['', '', 'email', 'cpc']);
    const campaign = pick(['', 'launch', 'black friday']);
    const utm = `${medium ? `&utm_medium=${medium}` : ''}${campaign ? `&utm_campaign=${encodeURIComponent(campaign)}` : ''}`;
    const params: Record<string, unknown> = {};
    // Purchases: a valid value and currency most of the time, sometimes a currency or value that does not count.
    if (event === 'purchase') Object.assign(params, { value: pick([Math.round(rand() * 10_000) / 100, '12.50']), currency: pick(['EUR', 'usd', 'EURO']) });
    if (rand() < 0.3) params.plan = pick(['free', 'pro', 'team']);
    if (rand() < 0.2) params.seats = pick([1, 5, 10]);
    const e: Record<string, unknown> = { event, url: `https://site.example${p}?x=${i}${utm}`, referrer, sessionId: `s${s}`, country, device, timestamp: ts };
    if (Object.keys(params).length > 0) e.eventParams = params;
    if (userId) e.userId = userId;
    events.push(e);
    const [, browser, os] = AGENTS[Math.floor(i / BATCH) % AGENTS.length]!;
    const value = typeof params.value === 'number' ? params.value : '';
    rows.push({
      seq: offset + i,
      ts,
      day: new Date(ts).toISOString().slice(0, 10),
      event,
      path: p,
      session: `s${s}`,
      user: userId ? `u:${userId}` : `s:s${s}`,
      source,
      country: country.toUpperCase(),
      device: device.toLowerCase(),
      browser,
      os,
      medium,
      campaign,
      value,
      currency: String(params.currency ?? ''),
      plan: String(params.plan ?? ''),
      seats: params.seats === undefined ? '' : String(params.seats),
    });
  });
  return { events, rows };
}

/** Sends generated events in batches of BATCH, each with the User-Agent generate() assumed for it. */
async function send(url: string, secret: string, events: object[]): Promise<void> {
  for (let i = 0; i < events.length; i += BATCH) {
    const [ua] = AGENTS[Math.floor(i / BATCH) % AGENTS.length]!;
    const r = await api(url, '/analytics', { key: secret, body: { events: events.slice(i, i + BATCH) }, headers: { 'user-agent': ua } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }
}

/** The rows into a fresh SQLite table `e`. */
function load(file: string, rows: Row[]): void {
  const cols = ['seq', 'ts', 'day', 'event', 'path', 'session', 'user', 'source', 'country', 'device', 'browser', 'os', 'medium', 'campaign', 'value', 'currency', 'plan', 'seats'] as const;
  const csv = rows.map((r) => cols.map((c) => r[c]).join(',')).join('\n');
  const csvFile = `${file}.csv`;
  writeFileSync(csvFile, `${csv}\n`);
  execFileSync('sqlite3', [file], {
    input: `CREATE TABLE e(seq INTEGER PRIMARY KEY, ts INTEGER, day TEXT, event TEXT, path TEXT, session TEXT, user TEXT, source TEXT, country TEXT, device TEXT, browser TEXT, os TEXT, medium TEXT, campaign TEXT, value REAL, currency TEXT, plan TEXT, seats TEXT);\n.mode csv\n.import ${csvFile} e\nCREATE INDEX e_day ON e(day, session);\n`,
  });
}

before(async () => {
  svc = await startTestService();
  ({ keys: { secret: key } } = await createProject(svc.url, svc.adminKey, { monthly_quota: 0, tracked_props: TRACKED }));
  dir = mkdtempSync(path.join(tmpdir(), 'analytics-sql-'));
  db = path.join(dir, 'ref.db');

  const rand = rng(42);
  const now = Date.now();
  // whole UTC days ending yesterday: at any hour every day has a full day of traffic (today would hold minutes of it
  // just after midnight, too few for the checks below that every figure has something to compare)
  const start = Math.floor(now / DAY_MS) * DAY_MS - DAYS * DAY_MS;
  days = Array.from({ length: DAYS }, (_, i) => new Date(start + i * DAY_MS).toISOString().slice(0, 10));
  const { events, rows } = generate(rand, start, DAYS * DAY_MS - 1000, EVENTS, 0, 3000);
  await send(svc.url, key, events);
  load(db, rows);
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

/** Answers already computed, by file and range: the daily series and comparisons ask for the same days again. */
const answered = new Map<string, ReturnType<typeof computeExpected>>();

function expected(from: string, to: string, file = db): ReturnType<typeof computeExpected> {
  const range = `${file}|${from}|${to}`;
  let e = answered.get(range);
  if (!e) answered.set(range, (e = computeExpected(from, to, file)));
  return structuredClone(e);
}

function computeExpected(from: string, to: string, file: string) {
  const w = `day BETWEEN '${from}' AND '${to}'`;
  const one = <T>(q: string) => sql<T>(q, file)[0]!;
  // A visit's visitor: the user of its earliest event (equal times: the lowest seq).
  const { users } = one<{ users: number }>(
    `SELECT COUNT(DISTINCT user) users FROM (SELECT user, ROW_NUMBER() OVER (PARTITION BY session, day ORDER BY ts, seq) r FROM e WHERE ${w}) WHERE r = 1`,
  );
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
    entryPages: breakdown(
      `SELECT e.path k, COUNT(*) n FROM (SELECT MIN(seq) seq FROM e WHERE ${w} AND event = 'page_view' GROUP BY session, day) f JOIN e USING (seq) GROUP BY k`,
      file,
    ),
    browsers: breakdown(`SELECT e.browser k, COUNT(*) n FROM ${first} GROUP BY k`, file),
    operatingSystems: breakdown(`SELECT e.os k, COUNT(*) n FROM ${first} GROUP BY k`, file),
    utmMediums: breakdown(`SELECT e.medium k, COUNT(*) n FROM ${first} WHERE e.medium <> '' GROUP BY k`, file),
    utmCampaigns: breakdown(`SELECT e.campaign k, COUNT(*) n FROM ${first} WHERE e.campaign <> '' GROUP BY k`, file),
    revenue: Object.fromEntries(
      sql<{ k: string; total: number; n: number }>(
        `SELECT UPPER(currency) k, ROUND(SUM(value), 2) total, COUNT(*) n FROM e WHERE ${w} AND event = 'purchase' AND value <> '' AND LENGTH(currency) = 3 GROUP BY k`,
        file,
      ).map((r) => [r.k, { total: r.total, purchases: r.n }]),
    ),
    props: Object.fromEntries(TRACKED.map((k) => [k, breakdown(`SELECT ${k} k, COUNT(*) n FROM e WHERE ${w} AND ${k} <> '' GROUP BY k`, file)])),
  };
}

/** The headline figures of a range, as the `compare` object carries them. */
function expectedHeadline(from: string, to: string, file = db) {
  const { users, sessions, pageviews, bounceRate } = expected(from, to, file);
  const dates = sql<{ d: string }>(
    `WITH RECURSIVE r(d) AS (SELECT '${from}' UNION ALL SELECT date(d, '+1 day') FROM r WHERE d < '${to}') SELECT d FROM r`,
    file,
  ).map((r) => r.d);
  const daily = dates.map((date) => {
    const e = expected(date, date, file);
    return { date, users: e.users, sessions: e.sessions, pageviews: e.pageviews, bounceRate: e.bounceRate };
  });
  return { from, to, users, sessions, pageviews, bounceRate, daily };
}

/**
 * sqlite3 runs synchronously and blocks the event loop; one timer turn lets the service close keep-alive sockets that
 * timed out meanwhile, so the next fetch does not pick one that is about to close.
 */
const settle = () => new Promise<void>((resolve) => setTimeout(resolve, 20));

async function actual(query: string, on = svc, secret = key) {
  await settle();
  const r = await api(on.url, `/metrics?${query}`, { key: secret });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const { users, sessions, pageviews, bounceRate, trafficSources, countries, devices, pages, events } = r.body;
  const { entryPages, browsers, operatingSystems, utmMediums, utmCampaigns, revenue, props } = r.body;
  return {
    figures: { users, sessions, pageviews, bounceRate, trafficSources, countries, devices, pages, events, entryPages, browsers, operatingSystems, utmMediums, utmCampaigns, revenue, props },
    daily: r.body.daily,
    compare: r.body.compare,
  };
}

test('metrics of 20,000 events equal an independent SQL aggregation for every day', async () => {
  for (const day of days) {
    const { figures } = await actual(`date=${day}`);
    assert.deepEqual(figures, expected(day, day), day);
    // Every new figure has something to compare: none of them is trivially empty.
    assert.ok(Object.keys(figures.browsers).length >= 2, day);
    assert.deepEqual(Object.keys(figures.revenue).sort(), ['EUR', 'USD'], day);
    assert.ok(Object.keys(figures.utmMediums).length === 2 && Object.keys(figures.utmCampaigns).length === 2, day);
    assert.ok(Object.keys(figures.props.plan ?? {}).length === 3 && Object.keys(figures.props.seats ?? {}).length === 3, day);
    assert.ok(Object.keys(figures.entryPages).length === 5, day);
  }
});

test('metrics equal the SQL aggregation for ranges, and the daily series matches each day', async () => {
  for (const [from, to] of [[days[0]!, days[DAYS - 1]!], [days[1]!, days[3]!]] as const) {
    const { figures, daily } = await actual(`from=${from}&to=${to}`);
    assert.deepEqual(figures, expected(from, to), `${from}..${to}`);
    assert.deepEqual(Object.keys(figures.browsers).sort(), ['Chrome', 'Firefox', 'Mobile Safari', 'Unknown']);
    assert.deepEqual(Object.keys(figures.operatingSystems).sort(), ['Ubuntu', 'Unknown', 'Windows', 'iOS']);
    for (const d of daily as Array<{ date: string; users: number; sessions: number; pageviews: number; bounceRate: string }>) {
      const e = expected(d.date, d.date);
      assert.deepEqual([d.users, d.sessions, d.pageviews, d.bounceRate], [e.users, e.sessions, e.pageviews, e.bounceRate], d.date);
    }
  }
});

test('compare=previous and compare=year equal the SQL figures of the earlier range, for a day and for ranges', async () => {
  const sqlDay = (d: string, n: number) => sql<{ d: string }>(`SELECT date('${d}', '${n} days') d`)[0]!.d;
  const sqlYear = (d: string) => (d.slice(5) === '02-29' ? `${Number(d.slice(0, 4)) - 1}-02-28` : sql<{ d: string }>(`SELECT date('${d}', '-1 year') d`)[0]!.d);
  const cases: Array<[string, string]> = [[days[4]!, days[4]!], [days[3]!, days[4]!], [days[2]!, days[4]!]];
  // Every answer first, then the (slow, synchronous) SQL, so no request waits behind sqlite3 runs.
  const answers = [];
  for (const [from, to] of cases) {
    const previous = await actual(`from=${from}&to=${to}&compare=previous`);
    const year = await actual(`from=${from}&to=${to}&compare=year`);
    const none = await actual(`from=${from}&to=${to}`);
    answers.push({ from, to, previous, year, none });
  }
  await settle();
  const bad = await api(svc.url, `/metrics?date=${days[0]}&compare=week`, { key });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.error.code, 'invalid_request');
  for (const { from, to, previous, year, none } of answers) {
    const span = days.indexOf(to) - days.indexOf(from) + 1;
    assert.deepEqual(previous.figures, expected(from, to), 'the main figures do not change with compare');
    assert.deepEqual(previous.compare, expectedHeadline(sqlDay(from, -span), sqlDay(from, -1)), `previous of ${from}..${to}`);
    assert.deepEqual(year.compare, expectedHeadline(sqlYear(from), sqlYear(to)), `year of ${from}..${to}`);
    assert.equal(none.compare, undefined, 'no compare object unless asked');
  }
});

test('figures survive a restart unchanged', async () => {
  const range = `from=${days[0]}&to=${days[DAYS - 1]}&compare=previous`;
  await settle();
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

  before(async () => {
    sealedSvc = await startTestService({}, { now: clock.now });
    ({ keys: { secret } } = await createProject(sealedSvc.url, sealedSvc.adminKey, { monthly_quota: 0, tracked_props: TRACKED }));
    const rand = rng(7);
    const t0 = clock.now();
    // The same generator as above: insights, revenue and props take part in sealing too.
    const first = generate(rand, t0 - SEALED_DAYS * DAY_MS, SEALED_DAYS * DAY_MS - 1000, 4000, 0, 800);
    await send(sealedSvc.url, secret, first.events);
    clock.advance(LATER_MS);
    const second = generate(rand, clock.now() - LIVE_DAYS * DAY_MS, LIVE_DAYS * DAY_MS - 1000, 3000, 4000, 800);
    await send(sealedSvc.url, secret, second.events);
    await sealedSvc.service.engine.sealingIdle();
    allDays = [...new Set([...first.rows, ...second.rows].map((r) => r.day))].sort();
    file = path.join(dir, 'sealed.db');
    load(file, [...first.rows, ...second.rows]);
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
    for (const [from, to] of ranges) answers.push(await actual(`from=${from}&to=${to}&compare=previous`, sealedSvc, secret));
    for (const [i, [from, to]] of ranges.entries()) {
      const { figures, daily, compare } = answers[i]!;
      assert.deepEqual(figures, expected(from, to, file), `${from}..${to}`);
      assert.deepEqual(compare, expectedHeadline(compare.from, compare.to, file), `previous of ${from}..${to}`);
      for (const d of daily as Array<{ date: string; users: number; sessions: number; pageviews: number; bounceRate: string }>) {
        if (!allDays.includes(d.date)) {
          assert.deepEqual([d.users, d.sessions, d.pageviews], [0, 0, 0], d.date);
          continue;
        }
        const e = expected(d.date, d.date, file);
        assert.deepEqual([d.users, d.sessions, d.pageviews, d.bounceRate], [e.users, e.sessions, e.pageviews, e.bounceRate], d.date);
      }
    }
    // compare reads sealed history too: the day before the last sealed day is a sealed day with traffic
    assert.ok(answers[3]!.compare.pageviews > 0, 'the comparison range holds sealed days with traffic');
    // Every insight has something to compare over sealed days (none trivially empty).
    const sealedOnly = answers[1]!.figures;
    assert.ok(Object.keys(sealedOnly.browsers).length >= 2 && Object.keys(sealedOnly.revenue).length >= 1, JSON.stringify(sealedOnly.revenue));
    assert.ok(Object.keys(sealedOnly.props.plan ?? {}).length === 3 && Object.keys(sealedOnly.utmCampaigns).length === 2);
  }

  test('ranges over sealed days, live days and both equal the SQL aggregation', async () => {
    await check();
  });

  test('and still do after a restart (sealed days are read from LMDB, live days from the snapshot)', async () => {
    sealedSvc = await sealedSvc.restart();
    await check();
  });
});
