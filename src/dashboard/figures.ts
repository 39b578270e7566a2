import { type Answer, get, type Metrics, post, type Refusal } from './api.ts';
import type { RecentEvent } from '../core/types.ts';
import { type CompareMode } from './prefs.ts';
import { addDays, daysBetween, MAX_RANGE_DAYS, type Range } from './ranges.ts';
import type { ViewFilter } from './state.ts';

/**
 * Everything the dashboard shows for one view, asked of the service. Without filters the headline figures, the
 * breakdowns and the daily chart come from GET /metrics (the daily aggregate); what it lacks (views per visit, visit
 * duration, exit pages, properties, goals, hours, weeks, months) comes from POST /query. With filters every figure
 * comes from POST /query, each table in the same unit as unfiltered (page views for pages, visits for visit
 * dimensions, events for events and properties).
 */

export type Unit = 'hour' | 'day' | 'week' | 'month';

export interface Totals {
  visitors: number;
  visits: number;
  pageviews: number;
  /** absent when the service cannot answer POST /query */
  viewsPerVisit?: number;
  bounceRate: number;
  visitDuration?: number;
}

/** A goal filter's headline: the goal's figures instead of the traffic's (CONTRACT: the dashboard's goal view). */
export interface GoalTotals {
  /** visitors who completed the goal */
  visitors: number;
  /** events that completed it */
  conversions: number;
  conversionRate: number;
}

export interface Series {
  unit: Unit;
  /** bucket keys as the service names them: YYYY-MM-DDTHH, YYYY-MM-DD (days and ISO weeks' Mondays), YYYY-MM */
  keys: string[];
  /** page views by bucket; under a goal filter, the goal's conversions (`conversions` is then true) */
  pageviews: number[];
  visitors: number[];
  conversions?: boolean;
}

export type Row = [value: string, figure: number];

export interface TableSpec {
  /** the GET /metrics field (or a name of our own), used as data-table */
  id: string;
  dimension: string;
  metric: 'pageviews' | 'visits' | 'events';
  card: string;
  label: string;
  /** from GET /metrics when unfiltered */
  fromMetrics: boolean;
}

const visit = (id: string, dimension: string, card: string, label: string, fromMetrics = true): TableSpec => ({ id, dimension, metric: 'visits', card, label, fromMetrics });

export const TABLES: TableSpec[] = [
  visit('trafficSources', 'source', 'Sources', 'Sources'),
  visit('utmMediums', 'utmMedium', 'Sources', 'Mediums'),
  visit('utmCampaigns', 'utmCampaign', 'Sources', 'Campaigns'),
  { id: 'pages', dimension: 'page', metric: 'pageviews', card: 'Pages', label: 'Top pages', fromMetrics: true },
  visit('entryPages', 'entryPage', 'Pages', 'Entry pages'),
  visit('exitPages', 'exitPage', 'Pages', 'Exit pages', false),
  visit('countries', 'country', 'Countries', 'Countries'),
  visit('devices', 'device', 'Devices', 'Devices'),
  visit('browsers', 'browser', 'Devices', 'Browsers'),
  visit('operatingSystems', 'os', 'Devices', 'Systems'),
  { id: 'events', dimension: 'event', metric: 'events', card: 'Events', label: 'Events', fromMetrics: true },
];

export interface GoalRow {
  id: string | undefined;
  name: string;
  visitors: number;
  conversionRate: number;
}

export interface Figures {
  projectId: string;
  from: string;
  to: string;
  timezone: string;
  totals: Totals;
  /** `until`: the period runs (it ends today), so it is compared with the previous one's same elapsed part, to that time */
  compare?: { from: string; to: string; totals: Totals; series: Series; goal?: GoalTotals; until?: string };
  /** set under a goal filter: the tiles show the goal's figures */
  goal?: GoalTotals;
  series: Series;
  tables: Map<string, Row[]>;
  /** property key → values by events */
  props: Map<string, Row[]>;
  goals?: GoalRow[];
  recent: RecentEvent[];
  revenue?: Metrics['revenue'];
  /** false when the service has no POST /query (an older one): filters cannot be offered */
  questions: boolean;
}

