// long because the column store's answers are checked against SQL over the same events, and the event generator and
// the SQL for each question are written out here beside the questions.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { TIME_DIMENSIONS, type Dimension, type Filter, type FunnelQuestion, type FunnelStepAnswer, type Goal, type Metric, type Question, type QueryAnswer, type QueryEngine } from '../src/core/query/types.ts';
import type { LmdbBackend } from '../src/engine/lmdb-backend.ts';
import { rebuild } from '../src/engine/maintenance.ts';
import { ColumnStore } from '../src/store/lmdb/column-store.ts';
import { api, createProject, startTestService, type TestService } from './helpers.ts';
import { rng } from '../bench/lib/seeded-random.ts';

/**
 * The column store against a SQLite reference: generated events go in over HTTP (real enrichment, a project in
 * America/New_York so local days and hours differ from UTC), the same rows go into SQLite, and POST /query's
 * semantics are computed there in plain SQL (visit table with window functions, goals by GLOB) for fixed and
 * random questions; funnels against a plain walk. Then: restart with a replayed tail, rebuild, erasure.
 */

const TZ = 'America/New_York';
const EVENTS = 5000;
const SESSIONS = 500;
const BATCH = 250;
const DAY_MS = 86_400_000;

const AGENTS: Array<[string, string, string]> = [
  ['Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36', 'Chrome', 'Windows'],
  ['Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0', 'Firefox', 'Ubuntu'],
  ['curl/8.5.0', 'Unknown', 'Unknown'],
];
const REFERRERS: Array<[string, string]> = [
  ['', 'Direct'],
  ['https://www.google.com/', 'Google'],
  ['https://news.ycombinator.com/item?id=1', 'Hacker News'],
  ['https://blog.example/post', 'blog.example'],
];
const PATHS = ['/', '/pricing', '/docs/x/y', '/blog/a', '/blog/b', '/Blog/c'];
const NAMES = ['signup', 'click', 'download', 'purchase'];
const MARK = 'zebra-erasure-mark';
/** every eventParams key the generator uses (a column each in SQLite) */
const PROPS = ['plan', 'seats', 'flag', 'note', 'mark', 'value', 'currency'];
/** Currencies the purchases use (sent in any case: revenue counts them upper-cased) and the revenue metrics asked. */
const CURRENCIES = ['EUR', 'eur', 'USD', 'Usd'];

const GOALS: Goal[] = [
  { id: 'g1', name: 'Signup', event: 'signup', createdAt: 0 },
  { id: 'g2', name: 'Blog', page: '/blog/*', createdAt: 0 },
  { id: 'g3', name: 'Pricing', page: '/pricing', createdAt: 0 },
  { id: 'g4', name: 'Deep docs', page: '/docs/*/y', createdAt: 0 },
  { id: 'g5', name: 'Never', event: 'nope', createdAt: 0 },
];

interface Row {
  seq: number;
  ts: number;
  day: string;
  hour: string;
  week: string;
  event: string;
  path: string;
  session: string;
  usr: string;
  source: string;
  country: string;
  device: string;
  browser: string;
  os: string;
  medium: string;
  campaign: string;
  params: Record<string, string>;
}

