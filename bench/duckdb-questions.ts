import { DOUBLE, DuckDBDataChunk, DuckDBInstance, VARCHAR, type DuckDBConnection, type DuckDBValue } from '@duckdb/node-api';
import type { Dimension, Filter, FunnelQuestion, FunnelStepAnswer, Metric, Question, QueryAnswer } from '../src/core/query/types.ts';
import type { StoredEvent } from '../src/core/types.ts';

/**
 * DuckDB as the bench's yardstick for the questions (issue "Ask anything", Q1–Q6): the same events in an in-memory
 * DuckDB table, and each question answered by one SQL statement with the contract's semantics (CONTRACT.md "Questions:
 * POST /query", "Goals and funnels"), in the column store's answer shapes so both can be compared with deepEqual.
 * Visits are computed from the events by each statement (no table prepared for a question), as an analyst would ask;
 * the table's one addition is `ord`, the events' rank by time then log order (`seq`), so "first" and "last" are one
 * integer comparison.
 *
 * Covered: metrics visitors, visits, pageviews, events, bounceRate, viewsPerVisit, visitDuration; at most one dimension
 * (a visit-level one, `page`, `event`, `time:hour` or `time:day`); filters on those dimensions; funnels of event or page
 * steps. `time:hour` is UTC only. Anything else is refused with an error naming it.
 */

/** Rows per appended chunk: DuckDB's vector size. */
const CHUNK_ROWS = 2_048;

/** The project of the bench's generated events. */
export const BENCH_PROJECT = 'p_bench';

export interface DuckDb {
  instance: DuckDBInstance;
  connection: DuckDBConnection;
  events: number;
}

const COLUMNS = ['p', 'ts', 'rt', 'day', 'event', 'path', 'source', 'sessionId', 'user', 'country', 'device', 'browser', 'os', 'utmMedium', 'utmCampaign', 'params', 'seq'] as const;

/** A value column as the column store keeps it: '' and absent are no value (NULL). */
const val = (s: string | undefined): string | null => (s === undefined || s === '' ? null : s);

/** Loads the events (in log order: seq 1, 2, ...) into a new in-memory database's `events` table. */
export async function loadDuckDb(events: Iterable<StoredEvent>): Promise<DuckDb> {
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  const types = COLUMNS.map((c) => (c === 'ts' || c === 'rt' || c === 'seq' ? DOUBLE : VARCHAR));
  await connection.run(`CREATE TABLE raw (${COLUMNS.map((c, i) => `"${c}" ${types[i] === DOUBLE ? 'DOUBLE' : 'VARCHAR'}`).join(', ')})`);
  const appender = await connection.createAppender('raw');
  const cols: DuckDBValue[][] = COLUMNS.map(() => []);
  const push = (): void => {
    if (cols[0]!.length === 0) return;
    const chunk = DuckDBDataChunk.create(types, cols[0]!.length);
    chunk.setColumns(cols);
    appender.appendDataChunk(chunk);
    for (const c of cols) c.length = 0;
  };
  let seq = 0;
  for (const e of events) {
    seq++;
    const row: DuckDBValue[] = [
      e.p,
      e.ts,
      e.rt,
      e.day,
      e.event,
      val(e.path),
      val(e.source),
      e.sessionId,
      e.user,
      val(e.country),
      val(e.device),
      e.browser ?? 'Unknown',
      e.os ?? 'Unknown',
      val(e.utmMedium),
      val(e.utmCampaign),
      JSON.stringify(e.params),
      seq,
    ];
    for (let i = 0; i < row.length; i++) cols[i]!.push(row[i]!);
    if (cols[0]!.length === CHUNK_ROWS) push();
  }
  push();
  appender.closeSync();
  await connection.run(
    `CREATE TABLE events AS SELECT * REPLACE (CAST(ts AS BIGINT) AS ts, CAST(rt AS BIGINT) AS rt, CAST(day AS DATE) AS day, CAST(seq AS BIGINT) AS seq),
       row_number() OVER (ORDER BY ts, seq) AS ord FROM raw ORDER BY seq`,
  );
  await connection.run('DROP TABLE raw');
  return { instance, connection, events: seq };
}