export interface Asker {
  key: string;
  /** sent only for admin keys */
  projectId: string | undefined;
}

/** Rows a table asks for: the top ones are shown, "Show all" opens the rest. */
const TABLE_LIMIT = 200;
/** One page of POST /query holds every bucket of a range: 366 days or 24 hours. */
const SERIES_LIMIT = 1000;
const HEADLINE = ['visitors', 'visits', 'pageviews', 'viewsPerVisit', 'bounceRate', 'visitDuration'] as const;

export function unitFor(r: Range): Unit {
  const days = daysBetween(r.from, r.to);
  // Days up to a quarter; weeks up to half a year; months beyond, so a chart never has more than ~90 points.
  return days === 1 ? 'hour' : days <= 90 ? 'day' : days <= 200 ? 'week' : 'month';
}

/** The range GET /metrics compares with, computed the same way for POST /query. */
export function compareRange(r: Range, mode: CompareMode): Range | undefined {
  if (mode === 'off') return undefined;
  if (mode === 'previous') {
    const n = daysBetween(r.from, r.to);
    return { from: addDays(r.from, -n), to: addDays(r.from, -1) };
  }
  const back = (d: string) => {
    const y = `${Number(d.slice(0, 4)) - 1}`.padStart(4, '0') + d.slice(4);
    return y.endsWith('-02-29') ? y.replace(/29$/, '28') : y;
  };
  return { from: back(r.from), to: back(r.to) };
}

interface QueryResult {
  results: Array<{ dimensions: string[]; metrics: number[] }>;
  totals: number[];
  timezone: string;
  projectId: string;
}

export class Asked {
  constructor(readonly refusal: Refusal) {}
}

function ask(a: Asker, body: Record<string, unknown>): Promise<Answer<QueryResult>> {
  return post<QueryResult>('query', a.key, { ...(a.projectId ? { projectId: a.projectId } : {}), ...body });
}

/** True when a refusal means "this service has no such route" (an older service). */
export function noRoute(r: Refusal): boolean {
  return r.status === 404 && /route/i.test(r.message);
}

export function asFilters(filters: ViewFilter[]): Array<[string, string, string[]]> {
  return filters.map((f) => ['is', f.dimension, [f.value]]);
}

function unwrap<T>(r: Answer<T>): T {
  if (!r.ok) throw new Asked(r);
  return r.value;
}

function totalsOf(names: readonly string[], values: number[]): Totals {
  const t: Record<string, number> = {};
  names.forEach((n, i) => (t[n] = values[i] ?? 0));
  return t as unknown as Totals;
}

async function seriesOf(a: Asker, r: Range, unit: Unit, filters: ViewFilter[], until?: string): Promise<Series> {
  // under a goal filter the first line is the goal's conversions (its events), not page views
  const conversions = filters.some((f) => f.dimension === 'goal');
  const q = unwrap(await ask(a, { ...r, metrics: [conversions ? 'events' : 'pageviews', 'visitors'], dimensions: [`time:${unit}`], filters: asFilters(filters), limit: SERIES_LIMIT, ...(until ? { until } : {}) }));
  return { unit, keys: q.results.map((x) => x.dimensions[0]!), pageviews: q.results.map((x) => x.metrics[0]!), visitors: q.results.map((x) => x.metrics[1]!), ...(conversions ? { conversions } : {}) };
}

async function tableOf(a: Asker, r: Range, dimension: string, metric: string, filters: ViewFilter[]): Promise<Row[]> {
  const q = unwrap(await ask(a, { ...r, metrics: [metric], dimensions: [dimension], filters: asFilters(filters), limit: TABLE_LIMIT }));
  return q.results.map((x) => [x.dimensions[0]!, x.metrics[0]!]);
}

/** Events that carry no value of a property, as Plausible shows them: a row of their own at the end. */
export const NONE = '(none)';

