import { sortedBreakdown } from './capped-counter.ts';
import { formatRate, INSIGHT_BREAKDOWNS, type DayAggregate, type InsightBreakdown } from './day-aggregate.ts';
import { addDays, daysBetween, eachDay, isValidDate } from './dates.ts';
import { HyperLogLog } from './hyperloglog.ts';
import { MAX_QUERY_DATE, MAX_RANGE_DAYS, MAX_REVENUE_CURRENCIES, MIN_QUERY_DATE, RECENT_RETURNED } from './limits.ts';
import { NumberSet } from './number-table.ts';
import type { AnalyticsState, ProjectState } from './state.ts';
import type { Breakdown, Comparison, DailyFigures, MetricsResponse, RecentEvent, RevenueFigure } from './types.ts';

export interface RangeQuery {
  date?: string | undefined;
  from?: string | undefined;
  to?: string | undefined;
}

export type RangeResult = { ok: true; from: string; to: string } | { ok: false; message: string };

/** The contract's date rules: none = today, `date`, or `from` with optional `to` (default today). */
export function resolveRange(q: RangeQuery, today: string): RangeResult {
  if (q.date !== undefined && (q.from !== undefined || q.to !== undefined)) {
    return { ok: false, message: '`date` cannot be combined with `from`/`to`' };
  }
  if (q.to !== undefined && q.from === undefined) return { ok: false, message: '`to` requires `from`' };
  for (const [name, v] of [['date', q.date], ['from', q.from], ['to', q.to]] as const) {
    if (v !== undefined && !isValidDate(v)) return { ok: false, message: `\`${name}\` must be a date YYYY-MM-DD` };
    if (v !== undefined && (v < MIN_QUERY_DATE || v > MAX_QUERY_DATE)) {
      return { ok: false, message: `\`${name}\` must lie between ${MIN_QUERY_DATE} and ${MAX_QUERY_DATE}` };
    }
  }
  const from = q.date ?? q.from ?? today;
  const to = q.date ?? q.to ?? (q.from !== undefined ? today : from);
  if (!isValidDate(from) || !isValidDate(to) || from < MIN_QUERY_DATE || to > MAX_QUERY_DATE) {
    // only reachable through `today` (a clock outside the bounds): refuse rather than loop
    return { ok: false, message: `dates must lie between ${MIN_QUERY_DATE} and ${MAX_QUERY_DATE}` };
  }
  if (from > to) return { ok: false, message: '`from` must not be after `to`' };
  if (daysBetween(from, to) > MAX_RANGE_DAYS) {
    return { ok: false, message: `a range covers at most ${MAX_RANGE_DAYS} days` };
  }
  return { ok: true, from, to };
}

/** CONTRACT: the values of `compare`. */
export const COMPARE_MODES = ['previous', 'year'] as const;
export type CompareMode = (typeof COMPARE_MODES)[number];

export function isCompareMode(v: string): v is CompareMode {
  return (COMPARE_MODES as readonly string[]).includes(v);
}

/**
 * The comparison range: `previous` is the range of the same length ending the day before `from`; `year` the same
 * dates one year earlier, Feb 29 mapping to Feb 28.
 */
export function compareRange(mode: CompareMode, from: string, to: string): { from: string; to: string } {
  if (mode === 'previous') {
    const n = daysBetween(from, to);
    return { from: addDays(from, -n), to: addDays(from, -1) };
  }
  return { from: yearEarlier(from), to: yearEarlier(to) };
}

function yearEarlier(day: string): string {
  const year = String(Number(day.slice(0, 4)) - 1).padStart(4, '0');
  const md = day.slice(5);
  return `${year}-${md === '02-29' ? '02-28' : md}`;
}

export interface MetricsOptions {
  /** the project's `tracked_props`: the keys `props` reports */
  trackedProps?: readonly string[] | undefined;
  /** the comparison range, when asked for */
  compare?: { from: string; to: string } | undefined;
}

