import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BENCH_PROJECT, benchQuestions, closeDuckDb, duckdbAnswer, loadDuckDb, type DuckDb } from '../bench/duckdb-questions.ts';
import type { FunnelQuestion, Question } from '../src/core/query/types.ts';
import type { StoredEvent } from '../src/core/types.ts';
import { ColumnProjection } from '../src/engine/column-projection.ts';
import { ColumnStore } from '../src/store/lmdb/column-store.ts';
import { rng } from '../bench/lib/seeded-random.ts';

/**
 * The bench's DuckDB reference (bench/duckdb-questions.ts) against the column store: the same generated events go
 * into a real ColumnProjection over a temp columns.lmdb and into DuckDB, and Q1–Q6 plus variants must be answered
 * alike. The column store is itself checked against a SQLite reference (query-columns.test.ts), so equal answers
 * mean the bench compares like with like.
 */

const EVENTS = 20_000;
const DAYS = 10;
const CHUNK = 500;
const DAY_MS = 86_400_000;
const END = Date.UTC(2026, 10, 1);

const COUNTRIES = ['US', 'DE', 'FR', 'GB', 'IN', 'BR', ''];
const SOURCES = ['Direct', 'Google', 'Bing', 'Hacker News', 'site1.example', 'site2.example'];
const PATHS = ['/', '/pricing', '/signup', '/docs', ...Array.from({ length: 30 }, (_, i) => `/blog/post-${i}`), '/Blog/POST-1x'];
const NAMES = ['signup', 'click', 'download'];

/**
 * The bench's shape (visits of ~5 events within 30 minutes, skewed picks) with the hard cases: a visit's events out
 * of time order and with equal times, its user changing after the first event, events past midnight of their day, a
 * session on two days, custom events without a path, no country, no browser / OS, UTM values on some visits, and
 * visits interleaved in the log.
 */
function generate(): StoredEvent[] {
  const rand = rng(7);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() ** 2 * xs.length)]!;
  const out: StoredEvent[] = [];
  const perDay = EVENTS / DAYS;
  for (let d = 0; d < DAYS; d++) {
    const dayStart = END - (DAYS - d) * DAY_MS;
    const day = new Date(dayStart).toISOString().slice(0, 10);
    const dayEvents: StoredEvent[][] = [];
    let made = 0;
    let visit = 0;
    while (made < perDay) {
      // every 50th session id comes back the next day: a second visit
      const sessionId = visit % 50 === 0 && d > 0 ? `s${d - 1}-${visit}` : `s${d}-${visit}`;
      visit++;
      const user = rand() < 0.3 ? `u:${Math.floor(rand() * 300)}` : `s:${sessionId}`;
      const len = 1 + Math.floor(rand() * 9);
      let ts = dayStart + Math.floor(rand() * (DAY_MS - 1_800_000)) + (rand() < 0.01 ? DAY_MS - 60_000 - 1_800_000 : 0);
      const source = pick(SOURCES);
      const country = pick(COUNTRIES);
      const browser = rand() < 0.1 ? undefined : pick(['Chrome', 'Firefox', 'Safari']);
      const os = rand() < 0.1 ? undefined : pick(['Windows', 'Mac OS', 'Android']);
      const utm = rand() < 0.2 ? { utmMedium: pick(['cpc', 'email']), utmCampaign: pick(['launch', 'spring']) } : {};
      const device = rand() < 0.6 ? 'desktop' : 'mobile';
      const events: StoredEvent[] = [];
      for (let i = 0; i < len && made < perDay; i++, made++) {
        const pv = i === 0 || rand() < 0.7;
        const noPath = !pv && rand() < 0.3;
        const p2 = noPath ? '' : pick(PATHS);
        const r = rand();
        ts += r < 0.1 ? -Math.floor(rand() * 60_000) : r < 0.2 ? 0 : Math.floor(rand() * 300_000);
        events.push({
          t: 'e',
          p: BENCH_PROJECT,
          ts,
          rt: ts,
          day,
          event: pv ? 'page_view' : pick(NAMES),
          url: noPath ? '' : `https://bench.example${p2}`,
          path: p2,
          referrer: '',
          source,
          sessionId,
          user: i > 0 && rand() < 0.1 ? `u:late-${visit}` : user,
          country,
          device,
          params: rand() < 0.2 ? { plan: pick(['free', 'pro']) } : {},
          ...(browser ? { browser } : {}),
          ...(os ? { os } : {}),
          ...utm,
        });
      }
      dayEvents.push(events);
    }
    // interleave: take the next event of one of the few most recent visits
    const live: StoredEvent[][] = [];
    let next = 0;
    while (next < dayEvents.length || live.length > 0) {
      while (live.length < 4 && next < dayEvents.length) live.push(dayEvents[next++]!);
      const i = Math.floor(rand() * live.length);
      out.push(live[i]!.shift()!);
      if (live[i]!.length === 0) live.splice(i, 1);
    }
  }
  return out;
}