/** A property's values by events, and a (none) row for the selected events without the key. */
async function propTable(a: Asker, r: Range, key: string, filters: ViewFilter[]): Promise<Row[]> {
  const dim = `prop:${key}`;
  const q = unwrap(await ask(a, { ...r, metrics: ['events'], dimensions: [dim], filters: asFilters(filters), limit: TABLE_LIMIT }));
  const rows: Row[] = q.results.map((x) => [x.dimensions[0]!, x.metrics[0]!]);
  // the totals count every selected event; those with the key are the rows (all of them, or asked with `contains ""`)
  const all = q.totals[0] ?? 0;
  const withKey = q.results.length < TABLE_LIMIT ? rows.reduce((s, [, n]) => s + n, 0) : (unwrap(await ask(a, { ...r, metrics: ['events'], filters: [...asFilters(filters), ['contains', dim, ['']]] })).totals[0] ?? 0);
  if (all > withKey) {
    rows.push([NONE, all - withKey]);
    rows.sort((x, y) => y[1] - x[1]); // in its place by count (stable: ties keep the values first)
  }
  return rows;
}

async function headline(a: Asker, r: Range, filters: ViewFilter[], until?: string): Promise<Totals> {
  const q = unwrap(await ask(a, { ...r, metrics: HEADLINE, filters: asFilters(filters), ...(until ? { until } : {}) }));
  return totalsOf(HEADLINE, q.totals);
}

function fromDaily(m: Pick<Metrics, 'daily'>): Series {
  return { unit: 'day', keys: m.daily.map((d) => d.date), pageviews: m.daily.map((d) => d.pageviews), visitors: m.daily.map((d) => d.users) };
}

function entries(b: Record<string, number> | undefined): Row[] {
  return Object.entries(b ?? {}).sort((x, y) => y[1] - x[1]);
}

export interface Wanted {
  range: Range;
  compare: CompareMode;
  filters: ViewFilter[];
  props: string[];
  /** the project's goals are read when its id is known */
  goalsOf: string | undefined;
  /** "All time": the range starts at the project's first day with data (asked first) */
  allTime?: boolean;
  /** today and the time of day now in the project's timezone: a range ending today is a running period */
  now?: { today: string; time: string };
}

/** The first day with events in `r` (by months, then days of that month), or undefined when it has none. */
async function firstDay(a: Asker, r: Range): Promise<string | undefined> {
  const months = unwrap(await ask(a, { ...r, metrics: ['events'], dimensions: ['time:month'], limit: SERIES_LIMIT }));
  const month = months.results.find((x) => x.metrics[0]! > 0)?.dimensions[0];
  if (month === undefined) return undefined;
  const from = month === r.from.slice(0, 7) ? r.from : `${month}-01`;
  const end = [addDays(`${month}-01`, 31), r.to].sort()[0]!;
  const days = unwrap(await ask(a, { from, to: end, metrics: ['events'], dimensions: ['time:day'], limit: SERIES_LIMIT }));
  return days.results.find((x) => x.metrics[0]! > 0)?.dimensions[0] ?? from;
}