export function closeDuckDb(db: DuckDb): void {
  db.connection.closeSync();
  db.instance.closeSync();
}

/** A string as a SQL literal. */
const lit = (s: string): string => `'${s.replaceAll("'", "''")}'`;

/** The SQL expression of a dimension's value: over the visit table `v` (visit level) or the event `e`. */
const VISIT_COLUMN: Partial<Record<Dimension, string>> = {
  source: 'v.source',
  utmMedium: 'v.utmMedium',
  utmCampaign: 'v.utmCampaign',
  country: 'v.country',
  device: 'v.device',
  browser: 'v.browser',
  os: 'v.os',
  entryPage: 'v.entry',
  exitPage: 'v.exit',
};

/** The hour of an event within its visit's day (UTC); an event past its day's end counts in the day's last hour, as the column store does. */
const HOUR_OF = `least(23, greatest(0, floor((e.ts - epoch_ms(e.day::TIMESTAMP)) / 3600000)))::INTEGER`;

function dimExpr(d: Dimension, timeZone: string): string {
  const v = VISIT_COLUMN[d];
  if (v) return v;
  if (d === 'page') return 'e.path';
  if (d === 'event') return 'e.event';
  if (d === 'time:day') return `strftime(e.day, '%Y-%m-%d')`;
  if (d === 'time:hour') {
    if (timeZone !== 'UTC') throw new Error(`duckdb reference: time:hour only in UTC, not ${timeZone}`);
    return `strftime(e.day::TIMESTAMP + to_hours(${HOUR_OF}), '%Y-%m-%dT%H')`;
  }
  throw new Error(`duckdb reference: dimension ${d} is not covered`);
}

function filterSql([op, dim, values]: Filter, timeZone: string): string {
  const up = dim === 'country';
  const x = up ? `upper(${dimExpr(dim, timeZone)})` : dimExpr(dim, timeZone);
  if (op === 'is' || op === 'isNot') {
    const list = values.map((s) => lit(up ? s.toUpperCase() : s)).join(', ');
    return op === 'is' ? `${x} IN (${list})` : `(${x} IS NULL OR ${x} NOT IN (${list}))`;
  }
  const any = values.map((s) => `contains(lower(${x}), ${lit(s.toLowerCase())})`).join(' OR ');
  return op === 'contains' ? `coalesce(${any}, false)` : `NOT coalesce(${any}, false)`;
}

const isVisitLevel = (d: Dimension): boolean => d in VISIT_COLUMN;

/** Visit-table columns by name: the values of the first event (least `ord`), entry / exit page, page views, duration. */
const VISIT_AGG: Record<string, string> = {
  visitor: 'arg_min(user, ord)',
  source: 'arg_min(source, ord)',
  utmMedium: 'arg_min(utmMedium, ord)',
  utmCampaign: 'arg_min(utmCampaign, ord)',
  country: 'arg_min(country, ord)',
  device: 'arg_min(device, ord)',
  browser: 'arg_min(browser, ord)',
  os: 'arg_min(os, ord)',
  entry: "arg_min(path, ord) FILTER (WHERE event = 'page_view')",
  exit: "arg_max(path, ord) FILTER (WHERE event = 'page_view')",
  pv: "count(*) FILTER (WHERE event = 'page_view')",
  dur: 'max(ts) - min(ts)',
};

/** The range's events of a project, and its visits (sessionId, day) with the columns a question reads. */
function visitsCte(projectId: string, from: string, to: string, need: Iterable<string>): string {
  const cols = [...new Set(need)].map((c) => `${VISIT_AGG[c]} AS ${c}`);
  return `ev AS (SELECT * FROM events WHERE p = ${lit(projectId)} AND day BETWEEN DATE ${lit(from)} AND DATE ${lit(to)}),
v AS (SELECT sessionId, day, ${cols.join(', ')} FROM ev GROUP BY sessionId, day)`;
}

/** The visit-table columns named in some SQL (as `v.<name>`), besides those always read. */
function visitColumnsOf(sql: string, always: string[]): string[] {
  return [...always, ...Object.keys(VISIT_AGG).filter((c) => sql.includes(`v.${c}`))];
}