const from = new Date(END - DAYS * DAY_MS).toISOString().slice(0, 10);
const to = new Date(END - DAY_MS).toISOString().slice(0, 10);
const base: Question = { from, to, metrics: [], dimensions: [], filters: [], orderBy: [], limit: 10, offset: 0 };

/** Beyond Q1–Q6: the other operators, visit metrics, entry / exit pages, paging, days, a funnel with an event step. */
const VARIANTS: Array<[string, Question | FunnelQuestion]> = [
  ['all metrics, no filter', { ...base, metrics: ['visitors', 'visits', 'pageviews', 'events', 'bounceRate', 'viewsPerVisit', 'visitDuration'] }],
  ['country lower case, isNot source', { ...base, metrics: ['visits', 'bounceRate'], filters: [['is', 'country', ['de', 'fr']], ['isNot', 'source', ['Google']]] }],
  ['notContains page by entry page', { ...base, metrics: ['visits', 'visitors', 'visitDuration'], dimensions: ['entryPage'], filters: [['notContains', 'page', ['BLOG']]], orderBy: [['visits', 'desc']], limit: 100 }],
  ['exit pages, page 2', { ...base, metrics: ['visitors', 'viewsPerVisit'], dimensions: ['exitPage'], orderBy: [['visitors', 'desc']], limit: 5, offset: 5 }],
  ['events by name, country has no value', { ...base, metrics: ['events', 'visitors'], dimensions: ['event'], filters: [['isNot', 'country', ['US']]], orderBy: [['events', 'desc']] }],
  ['browsers by bounce rate asc', { ...base, metrics: ['bounceRate', 'visits'], dimensions: ['browser'], orderBy: [['bounceRate', 'asc']] }],
  ['utm medium', { ...base, metrics: ['visitors'], dimensions: ['utmMedium'], orderBy: [['visitors', 'desc']] }],
  ['days, contains', { ...base, metrics: ['pageviews', 'visitors', 'visits'], dimensions: ['time:day'], filters: [['contains', 'page', ['post-1']]], orderBy: [['time:day', 'asc']], limit: 100 }],
  ['hours of a day, one source', { ...base, from, to: from, metrics: ['visits', 'bounceRate'], dimensions: ['time:hour'], filters: [['is', 'source', ['Bing']]], orderBy: [['time:hour', 'asc']], limit: 100 }],
  ['past the last row', { ...base, metrics: ['visitors'], dimensions: ['device'], orderBy: [['visitors', 'desc']], offset: 10 }],
  ['nothing selected', { ...base, metrics: ['visitors'], dimensions: ['page'], filters: [['is', 'country', ['ZZ']]], orderBy: [['visitors', 'desc']] }],
  [
    'funnel of three steps, event and wildcard, filtered',
    { from, to, filters: [['isNot', 'device', ['mobile']]], steps: [{ label: 'page:/', page: '/' }, { label: 'event:signup', event: 'signup' }, { label: 'page:/blog/*', page: '/blog/*' }] },
  ],
  ['funnel with a repeated step', { from, to, filters: [], steps: [{ label: 'page:/', page: '/' }, { label: 'page:/', page: '/' }, { label: 'page:/pricing', page: '/pricing' }] }],
];

describe('DuckDB reference of the bench questions', () => {
  let dir = '';
  let columns: ColumnProjection;
  let db: DuckDb;

  before(async () => {
    const events = generate();
    dir = mkdtempSync(path.join(tmpdir(), 'analytics-duckdb-ref-'));
    columns = new ColumnProjection(ColumnStore.open(dir), () => {});
    for (let i = 0; i < events.length; i += CHUNK) columns.fold(i + 1, events.slice(i, i + CHUNK));
    await columns.flush();
    db = await loadDuckDb(events);
    assert.equal(db.events, EVENTS);
  });

  after(async () => {
    await columns?.close();
    if (db) closeDuckDb(db);
    rmSync(dir, { recursive: true, force: true });
  });

  const ask = (q: Question | FunnelQuestion): Promise<unknown> => ('steps' in q ? columns.funnel(BENCH_PROJECT, 'UTC', q) : columns.query(BENCH_PROJECT, 'UTC', [], q));

  for (const { label, question } of benchQuestions(from, to)) {
    test(label, async () => {
      const expected = await ask(question);
      const got = await duckdbAnswer(db, question);
      assert.deepEqual(got, expected);
      // not vacuous: the answer counts something
      assert.ok(JSON.stringify(got).match(/[1-9]/), JSON.stringify(got));
    });
  }

  for (const [label, question] of VARIANTS) {
    test(label, async () => {
      assert.deepEqual(await duckdbAnswer(db, question), await ask(question));
    });
  }

  test('questions it does not cover are refused by name', async () => {
    await assert.rejects(duckdbAnswer(db, { ...base, metrics: ['visitors'], dimensions: ['goal'] }), /goal/);
    await assert.rejects(duckdbAnswer(db, { ...base, metrics: ['conversionRate'] }), /conversionRate/);
  });
});