/** Asks every figure of a view; throws Asked with the first refusal. `questions` false skips POST /query. */
export async function figures(a: Asker, w: Wanted, questions: boolean): Promise<Figures> {
  const { filters } = w;
  let range = w.range;
  // "All time": from the first day with data (a service without POST /query: its longest range)
  if (w.allTime) range = questions ? { from: (await firstDay(a, range)) ?? range.to, to: range.to } : { from: addDays(range.to, 1 - MAX_RANGE_DAYS), to: range.to };
  const unit = unitFor(range);
  const cmp = w.allTime ? undefined : compareRange(range, w.compare);
  // A running period compares with the same elapsed part of the previous one (today until 14:20 with yesterday until
  // 14:20): asked of POST /query with `until`, never GET /metrics's whole days.
  const until = questions && cmp && w.now && range.to === w.now.today ? w.now.time : undefined;
  // Over a year GET /metrics cannot answer: every figure comes from POST /query, as under filters.
  const long = daysBetween(range.from, range.to) > MAX_RANGE_DAYS;
  const filtered = questions && (filters.length > 0 || long);
  // GET /metrics: the headline and breakdowns when unfiltered, and recent events (which POST /query does not list).
  const read = long ? { from: addDays(range.to, 1 - MAX_RANGE_DAYS), to: range.to } : range;
  const metrics = unwrap(await get<Metrics>('metrics', a.key, { from: read.from, to: read.to, projectId: a.projectId, compare: cmp && !filtered && !until ? w.compare : undefined }));
  const out: Figures = {
    projectId: metrics.projectId, from: range.from, to: range.to, timezone: metrics.timezone,
    totals: { visitors: metrics.users, visits: metrics.sessions, pageviews: metrics.pageviews, bounceRate: parseFloat(metrics.bounceRate) },
    series: fromDaily(metrics),
    tables: new Map(TABLES.filter((t) => t.fromMetrics && metrics[t.id as keyof Metrics] !== undefined).map((t) => [t.id, entries(metrics[t.id as keyof Metrics] as Record<string, number>)])),
    props: new Map(Object.entries(metrics.props ?? {}).map(([k, v]) => [k, entries(v)])),
    recent: metrics.recentEvents,
    revenue: metrics.revenue,
    questions,
  };
  if (metrics.compare) {
    const c = metrics.compare;
    out.compare = { from: c.from, to: c.to, totals: { visitors: c.users, visits: c.sessions, pageviews: c.pageviews, bounceRate: parseFloat(c.bounceRate) }, series: fromDaily(c) };
  }
  if (!questions) return out;

  const jobs: Array<Promise<void>> = [];
  let compareSeries: Series | undefined;
  const job = (p: Promise<void>) => jobs.push(p);
  job(headline(a, range, filters).then((t) => void (out.totals = filtered ? t : { ...out.totals, viewsPerVisit: t.viewsPerVisit, visitDuration: t.visitDuration })));
  let compareGoal: GoalTotals | undefined;
  if (cmp) {
    job(headline(a, cmp, filters, until).then((t) => {
      const before = out.compare;
      const totals = filtered || !before ? t : { ...before.totals, viewsPerVisit: t.viewsPerVisit, visitDuration: t.visitDuration };
      out.compare = { from: cmp.from, to: cmp.to, totals, series: before?.series ?? { unit, keys: [], pageviews: [], visitors: [] }, ...(until ? { until } : {}) };
    }));
  }
  if (filtered && filters.some((f) => f.dimension === 'goal')) {
    job(goalTotals(a, range, filters).then((g) => void (out.goal = g)));
    if (cmp) job(goalTotals(a, cmp, filters, until).then((g) => void (compareGoal = g)));
  }
  if (filtered || unit !== 'day') job(seriesOf(a, range, unit, filters).then((s) => void (out.series = s)));
  if (cmp && (filtered || unit !== 'day' || until)) job(seriesOf(a, cmp, unit, filters, until).then((s) => void (compareSeries = s)));
  for (const t of TABLES) {
    if (filtered || !t.fromMetrics) job(tableOf(a, range, t.dimension, t.metric, filters).then((rows) => void out.tables.set(t.id, rows)));
  }
  const currencies = Object.keys(out.revenue ?? {});
  if (filtered && currencies.length > 0) job(revenueOf(a, range, currencies, filters).then((r) => void (out.revenue = r)));
  const keys = [...new Set([...out.props.keys(), ...w.props])];
  out.props = new Map(keys.map((k) => [k, []]));
  for (const k of keys) job(propTable(a, range, k, filters).then((rows) => void out.props.set(k, rows)));
  if (w.goalsOf) {
    job((async () => {
      const list = unwrap(await get<{ goals: Array<{ id: string; name: string }> }>(`projects/${encodeURIComponent(w.goalsOf!)}/goals`, a.key));
      if (list.goals.length === 0) return void (out.goals = []);
      const q = unwrap(await ask(a, { ...range, metrics: ['visitors', 'conversionRate'], dimensions: ['goal'], filters: asFilters(filters.filter((f) => f.dimension !== 'goal')), limit: TABLE_LIMIT }));
      out.goals = q.results.map((x) => ({ id: list.goals.find((g) => g.name === x.dimensions[0])?.id, name: x.dimensions[0]!, visitors: x.metrics[0]!, conversionRate: x.metrics[1]! }));
    })());
  }
  await Promise.all(jobs);
  if (compareSeries && out.compare) out.compare.series = compareSeries;
  if (compareGoal && out.compare) out.compare.goal = compareGoal;
  return out;
}