/** A metric from a row's sums, with the column store's rounding (the same double arithmetic as JavaScript's). */
function metricSql(m: Metric): string {
  switch (m) {
    case 'visitors':
      return 'visitors::DOUBLE';
    case 'visits':
      return 'visits::DOUBLE';
    case 'pageviews':
      return 'pageviews::DOUBLE';
    case 'events':
      return 'events::DOUBLE';
    case 'bounceRate':
      return 'CASE WHEN withPv = 0 THEN 0 ELSE floor(bounces::DOUBLE / withPv * 100 * 10 + 0.5) / 10 END';
    case 'viewsPerVisit':
      return 'CASE WHEN visits = 0 THEN 0 ELSE floor(pvOfVisits::DOUBLE / visits * 100 + 0.5) / 100 END';
    case 'visitDuration':
      return 'CASE WHEN visits = 0 THEN 0 ELSE floor(durMs::DOUBLE / visits / 1000 + 0.5) END';
    case 'conversionRate':
      throw new Error('duckdb reference: conversionRate is not covered');
    default:
      throw new Error(`duckdb reference: ${m} is not covered (test/query-columns.test.ts checks revenue against SQL)`);
  }
}

/** Sums of the selected (row, visit) pairs of `rv` into one row's figures. */
const SUMS = `count(DISTINCT visitor) AS visitors, count(*) AS visits, sum(pageviews) AS pageviews, sum(events) AS events,
  count(*) FILTER (WHERE pv = 1) AS bounces, count(*) FILTER (WHERE pv >= 1) AS withPv, sum(pv) AS pvOfVisits, sum(dur) AS durMs`;

/** The SQL of a `POST /query` question: one statement, rows (ordered, paged) then the totals row. */
export function querySql(q: Question, projectId = BENCH_PROJECT, timeZone = 'UTC'): string {
  if (q.dimensions.length > 1) throw new Error('duckdb reference: at most one dimension');
  const d = q.dimensions[0];
  const visitFilters = q.filters.filter(([, dim]) => isVisitLevel(dim)).map((f) => filterSql(f, timeZone));
  const eventFilters = q.filters.filter(([, dim]) => !isVisitLevel(dim)).map((f) => filterSql(f, timeZone));
  const where = [...visitFilters, ...eventFilters];
  const metrics = q.metrics.map((m, i) => `${metricSql(m)} AS m${i}`).join(', ');
  const perVisit = (key: string): string => `SELECT ${key} sessionId, day, any_value(visitor) AS visitor, any_value(pv) AS pv, any_value(dur) AS dur,
    count(*) AS events, count(*) FILTER (WHERE event = 'page_view') AS pageviews FROM sel GROUP BY ${key} sessionId, day`;
  const sel = `sel AS (SELECT e.event, e.sessionId, e.day, v.visitor, v.pv, v.dur${d ? `, ${dimExpr(d, timeZone)} AS d` : ''}
  FROM ev e JOIN v USING (sessionId, day)${where.length ? ` WHERE ${where.join(' AND ')}` : ''})`;
  const totals = `tot AS (SELECT ${SUMS} FROM (${perVisit('')}))`;
  const need = visitColumnsOf(sel, ['visitor', 'pv', 'dur']);
  if (!d) return `WITH ${visitsCte(projectId, q.from, q.to, need)}, ${sel}, ${totals} SELECT ${metrics} FROM tot`;
  const rows = `r AS (SELECT d, ${SUMS} FROM (${perVisit('d,')}) WHERE d IS NOT NULL GROUP BY d)`;
  // a time dimension alone: every bucket of the range is a row, zeros included
  let rowSource = 'r';
  if ((d === 'time:hour' || d === 'time:day') && q.dimensions.length === 1) {
    const step = d === 'time:hour' ? `INTERVAL 1 HOUR` : `INTERVAL 1 DAY`;
    const fmt = d === 'time:hour' ? '%Y-%m-%dT%H' : '%Y-%m-%d';
    rowSource = `(SELECT strftime(b, '${fmt}') AS d, coalesce(visitors, 0) AS visitors, coalesce(visits, 0) AS visits, coalesce(pageviews, 0) AS pageviews,
      coalesce(events, 0) AS events, coalesce(bounces, 0) AS bounces, coalesce(withPv, 0) AS withPv, coalesce(pvOfVisits, 0) AS pvOfVisits, coalesce(durMs, 0) AS durMs
      FROM generate_series(TIMESTAMP ${lit(q.from)}, TIMESTAMP ${lit(q.to)} + INTERVAL 1 DAY - ${step}, ${step}) AS g(b) LEFT JOIN r ON r.d = strftime(b, '${fmt}'))`;
  }
  const order = q.orderBy.map(([name, dir]) => {
    const mi = q.metrics.indexOf(name as Metric);
    const col = mi >= 0 ? `m${mi}` : name === d ? 'd' : undefined;
    if (col === undefined) throw new Error(`duckdb reference: orderBy ${name} is neither a metric nor the dimension`);
    return `${col} ${dir.toUpperCase()}`;
  });
  const mcols = q.metrics.map((_, i) => `m${i}`).join(', ');
  const ranked = `ranked AS (SELECT d, ${mcols}, count(*) OVER () AS totalRows, row_number() OVER (ORDER BY ${[...order, 'd ASC'].join(', ')}) AS rn
    FROM (SELECT d, ${metrics} FROM ${rowSource}))`;
  return `WITH ${visitsCte(projectId, q.from, q.to, need)}, ${sel}, ${totals}, ${rows}, ${ranked}
SELECT 0 AS totalsRow, rn, d, ${mcols}, totalRows FROM ranked WHERE rn > ${q.offset} AND rn <= ${q.offset + q.limit}
UNION ALL SELECT 1, 0, NULL, ${metrics}, NULL FROM tot
ORDER BY totalsRow, rn`;
}