/** Combined figures of the range plus a per-day series: the one JSON shape of GET /metrics. */
export function metrics(
  state: AnalyticsState,
  projectId: string,
  timezone: string,
  from: string,
  to: string,
  opts: MetricsOptions = {},
): MetricsResponse {
  const p = state.projects.get(projectId);
  const insights = new Map<InsightBreakdown, Map<string, number>>(INSIGHT_BREAKDOWNS.map((name) => [name, new Map()]));
  const revenueTotals = new Map<string, number>();
  const revenuePurchases = new Map<string, number>();
  const tracked = opts.trackedProps ?? [];
  const props = new Map<string, Map<string, number>>(tracked.map((k) => [k, new Map()]));
  const sources = new Map<string, number>();
  const countries = new Map<string, number>();
  const devices = new Map<string, number>();
  const pages = new Map<string, number>();
  const events = new Map<string, number>();
  const present: DayAggregate[] = [];
  const daily: DailyFigures[] = [];
  let sessions = 0;
  let pageviews = 0;
  let bounces = 0;
  let withPageview = 0;
  let bots = 0;

  for (const date of eachDay(from, to)) {
    const d = p?.days.get(date);
    bots += p?.bots.get(date) ?? 0;
    if (!d) {
      daily.push({ date, users: 0, sessions: 0, pageviews: 0, bounceRate: '0.0%' });
      continue;
    }
    present.push(d);
    sessions += d.sessions.size;
    pageviews += d.pageviews;
    bounces += d.bounces;
    withPageview += d.sessionsWithPageview;
    d.sources.sumInto(sources);
    d.countries.sumInto(countries);
    d.devices.sumInto(devices);
    d.pages.sumInto(pages);
    d.events.sumInto(events);
    for (const name of INSIGHT_BREAKDOWNS) d.insights[name].sumInto(insights.get(name)!);
    d.revenueTotals.sumInto(revenueTotals);
    d.revenuePurchases.sumInto(revenuePurchases);
    for (const [key, into] of props) d.props.get(key)?.sumInto(into);
    daily.push({
      date,
      users: d.users.size,
      sessions: d.sessions.size,
      pageviews: d.pageviews,
      bounceRate: formatRate(d.bounces, d.sessionsWithPageview),
    });
  }

  const out: MetricsResponse = {
    projectId,
    from,
    to,
    timezone,
    users: distinctUsers(present),
    sessions,
    pageviews,
    bounceRate: formatRate(bounces, withPageview),
    trafficSources: sortedBreakdown(sources),
    countries: sortedBreakdown(countries),
    devices: sortedBreakdown(devices),
    pages: sortedBreakdown(pages),
    events: sortedBreakdown(events),
    bots,
    recentEvents: p ? recentIn(p.recent.newestFirst(), from, to) : [],
    daily,
    entryPages: sortedBreakdown(insights.get('entryPages')!),
    browsers: sortedBreakdown(insights.get('browsers')!),
    operatingSystems: sortedBreakdown(insights.get('operatingSystems')!),
    utmMediums: sortedBreakdown(insights.get('utmMediums')!),
    utmCampaigns: sortedBreakdown(insights.get('utmCampaigns')!),
    revenue: revenueFigures(revenueTotals, revenuePurchases),
    props: propFigures(props),
  };
  if (opts.compare) out.compare = headline(p, opts.compare.from, opts.compare.to);
  return out;
}

/** The headline figures and daily series of a range (the `compare` object). */
function headline(p: ProjectState | undefined, from: string, to: string): Comparison {
  const present: DayAggregate[] = [];
  const daily: DailyFigures[] = [];
  let sessions = 0;
  let pageviews = 0;
  let bounces = 0;
  let withPageview = 0;
  for (const date of eachDay(from, to)) {
    const d = p?.days.get(date);
    if (!d) {
      daily.push({ date, users: 0, sessions: 0, pageviews: 0, bounceRate: '0.0%' });
      continue;
    }
    present.push(d);
    sessions += d.sessions.size;
    pageviews += d.pageviews;
    bounces += d.bounces;
    withPageview += d.sessionsWithPageview;
    daily.push({ date, users: d.users.size, sessions: d.sessions.size, pageviews: d.pageviews, bounceRate: formatRate(d.bounces, d.sessionsWithPageview) });
  }
  return { from, to, users: distinctUsers(present), sessions, pageviews, bounceRate: formatRate(bounces, withPageview), daily };
}

/** Most purchases first, ties by code; totals rounded to 2 decimals once, after summing. */
function revenueFigures(totals: Map<string, number>, purchases: Map<string, number>): Record<string, RevenueFigure> {
  const entries = [...purchases].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, MAX_REVENUE_CURRENCIES);
  const out: Record<string, RevenueFigure> = {};
  for (const [code, n] of entries) out[code] = { total: Math.round((totals.get(code) ?? 0) * 100) / 100, purchases: n };
  return out;
}

function propFigures(props: Map<string, Map<string, number>>): Record<string, Breakdown> {
  const out: Record<string, Breakdown> = {};
  for (const [key, counts] of props) {
    Object.defineProperty(out, key, { value: sortedBreakdown(counts), enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/** Exact for one day and for ranges of small days; a sketch merge (within 1 %) once any day is large. */
function distinctUsers(days: DayAggregate[]): number {
  if (days.length === 0) return 0;
  if (days.length === 1) return days[0]!.users.size;
  if (days.every((d) => d.sketch === undefined)) {
    const union = new NumberSet();
    const add = (u: number) => void union.add(u);
    for (const d of days) d.users.forEach(add);
    return union.size;
  }
  const merged = new HyperLogLog();
  const add = (u: number) => merged.add(u);
  for (const d of days) {
    if (d.sketch) merged.merge(d.sketch);
    else d.users.forEach(add);
  }
  return merged.estimate();
}

function recentIn(ring: Iterable<RecentEvent & { day: string }>, from: string, to: string): RecentEvent[] {
  const out: RecentEvent[] = [];
  for (const { day, ...e } of ring) {
    if (day < from || day > to) continue;
    out.push(e);
    if (out.length === RECENT_RETURNED) break;
  }
  return out;
}

