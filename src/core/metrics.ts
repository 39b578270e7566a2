import { sortedBreakdown } from './capped-counter.ts';
import { formatRate, type DayAggregate } from './day-aggregate.ts';
import { daysBetween, eachDay, isValidDate } from './dates.ts';
import { HyperLogLog } from './hyperloglog.ts';
import { MAX_QUERY_DATE, MAX_RANGE_DAYS, MIN_QUERY_DATE, RECENT_RETURNED } from './limits.ts';
import { NumberSet } from './number-table.ts';
import type { AnalyticsState } from './state.ts';
import type { DailyFigures, MetricsResponse, RecentEvent } from './types.ts';

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

/** Combined figures of the range plus a per-day series: the one JSON shape of GET /metrics. */
export function metrics(
  state: AnalyticsState,
  projectId: string,
  timezone: string,
  from: string,
  to: string,
): MetricsResponse {
  const p = state.projects.get(projectId);
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
    daily.push({
      date,
      users: d.users.size,
      sessions: d.sessions.size,
      pageviews: d.pageviews,
      bounceRate: formatRate(d.bounces, d.sessionsWithPageview),
    });
  }

  return {
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
  };
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