/** `*` matches any run of characters; the rest is literal (LIKE with `\` as escape). */
function likePattern(pattern: string): string {
  return pattern.replace(/[\\%_]/g, (c) => `\\${c}`).replaceAll('*', '%');
}

/** The SQL of a funnel: each step's visits and visitors, a visit reaching step k at its first matching event after step k−1's. */
export function funnelSql(q: FunnelQuestion, projectId = BENCH_PROJECT, timeZone = 'UTC'): string {
  const filters = q.filters.map((f) => {
    if (!isVisitLevel(f[1])) throw new Error(`duckdb reference: funnel filter on ${f[1]} (visit-level only)`);
    return filterSql(f, timeZone);
  });
  const match = q.steps.map((s) => (s.event !== undefined ? `e.event = ${lit(s.event)}` : `e.event = 'page_view' AND e.path LIKE ${lit(likePattern(s.page ?? ''))} ESCAPE '\\'`));
  const steps = match.map((m, i) =>
    i === 0
      ? `s0 AS (SELECT e.sessionId, e.day, min(e.ord) AS k FROM ev e JOIN fv USING (sessionId, day) WHERE ${m} GROUP BY e.sessionId, e.day)`
      : `s${i} AS (SELECT e.sessionId, e.day, min(e.ord) AS k FROM ev e JOIN s${i - 1} s USING (sessionId, day) WHERE ${m} AND e.ord > s.k GROUP BY e.sessionId, e.day)`,
  );
  const counts = match.map((_, i) => `SELECT ${i} AS step, count(*)::DOUBLE AS visits, count(DISTINCT fv.visitor)::DOUBLE AS visitors FROM s${i} JOIN fv USING (sessionId, day)`);
  return `WITH ${visitsCte(projectId, q.from, q.to, visitColumnsOf(filters.join(' '), ['visitor']))}, fv AS (SELECT * FROM v${filters.length ? ` WHERE ${filters.join(' AND ')}` : ''}),
${steps.join(',\n')}
${counts.join('\nUNION ALL ')} ORDER BY step`;
}

const round1 = (x: number): number => Math.round(x * 10) / 10;