const dayFmt = new Intl.DateTimeFormat('en-CA', { timeZone: TZ, year: 'numeric', month: '2-digit', day: '2-digit' });
const hourFmt = new Intl.DateTimeFormat('en-CA', { timeZone: TZ, year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', hourCycle: 'h23' });
function localHour(ts: number): string {
  const p: Record<string, string> = {};
  for (const x of hourFmt.formatToParts(ts)) p[x.type] = x.value;
  return `${p.year}-${p.month}-${p.day}T${p.hour}`;
}
function mondayOf(day: string): string {
  const t = Date.parse(`${day}T00:00:00Z`);
  const dow = new Date(t).getUTCDay();
  return new Date(t - ((dow + 6) % 7) * DAY_MS).toISOString().slice(0, 10);
}

let svc: TestService;
let key: string;
let projectId: string;
let dir: string;
let db: string;
let rows: Row[] = [];
let days: string[];

/** Events over the last four days; sessions live ~2 h so some cross local midnight; a third start with a custom event. */
function generate(rand: () => number, now: number): { batches: Array<{ ua: string; events: object[] }>; rows: Row[] } {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const start = now - 4 * DAY_MS;
  const sessStart = Array.from({ length: SESSIONS }, () => start + Math.floor(rand() * (4 * DAY_MS - 3 * 3_600_000)));
  const out: Row[] = [];
  const batches: Array<{ ua: string; events: object[] }> = [];
  for (let b = 0; b < EVENTS / BATCH; b++) {
    const [ua, browser, os] = AGENTS[b % AGENTS.length]!;
    const events: object[] = [];
    for (let i = 0; i < BATCH; i++) {
      const s = Math.floor(rand() * SESSIONS);
      const ts = sessStart[s]! + Math.floor(rand() * 2 * 3_600_000);
      const custom = rand() < 0.3;
      const event = custom ? pick(NAMES) : 'page_view';
      const p = pick(PATHS);
      const withUrl = !custom || rand() < 0.5;
      const [referrer, source] = pick(REFERRERS);
      const medium = pick(['', '', 'email', 'cpc']);
      const campaign = pick(['', 'launch', 'black-friday']);
      const utm = [medium && `utm_medium=${medium}`, campaign && `utm_campaign=${campaign}`].filter(Boolean).join('&');
      const params: Record<string, unknown> = {};
      if (rand() < 0.4) params.plan = pick(['free', 'pro', 'team', '']);
      if (rand() < 0.3) params.seats = pick([1, 1.5, 10, -0]);
      if (rand() < 0.2) params.flag = rand() < 0.5;
      if (rand() < 0.1) params.note = null;
      if (rand() < 0.05) params.mark = MARK;
      if (event === 'purchase') {
        params.value = pick([9.99, 20, 0.5, 120]);
        params.currency = pick(CURRENCIES);
      }
      const e: Record<string, unknown> = { event, sessionId: `s${s}`, referrer, country: pick(['de', 'US', 'fr']), device: pick(['Desktop', 'mobile']), timestamp: ts };
      if (withUrl) e.url = `https://site.example${p}${utm ? `?${utm}` : ''}`;
      if (Object.keys(params).length > 0) e.eventParams = params;
      if (s % 3 === 0) e.userId = `u${s % 40}`;
      else if (s % 3 === 1) e.fingerprint = `f${s % 50}`;
      events.push(e);
      const day = dayFmt.format(ts);
      out.push({
        seq: out.length,
        ts,
        day,
        hour: localHour(ts),
        week: mondayOf(day),
        event,
        path: withUrl ? p : '',
        session: `s${s}`,
        usr: s % 3 === 0 ? `u:u${s % 40}` : s % 3 === 1 ? `f:f${s % 50}` : `s:s${s}`,
        source,
        country: String(e.country).toUpperCase(),
        device: String(e.device).toLowerCase(),
        browser,
        os,
        medium: withUrl ? medium : '',
        campaign: withUrl ? campaign : '',
        params: Object.fromEntries(Object.entries(params).map(([k, v]) => [k, v === null ? 'null' : String(v)])),
      });
    }
    batches.push({ ua, events });
  }
  return { batches, rows: out };
}

const q = (s: string): string => `'${s.replaceAll("'", "''")}'`;
const nul = (s: string): string => (s === '' ? 'NULL' : q(s));

function load(): void {
  const lines = [
    `CREATE TABLE e(seq INTEGER PRIMARY KEY, ts INTEGER, day TEXT, hour TEXT, week TEXT, event TEXT, path TEXT, session TEXT, usr TEXT, source TEXT, country TEXT, device TEXT, browser TEXT, os TEXT, medium TEXT, campaign TEXT, ${PROPS.map((k) => `p_${k} TEXT`).join(', ')});`,
    'CREATE TABLE g(name TEXT, event TEXT, page TEXT);',
    'BEGIN;',
  ];
  for (const r of rows) {
    lines.push(
      `INSERT INTO e VALUES(${r.seq},${r.ts},${q(r.day)},${q(r.hour)},${q(r.week)},${q(r.event)},${nul(r.path)},${q(r.session)},${q(r.usr)},${q(r.source)},${q(r.country)},${q(r.device)},${q(r.browser)},${q(r.os)},${nul(r.medium)},${nul(r.campaign)},${PROPS.map((k) => (r.params[k] === undefined ? 'NULL' : q(r.params[k]))).join(',')});`,
    );
  }
  for (const g of GOALS) lines.push(`INSERT INTO g VALUES(${q(g.name)},${g.event ? q(g.event) : 'NULL'},${g.page ? q(g.page) : 'NULL'});`);
  lines.push(
    'COMMIT;',
    'CREATE INDEX e_visit ON e(session, day);',
    // goal completions: an event goal by name, a page goal by a page_view whose whole path matches (GLOB: * = any run)
    `CREATE TABLE gc AS SELECT e.seq, g.name goal FROM e JOIN g ON g.event = e.event OR (g.page IS NOT NULL AND e.event = 'page_view' AND e.path GLOB g.page);`,
    `CREATE TABLE vis AS WITH o AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY session, day ORDER BY ts, seq) rn FROM e),
       pv AS (SELECT session, day, path, ROW_NUMBER() OVER (PARTITION BY session, day ORDER BY ts, seq) a,
                     ROW_NUMBER() OVER (PARTITION BY session, day ORDER BY ts DESC, seq DESC) b FROM e WHERE event = 'page_view')
     SELECT o.session, o.day, o.session || '|' || o.day vkey, o.usr visitor, o.source, o.medium, o.campaign, o.country, o.device, o.browser, o.os,
       (SELECT path FROM pv WHERE pv.session = o.session AND pv.day = o.day AND a = 1) entry,
       (SELECT path FROM pv WHERE pv.session = o.session AND pv.day = o.day AND b = 1) exit,
       (SELECT COUNT(*) FROM e x WHERE x.session = o.session AND x.day = o.day AND x.event = 'page_view') pvs,
       (SELECT MAX(ts) - MIN(ts) FROM e x WHERE x.session = o.session AND x.day = o.day) dur
     FROM o WHERE rn = 1;`,
    'CREATE INDEX vis_key ON vis(session, day);',
    'CREATE INDEX gc_seq ON gc(seq, goal);',
  );
  writeFileSync(`${db}.sql`, lines.join('\n'));
  execFileSync('sqlite3', [db, `.read ${db}.sql`]);
}

function sql<T>(query: string): T[] {
  const out = execFileSync('sqlite3', ['-json', db, query], { encoding: 'utf8', maxBuffer: 64 * 2 ** 20 });
  return out.trim() === '' ? [] : (JSON.parse(out) as T[]);
}

const VISIT_SQL: Record<string, string> = {
  source: 'v.source',
  utmMedium: 'v.medium',
  utmCampaign: 'v.campaign',
  country: 'v.country',
  device: 'v.device',
  browser: 'v.browser',
  os: 'v.os',
  entryPage: 'v.entry',
  exitPage: 'v.exit',
};
function dimSql(d: Dimension): string {
  if (VISIT_SQL[d]) return VISIT_SQL[d]!;
  if (d === 'page') return 'e.path';
  if (d === 'event') return 'e.event';
  if (d === 'goal') return 'gc.goal';
  if (d === 'time:hour') return 'e.hour';
  if (d === 'time:day') return 'e.day';
  if (d === 'time:week') return 'e.week';
  if (d === 'time:month') return 'substr(e.day, 1, 7)';
  return `e.p_${d.slice(5)}`;
}
function filterSql([op, d, values]: Filter): string {
  if (d === 'goal') return `EXISTS (SELECT 1 FROM gc x WHERE x.seq = e.seq AND x.goal IN (${values.map(q).join(',')}))`;
  const x = d === 'country' ? `UPPER(${dimSql(d)})` : dimSql(d);
  const vs = d === 'country' ? values.map((v) => v.toUpperCase()) : values;
  const is = `(${x} IS NOT NULL AND ${x} IN (${vs.map(q).join(',')}))`;
  const contains = `(${x} IS NOT NULL AND (${vs.map((v) => `instr(lower(${x}), lower(${q(v)})) > 0`).join(' OR ')}))`;
  return op === 'is' ? is : op === 'isNot' ? `NOT ${is}` : op === 'contains' ? contains : `NOT ${contains}`;
}

const minuteFmt = new Intl.DateTimeFormat('en-CA', { timeZone: TZ, year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
/** ms since epoch of local `day` `hh:mm` in TZ (the offset found twice, so a DST day converges). */
function localEpoch(day: string, hhmm: string): number {
  const offset = (ms: number): number => {
    const p: Record<string, string> = {};
    for (const x of minuteFmt.formatToParts(ms)) p[x.type] = x.value;
    return Date.parse(`${p.year}-${p.month}-${p.day}T${p.hour}:${p.minute}:00Z`) - ms;
  };
  const guess = Date.parse(`${day}T${hhmm}:00Z`);
  return guess - offset(guess - offset(guess));
}

const r1 = (x: number): number => Math.round(x * 10) / 10;
const r2 = (x: number): number => Math.round(x * 100) / 100;
/** revenue:EUR and revenue:USD in SQL: purchases by their currency upper-cased (GET /metrics's rules). */
const REVENUE_SQL = ['EUR', 'USD'].map((c) => `COALESCE(SUM(CASE WHEN event = 'purchase' AND upper(p_currency) = '${c}' THEN CAST(p_value AS REAL) END), 0) rev_${c}`).join(', ');

/** POST /query computed in SQL (counts) and the contract's formulas (rates). */
function reference(question: Question): QueryAnswer {
  const { from, to, metrics, dimensions: dims } = question;
  const run = (filters: Filter[], ds: Dimension[]) => {
    const cols = ds.map((d, i) => `${dimSql(d)} d${i}`);
    const cut = question.until === undefined ? [] : [`NOT (e.day = ${q(to)} AND e.ts >= ${localEpoch(to, question.until)})`];
    const where = [`e.day BETWEEN ${q(from)} AND ${q(to)}`, ...cut, ...filters.map(filterSql), ...ds.map((d) => `${dimSql(d)} IS NOT NULL`)];
    const sel = `SELECT e.seq, e.event, e.p_value, e.p_currency, v.vkey, v.visitor, v.pvs, v.dur${cols.map((c) => `, ${c}`).join('')} FROM e JOIN vis v ON v.session = e.session AND v.day = e.day ${ds.includes('goal') ? 'JOIN gc ON gc.seq = e.seq' : ''} WHERE ${where.join(' AND ')}`;
    const keys = ds.map((_, i) => `d${i}`);
    const group = keys.length ? `GROUP BY ${keys.join(',')}` : '';
    const kSel = keys.map((k) => `${k}, `).join('');
    const a = sql<Record<string, string | number>>(`WITH sel AS (${sel}) SELECT ${kSel}COUNT(DISTINCT visitor) visitors, COUNT(DISTINCT vkey) visits, COALESCE(SUM(event = 'page_view'), 0) pageviews, COUNT(*) events, ${REVENUE_SQL} FROM sel ${group}`);
    const b = sql<Record<string, string | number>>(
      `WITH sel AS (${sel}) SELECT ${kSel}SUM(pvs = 1) bounces, SUM(pvs >= 1) withpv, SUM(pvs) pvsum, SUM(dur) dursum FROM (SELECT DISTINCT ${kSel}vkey, pvs, dur FROM sel) ${group}`,
    );
    const kOf = (r: Record<string, string | number>) => JSON.stringify(keys.map((k) => String(r[k])));
    const bm = new Map(b.map((r) => [kOf(r), r]));
    return a.map((r): { dims: string[]; n: Record<string, string | number> } => {
        const v = bm.get(kOf(r)) ?? {};
      return { dims: keys.map((k) => String(r[k])), n: { ...r, bounces: Number(v.bounces ?? 0), withpv: Number(v.withpv ?? 0), pvsum: Number(v.pvsum ?? 0), dursum: Number(v.dursum ?? 0) } };
    });
  };
  // conversionRate: ÷ the visitors of the row's group (its values of the dimensions other than goal) without goal filters
  const noGoal = question.filters.filter(([, d]) => d !== 'goal');
  const groupDims = dims.filter((d) => d !== 'goal');
  const goalAt = dims.indexOf('goal');
  const groups = metrics.includes('conversionRate') ? new Map(run(noGoal, groupDims).map((r) => [JSON.stringify(r.dims), Number(r.n.visitors)])) : new Map<string, number>();
  const allBase = metrics.includes('conversionRate') ? Number(run(noGoal, [])[0]?.n.visitors ?? 0) : 0;
  const value = (m: Metric, n: Record<string, string | number>, rowDims?: string[]): number => {
    const base = rowDims === undefined ? allBase : (groups.get(JSON.stringify(rowDims.filter((_, i) => i !== goalAt))) ?? 0);
    const visits = Number(n.visits ?? 0);
    const visitors = Number(n.visitors ?? 0);
    switch (m) {
      case 'visitors':
        return visitors;
      case 'visits':
        return visits;
      case 'pageviews':
        return Number(n.pageviews ?? 0);
      case 'events':
        return Number(n.events ?? 0);
      case 'bounceRate':
        return Number(n.withpv ?? 0) === 0 ? 0 : r1((Number(n.bounces) / Number(n.withpv)) * 100);
      case 'viewsPerVisit':
        return visits === 0 ? 0 : Math.round((Number(n.pvsum) / visits) * 100) / 100;
      case 'visitDuration':
        return visits === 0 ? 0 : Math.round(Number(n.dursum) / visits / 1000);
      case 'conversionRate':
        return base === 0 ? 0 : r1((visitors / base) * 100);
      default:
        return r2(Number(n[`rev_${m.slice('revenue:'.length)}`] ?? 0));
    }
  };
  const totalRow = run(question.filters, [])[0];
  const totals = metrics.map((m) => value(m, totalRow?.n ?? {}));
  if (dims.length === 0) return { results: [{ dimensions: [], metrics: totals }], totals, totalRows: 1 };
  const results = run(question.filters, dims).map((r) => ({ dimensions: r.dims, metrics: metrics.map((m) => value(m, r.n, r.dims)) }));
  if (dims.length === 1 && (dims[0] === 'goal' || dims[0]!.startsWith('time:'))) {
    const have = new Set(results.map((r) => r.dimensions[0]));
    const all = dims[0] === 'goal' ? GOALS.map((g) => g.name) : buckets(dims[0] as (typeof TIME_DIMENSIONS)[number], from, to);
    for (const b of all) if (!have.has(b)) results.push({ dimensions: [b], metrics: metrics.map((m) => value(m, {})) });
  }
  return { results, totals, totalRows: results.length };
}

function buckets(dim: (typeof TIME_DIMENSIONS)[number], from: string, to: string): string[] {
  const out: string[] = [];
  for (let t = Date.parse(`${from}T00:00:00Z`); t <= Date.parse(`${to}T00:00:00Z`); t += DAY_MS) {
    const day = new Date(t).toISOString().slice(0, 10);
    if (dim === 'time:hour') {
      // the local hours of the day: scan its UTC span at 15-minute steps
      for (let x = t - 15 * 3_600_000; x < t + 40 * 3_600_000; x += 900_000) {
        const h = localHour(x);
        if (h.startsWith(day) && !out.includes(h)) out.push(h);
      }
    } else {
      const b = dim === 'time:day' ? day : dim === 'time:week' ? mondayOf(day) : day.slice(0, 7);
      if (!out.includes(b)) out.push(b);
    }
  }
  return out;
}

const sortRows = (a: QueryAnswer) => [...a.results].sort((x, y) => (JSON.stringify(x.dimensions) < JSON.stringify(y.dimensions) ? -1 : 1));

function question(p: Partial<Question>): Question {
  return { from: days[0]!, to: days.at(-1)!, metrics: ['visitors'], dimensions: [], filters: [], orderBy: [], limit: 10_000, offset: 0, ...p };
}

function engine(s: TestService): QueryEngine {
  return (s.service.engine as unknown as { backend: LmdbBackend }).backend.questions;
}

async function compare(qn: Question, s = svc): Promise<void> {
  const got = await engine(s).query(projectId, TZ, GOALS, qn);
  const want = reference(qn);
  const label = JSON.stringify(qn);
  assert.deepEqual(got.totals, want.totals, `totals of ${label}`);
  assert.equal(got.totalRows, want.totalRows, `totalRows of ${label}`);
  assert.deepEqual(sortRows(got), sortRows(want), `rows of ${label}`);
}

/** Funnels by a plain walk over the generated rows. */
function walkFunnel(fq: FunnelQuestion): FunnelStepAnswer[] {
  const visits = new Map<string, Row[]>();
  for (const r of rows) {
    if (r.day < fq.from || r.day > fq.to) continue;
    const k = `${r.session}|${r.day}`;
    visits.set(k, [...(visits.get(k) ?? []), r]);
  }
  const glob = (pat: string) => new RegExp(`^${pat.split('*').map((x) => x.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`);
  const counts = fq.steps.map(() => ({ visits: 0, visitors: new Set<string>() }));
  for (const evs of visits.values()) {
    evs.sort((a, b) => a.ts - b.ts || a.seq - b.seq);
    const first = evs[0]!;
    const vv: Record<string, string> = { source: first.source, country: first.country, device: first.device, browser: first.browser, os: first.os };
    if (!fq.filters.every(([op, d, values]) => (op === 'is' ? values.includes(vv[d]!) : !values.includes(vv[d]!)))) continue;
    let s = 0;
    for (const e of evs) {
      if (s >= fq.steps.length) break;
      const st = fq.steps[s]!;
      const hit = st.event !== undefined ? e.event === st.event : e.event === 'page_view' && glob(st.page!).test(e.path);
      if (hit) {
        counts[s]!.visits++;
        counts[s]!.visitors.add(first.usr);
        s++;
      }
    }
  }
  return fq.steps.map((st, i) => ({
    label: st.label,
    visits: counts[i]!.visits,
    visitors: counts[i]!.visitors.size,
    conversionRate: counts[0]!.visits === 0 ? 0 : r1((counts[i]!.visits / counts[0]!.visits) * 100),
    dropoff: i === 0 ? 0 : counts[i - 1]!.visits - counts[i]!.visits,
  }));
}

const FIXED: Array<Partial<Question>> = [
  { metrics: ['visitors', 'visits', 'pageviews', 'events', 'bounceRate', 'viewsPerVisit', 'visitDuration'] },
  { metrics: ['visitors', 'visits', 'pageviews', 'bounceRate', 'visitDuration'], filters: [['is', 'country', ['de']]] },
  { metrics: ['visitors', 'visits'], dimensions: ['source'], filters: [['is', 'page', ['/pricing']]] },
  { metrics: ['pageviews', 'visitors'], dimensions: ['time:hour'] },
  { metrics: ['visitors', 'events'], dimensions: ['time:day', 'event'] },
  { metrics: ['visitors', 'pageviews'], dimensions: ['page'], filters: [['is', 'source', ['Google']]] },
  { metrics: ['visits'], dimensions: ['country'], filters: [['contains', 'page', ['BLOG']]] },
  { metrics: ['visitors', 'conversionRate', 'events'], dimensions: ['goal'] },
  { metrics: ['visitors', 'conversionRate'], filters: [['is', 'goal', ['Blog']]], dimensions: ['browser'] },
  { metrics: ['visits', 'visitDuration', 'viewsPerVisit'], dimensions: ['entryPage', 'exitPage'] },
  { metrics: ['events', 'visitors'], dimensions: ['prop:plan', 'prop:seats', 'prop:flag'] },
  { metrics: ['events'], dimensions: ['prop:note'], filters: [['isNot', 'prop:plan', ['free']], ['notContains', 'utmMedium', ['mail']]] },
  // several event filters on one event
  { metrics: ['events', 'visits', 'visitors'], filters: [['is', 'event', ['page_view']], ['contains', 'page', ['/b']], ['is', 'prop:plan', ['pro', '']]] },
  { metrics: ['visitors'], dimensions: ['time:week', 'utmCampaign', 'os'] },
  { metrics: ['visitors', 'visits'], dimensions: ['time:month'], filters: [['is', 'entryPage', ['/']]] },
  // revenue:<CUR>: by visit and event dimensions, under filters, by goal, and with three dimensions (a fourth inside)
  { metrics: ['revenue:EUR', 'revenue:USD', 'events'] },
  { metrics: ['visitors', 'revenue:EUR'], dimensions: ['source'], filters: [['is', 'country', ['de', 'US']]] },
  { metrics: ['revenue:USD'], dimensions: ['time:day', 'page'] },
  { metrics: ['revenue:EUR', 'conversionRate'], dimensions: ['goal', 'device'] },
  { metrics: ['revenue:EUR', 'visits'], dimensions: ['time:week', 'browser', 'prop:plan'] },
  // until: the last day counts its events before that local time (a running period's same elapsed part)
  { metrics: ['visitors', 'visits', 'pageviews', 'events', 'revenue:USD'], until: '14:20' },
  { metrics: ['pageviews', 'visitors'], dimensions: ['time:hour'], until: '09:05' },
  { metrics: ['visits', 'events'], dimensions: ['source'], filters: [['is', 'page', ['/pricing']]], until: '00:30' },
];

describe('column store answers POST /query as plain SQL does', () => {
  before(async () => {
    svc = await startTestService();
    const created = await createProject(svc.url, svc.adminKey, { monthly_quota: 0, timezone: TZ });
    key = created.keys.secret;
    projectId = created.project.id;
    dir = mkdtempSync(path.join(tmpdir(), 'analytics-columns-'));
    db = path.join(dir, 'ref.db');
    const gen = generate(rng(7), Date.now() - 60_000);
    rows = gen.rows;
    for (const b of gen.batches) {
      const r = await api(svc.url, '/analytics', { key, body: { events: b.events }, headers: { 'user-agent': b.ua } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    load();
    days = [...new Set(rows.map((r) => r.day))].sort();
  });

  after(async () => {
    await svc?.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  test('fixed questions', async () => {
    for (const f of FIXED) await compare(question(f));
    // a one-day range and a range with no events at all
    await compare(question({ from: days[1], to: days[1], metrics: ['visitors', 'bounceRate'], dimensions: ['time:hour'] }));
    const empty = await engine(svc).query(projectId, TZ, GOALS, question({ from: '2020-01-01', to: '2020-01-02', metrics: ['visitors', 'bounceRate'] }));
    assert.deepEqual(empty, { results: [{ dimensions: [], metrics: [0, 0] }], totals: [0, 0], totalRows: 1 });
    // until on a whole past day: the cut-off takes events away, exactly as in SQL
    const full = question({ from: days[0], to: days.at(-2), metrics: ['events'] });
    for (const until of ['00:00', '11:30', '23:59']) await compare({ ...full, until });
    const cut = await engine(svc).query(projectId, TZ, GOALS, { ...full, until: '11:30' });
    const whole = await engine(svc).query(projectId, TZ, GOALS, full);
    assert.ok(cut.totals[0]! < whole.totals[0]!, `until 11:30 leaves fewer events (${cut.totals[0]} of ${whole.totals[0]})`);
  });

  test('ordering, limit and offset', async () => {
    const all = await engine(svc).query(projectId, TZ, GOALS, question({ metrics: ['visitors'], dimensions: ['page'], orderBy: [['visitors', 'desc'], ['page', 'asc']] }));
    for (let i = 1; i < all.results.length; i++) assert.ok(all.results[i - 1]!.metrics[0]! >= all.results[i]!.metrics[0]!);
    const page = await engine(svc).query(projectId, TZ, GOALS, question({ metrics: ['visitors'], dimensions: ['page'], orderBy: [['visitors', 'desc'], ['page', 'asc']], limit: 2, offset: 1 }));
    assert.deepEqual(page.results, all.results.slice(1, 3));
    assert.equal(page.totalRows, all.totalRows);
    const hours = await engine(svc).query(projectId, TZ, GOALS, question({ metrics: ['pageviews'], dimensions: ['time:hour'], orderBy: [['time:hour', 'asc']] }));
    assert.deepEqual(hours.results.map((r) => r.dimensions[0]), buckets('time:hour', days[0]!, days.at(-1)!));
  });

  test('random questions', async () => {
    const dimsPool: Dimension[] = ['source', 'utmMedium', 'utmCampaign', 'country', 'device', 'browser', 'os', 'entryPage', 'exitPage', 'page', 'event', 'goal', 'prop:plan', 'prop:seats', 'prop:flag', 'time:hour', 'time:day', 'time:week'];
    const valuePool: Record<string, string[]> = {
      source: ['Direct', 'Google', 'Hacker News', 'goo'],
      utmMedium: ['email', 'cpc', 'EM'],
      utmCampaign: ['launch', 'black'],
      country: ['de', 'US', 'xx'],
      device: ['desktop', 'mobile'],
      browser: ['Chrome', 'Unknown', 'fire'],
      os: ['Windows', 'Ubuntu', 'Unknown'],
      entryPage: ['/', '/pricing', '/blog/a', 'blog'],
      exitPage: ['/', '/docs/x/y', 'B'],
      page: ['/', '/pricing', '/blog/b', 'blog', '/Blog/c'],
      event: ['page_view', 'signup', 'click'],
      'prop:plan': ['free', 'pro', '', 'te'],
      'prop:seats': ['1', '1.5', '0', '10'],
      'prop:flag': ['true', 'false'],
    };
    const filterArb = fc.oneof(
      fc.record({ d: fc.constantFrom(...Object.keys(valuePool)), op: fc.constantFrom('is', 'isNot', 'contains', 'notContains') }).chain(({ d, op }) =>
        fc.subarray(valuePool[d]!, { minLength: 1 }).map((vs) => [op, d, vs] as Filter),
      ),
      fc.subarray(GOALS.map((g) => g.name), { minLength: 1, maxLength: 2 }).map((vs) => ['is', 'goal', vs] as Filter),
    );
    const arb = fc
      .record({
        metrics: fc.subarray(['visitors', 'visits', 'pageviews', 'events', 'bounceRate', 'viewsPerVisit', 'visitDuration', 'revenue:EUR'] as Metric[], { minLength: 1 }),
        dims: fc.uniqueArray(fc.constantFrom(...dimsPool), { maxLength: 3 }),
        filters: fc.array(filterArb, { maxLength: 3 }),
        range: fc.tuple(fc.nat(days.length - 1), fc.nat(days.length - 1)),
      })
      .filter(({ dims }) => dims.filter((d) => d.startsWith('time:')).length <= 1)
      .map(({ metrics, dims, filters, range: [a, b] }) => {
        const m = dims.includes('goal') || filters.some(([, d]) => d === 'goal') ? [...metrics, 'conversionRate' as Metric] : metrics;
        return question({ metrics: m, dimensions: dims, filters, from: days[Math.min(a, b)], to: days[Math.max(a, b)] });
      });
    await fc.assert(fc.asyncProperty(arb, (qn) => compare(qn)), { numRuns: 100, seed: 26 });
  });

  test('funnels against a plain walk', async () => {
    const cases: FunnelQuestion[] = [
      { from: days[0]!, to: days.at(-1)!, filters: [], steps: [{ label: 'page:/', page: '/' }, { label: 'event:signup', event: 'signup' }] },
      { from: days[0]!, to: days.at(-1)!, filters: [['is', 'country', ['DE']]], steps: [{ label: 'Blog', page: '/blog/*' }, { label: 'page:/pricing', page: '/pricing' }, { label: 'event:click', event: 'click' }] },
      { from: days[1]!, to: days[2]!, filters: [['isNot', 'source', ['Direct']]], steps: [{ label: 'event:click', event: 'click' }, { label: 'event:click', event: 'click' }, { label: 'page:*', page: '*' }] },
    ];
    for (const fq of cases) assert.deepEqual(await engine(svc).funnel(projectId, TZ, fq), walkFunnel(fq), JSON.stringify(fq));
  });

  test('a restart (sealed segments plus a replayed tail), a rebuild, and an erasure', async () => {
    const checks = FIXED.slice(0, 8).map(question);
    const before = await Promise.all(checks.map((c) => engine(svc).query(projectId, TZ, GOALS, c)));
    // Cut the columns back to the middle of the log: the restart replays the rest into open segments.
    await svc.stop();
    const cols = ColumnStore.open(svc.dataDir);
    const mid = Math.floor(cols.marker() / 2);
    await cols.clearFrom(mid);
    assert.equal(cols.marker(), mid - 1);
    await cols.close();
    svc = await svc.restart();
    for (let i = 0; i < checks.length; i++) assert.deepEqual(await engine(svc).query(projectId, TZ, GOALS, checks[i]!), before[i], 'after restart');
    await svc.stop();
    const rebuilt = await rebuild(svc.dataDir);
    assert.equal(rebuilt.columnEvents, EVENTS);
    svc = await svc.restart();
    for (let i = 0; i < checks.length; i++) assert.deepEqual(await engine(svc).query(projectId, TZ, GOALS, checks[i]!), before[i], 'after rebuild');

    assert.ok(readFileSync(path.join(svc.dataDir, 'columns.lmdb')).includes(MARK));
    const del = await api(svc.url, `/projects/${projectId}`, { key: svc.adminKey, method: 'DELETE' });
    assert.equal(del.status, 200, JSON.stringify(del.body));
    await svc.service.engine.snapshotNow(); // the erasure runs in the background; the contract's bound is the next snapshot
    assert.equal(readFileSync(path.join(svc.dataDir, 'columns.lmdb')).includes(MARK), false, 'erased values remain in columns.lmdb');
    const after = await engine(svc).query(projectId, TZ, GOALS, checks[0]!);
    assert.equal(after.totals[0], 0);
  });
});