/** Under a goal filter: the goal's converted visitors, conversions and conversion rate. */
async function goalTotals(a: Asker, r: Range, filters: ViewFilter[], until?: string): Promise<GoalTotals> {
  const q = unwrap(await ask(a, { ...r, metrics: ['visitors', 'events', 'conversionRate'], filters: asFilters(filters), ...(until ? { until } : {}) }));
  return { visitors: q.totals[0] ?? 0, conversions: q.totals[1] ?? 0, conversionRate: q.totals[2] ?? 0 };
}

/** The property an event that carried revenue has in the column store (REVENUE_MARK, src/core/columns/segment.ts). */
const REVENUE_MARK = '\u0000revenue';

/** Metrics a question takes at most: revenue of more currencies is asked in several. */
const MAX_QUERY_METRICS = 10;

/**
 * Revenue under filters (POST /query's revenue:<CUR> for the currencies of the unfiltered range), with the filtered
 * purchases by currency: the revenue card follows the filters as every other figure does.
 */
async function revenueOf(a: Asker, r: Range, currencies: string[], filters: ViewFilter[]): Promise<Metrics['revenue']> {
  // purchases: events named purchase, and events of another name that carried revenue (REVENUE_MARK of the columns)
  const kinds: Array<Array<[string, string, string[]]>> = [[['is', 'event', ['purchase']]], [['isNot', 'event', ['purchase']], ['is', `prop:${REVENUE_MARK}`, ['1']]]];
  const counts = new Map<string, number>();
  for (const kind of kinds) {
    const purchases = unwrap(await ask(a, { ...r, metrics: ['events'], dimensions: ['prop:currency'], filters: [...asFilters(filters), ...kind], limit: TABLE_LIMIT }));
    for (const row of purchases.results) {
      const c = row.dimensions[0]!.toUpperCase();
      counts.set(c, (counts.get(c) ?? 0) + row.metrics[0]!);
    }
  }
  const out: NonNullable<Metrics['revenue']> = {};
  for (let i = 0; i < currencies.length; i += MAX_QUERY_METRICS) {
    const chunk = currencies.slice(i, i + MAX_QUERY_METRICS);
    const q = unwrap(await ask(a, { ...r, metrics: chunk.map((c) => `revenue:${c}`), filters: asFilters(filters) }));
    chunk.forEach((c, j) => {
      const purchases = counts.get(c) ?? 0;
      if (purchases > 0) out[c] = { total: q.totals[j] ?? 0, purchases };
    });
  }
  return out;
}

export interface FunnelStepFigure {
  label: string;
  visits: number;
  visitors: number;
  conversionRate: number;
  dropoff: number;
}

/** POST /query/funnel for `steps` (goal:, page:, event:), with the view's visit-level filters. */
export async function funnel(a: Asker, range: Range, steps: string[], filters: ViewFilter[]): Promise<Answer<{ steps: FunnelStepFigure[] }>> {
  const body = steps.map((s) => {
    const i = s.indexOf(':');
    const kind = s.slice(0, i);
    const value = s.slice(i + 1);
    return kind === 'goal' ? value : { [kind]: value };
  });
  return post('query/funnel', a.key, { ...(a.projectId ? { projectId: a.projectId } : {}), ...range, steps: body, filters: asFilters(filters) });
}

export const VISIT_LEVEL = new Set(['source', 'utmMedium', 'utmCampaign', 'country', 'device', 'browser', 'os', 'entryPage', 'exitPage']);