export async function duckdbQuery(db: DuckDb, q: Question, projectId = BENCH_PROJECT, timeZone = 'UTC'): Promise<QueryAnswer> {
  const rows = (await db.connection.runAndReadAll(querySql(q, projectId, timeZone))).getRowsJS();
  const nm = q.metrics.length;
  if (q.dimensions.length === 0) {
    const totals = rows[0]!.slice(0, nm).map(Number);
    return { results: [{ dimensions: [], metrics: totals }], totals, totalRows: 1 };
  }
  const body = rows.filter((r) => r[0] === 0);
  const totalsRow = rows.find((r) => r[0] === 1)!;
  return {
    results: body.map((r) => ({ dimensions: [String(r[2])], metrics: r.slice(3, 3 + nm).map(Number) })),
    totals: totalsRow.slice(3, 3 + nm).map(Number),
    // the row count rides on the rows: a page past the last row asks again from the first
    totalRows: body.length > 0 ? Number(body[0]![3 + nm]) : q.offset === 0 ? 0 : (await duckdbQuery(db, { ...q, offset: 0, limit: 1 }, projectId, timeZone)).totalRows,
  };
}

export async function duckdbFunnel(db: DuckDb, q: FunnelQuestion, projectId = BENCH_PROJECT, timeZone = 'UTC'): Promise<FunnelStepAnswer[]> {
  const rows = (await db.connection.runAndReadAll(funnelSql(q, projectId, timeZone))).getRowsJS();
  const visits = rows.map((r) => Number(r[1]));
  return q.steps.map((s, i) => ({
    label: s.label,
    visits: visits[i]!,
    visitors: Number(rows[i]![2]),
    conversionRate: visits[0] === 0 ? 0 : round1((visits[i]! / visits[0]!) * 100),
    dropoff: i === 0 ? 0 : visits[i - 1]! - visits[i]!,
  }));
}

/** Either answer, by the question's shape (a funnel has steps). */
export function duckdbAnswer(db: DuckDb, q: Question | FunnelQuestion, projectId = BENCH_PROJECT, timeZone = 'UTC'): Promise<QueryAnswer | FunnelStepAnswer[]> {
  return 'steps' in q ? duckdbFunnel(db, q, projectId, timeZone) : duckdbQuery(db, q, projectId, timeZone);
}

export interface BenchQuestion {
  id: string;
  label: string;
  question: Question | FunnelQuestion;
}

/** Q1–Q6 of the issue over the range from … to (Q3: the day `to`), as bench/questions.ts asks them. */
export function benchQuestions(from: string, to: string): BenchQuestion[] {
  const base: Question = { from, to, metrics: [], dimensions: [], filters: [], orderBy: [], limit: 10, offset: 0 };
  return [
    { id: 'q1', label: 'Q1 visit filter (country): visitors, visits, pageviews, bounce rate, duration', question: { ...base, metrics: ['visitors', 'visits', 'pageviews', 'bounceRate', 'visitDuration'], filters: [['is', 'country', ['DE']]] } },
    { id: 'q2', label: 'Q2 event filter (page): visitors, visits, top 10 sources', question: { ...base, metrics: ['visitors', 'visits'], dimensions: ['source'], filters: [['is', 'page', ['/pricing']]], orderBy: [['visitors', 'desc']] } },
    { id: 'q3', label: 'Q3 one day by time:hour: pageviews, visitors', question: { ...base, from: to, to, metrics: ['pageviews', 'visitors'], dimensions: ['time:hour'], orderBy: [['time:hour', 'asc']], limit: 100 } },
    { id: 'q4', label: 'Q4 top 10 pages with visitors, visits from one source', question: { ...base, metrics: ['visitors'], dimensions: ['page'], filters: [['is', 'source', ['Google']]], orderBy: [['visitors', 'desc']] } },
    { id: 'q5', label: 'Q5 two-step funnel', question: { from, to, filters: [], steps: [{ label: 'page:/', page: '/' }, { label: 'page:/pricing', page: '/pricing' }] } },
    { id: 'q6', label: 'Q6 contains on page, top 10 countries', question: { ...base, metrics: ['visitors'], dimensions: ['country'], filters: [['contains', 'page', ['post-1']]], orderBy: [['visitors', 'desc']] } },
  ];
}
