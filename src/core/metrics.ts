import { sortedBreakdown } from './capped-counter.ts';
import { formatRate, PROPS_PREFIX, REVENUE_PURCHASES, REVENUE_TOTAL } from './day-aggregate.ts';
import { addFigures, type DayFigures, type LiveDays, type RangePart, type SealedSource } from './day-view.ts';
import { addDays, daysBetween, eachDay, isValidDate } from './dates.ts';
import { MAX_QUERY_DATE, MAX_RANGE_DAYS, MAX_REVENUE_CURRENCIES, MIN_QUERY_DATE, RANGE_EXACT_HASHES, RECENT_RETURNED } from './limits.ts';
import { breakdownSums, exactUsers, sketchedUsers } from './sketch-memo.ts';
import type { AnalyticsState } from './state.ts';
import type { Breakdown, Comparison, DailyFigures, MetricsResponse, RecentEvent, RevenueFigure } from './types.ts';

export interface RangeQuery {
  date?: string | undefined;
  from?: string | undefined;
  to?: string | undefined;
}

export type RangeResult = { ok: true; from: string; to: string } | { ok: false; message: string };

/** The contract's date rules: none = today, `date`, or `from` with optional `to` (default today). */
export function resolveRange(q: RangeQuery, today: string, maxDays: number = MAX_RANGE_DAYS): RangeResult {
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
  if (daysBetween(from, to) > maxDays) {
    return { ok: false, message: `a range covers at most ${maxDays} days` };
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
  /** sealed history (the engine's store); without it only live days are read */
  sealed?: SealedSource | undefined;
}

const NO_LIVE_DAYS: LiveDays = new Map();

/** Every part of a project's history in [from, to]: its live days, then its sealed days and months. */
function rangeParts(state: AnalyticsState, projectId: string, from: string, to: string, sealed: SealedSource | undefined): RangePart[] {
  const p = state.projects.get(projectId);
  const parts: RangePart[] = [];
  if (p) for (const d of p.days.values()) if (d.day >= from && d.day <= to) parts.push(d);
  if (sealed) for (const part of sealed.parts(projectId, from, to, p?.days ?? NO_LIVE_DAYS)) parts.push(part);
  return parts;
}

/** The headline figures and daily series of a range, from its parts (the answer's top and the `compare` object). */
function headline(parts: readonly RangePart[], from: string, to: string): Comparison & { bots: number } {
  const byDate = new Map<string, DayFigures>();
  /** parts with at least one user, and how many days they cover (a one-day range is exact from its figures) */
  const withUsers: RangePart[] = [];
  const dayParts = new Map<string, RangePart[]>();
  let userDays = 0;
  let sessions = 0;
  let pageviews = 0;
  let bounces = 0;
  let withPageview = 0;
  let bots = 0;
  for (const part of parts) {
    let users = 0;
    for (const f of part.figures()) {
      if (f.date < from || f.date > to) continue;
      users += f.users;
      if (f.users > 0) userDays++;
      sessions += f.sessions;
      pageviews += f.pageviews;
      bounces += f.bounces;
      withPageview += f.sessionsWithPageview;
      bots += f.bots;
      const seen = byDate.get(f.date);
      byDate.set(f.date, seen ? addFigures(seen, f) : f);
      if (f.users > 0) {
        const of = dayParts.get(f.date);
        if (of) of.push(part);
        else dayParts.set(f.date, [part]);
      }
    }
    if (users > 0) withUsers.push(part);
  }
  // A day in several parts (segments sealed apart, e.g. history imported after the day was sealed): its users are
  // the union of the parts' users, not their sum. Only day parts share a date (a month rollup is alone in its days).
  for (const [date, of] of dayParts) {
    if (of.length < 2 || of.some((x) => x.figures().length !== 1)) continue;
    byDate.set(date, { ...byDate.get(date)!, users: distinctUsers(of) });
  }
  const daily: DailyFigures[] = [];
  for (const date of eachDay(from, to)) {
    const f = byDate.get(date);
    daily.push(
      f
        ? { date, users: f.users, sessions: f.sessions, pageviews: f.pageviews, bounceRate: formatRate(f.bounces, f.sessionsWithPageview) }
        : { date, users: 0, sessions: 0, pageviews: 0, bounceRate: '0.0%' },
    );
  }
  const users = userDays === 1 ? withUsers[0]!.figures().find((f) => f.users > 0 && f.date >= from && f.date <= to)!.users : distinctUsers(withUsers);
  return { from, to, users, sessions, pageviews, bounceRate: formatRate(bounces, withPageview), daily, bots };
}

/**
 * Combined figures of the range plus a per-day series: the one JSON shape of GET /metrics. Live days come from the
 * state, sealed history from `opts.sealed` (the engine's store); both are RangeParts, and every breakdown (the
 * insights, revenue and tracked props included) is read by name through them, so a range answers the same whichever
 * side of the seal boundary its days are on. `compare` is read the same way.
 */
export function metrics(
  state: AnalyticsState,
  projectId: string,
  timezone: string,
  from: string,
  to: string,
  opts: MetricsOptions = {},
): MetricsResponse {
  const p = state.projects.get(projectId);
  const parts = rangeParts(state, projectId, from, to, opts.sealed);
  const head = headline(parts, from, to);
  const sum = breakdownSums(parts);
  const breakdown = (name: string) => sortedBreakdown(sum(name));
  const props = new Map<string, Map<string, number>>((opts.trackedProps ?? []).map((k) => [k, sum(PROPS_PREFIX + k)]));

  const out: MetricsResponse = {
    projectId,
    from,
    to,
    timezone,
    users: head.users,
    sessions: head.sessions,
    pageviews: head.pageviews,
    bounceRate: head.bounceRate,
    trafficSources: breakdown('trafficSources'),
    countries: breakdown('countries'),
    devices: breakdown('devices'),
    pages: breakdown('pages'),
    events: breakdown('events'),
    bots: head.bots,
    recentEvents: p ? recentIn(p.recent.newestFirst(), from, to) : [],
    daily: head.daily,
    entryPages: breakdown('entryPages'),
    browsers: breakdown('browsers'),
    operatingSystems: breakdown('operatingSystems'),
    utmMediums: breakdown('utmMediums'),
    utmCampaigns: breakdown('utmCampaigns'),
    revenue: revenueFigures(sum(REVENUE_TOTAL), sum(REVENUE_PURCHASES)),
    props: propFigures(props),
  };
  if (opts.compare) {
    const { bots: _bots, ...c } = headline(rangeParts(state, projectId, opts.compare.from, opts.compare.to, opts.sealed), opts.compare.from, opts.compare.to);
    out.compare = c;
  }
  return out;
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

/**
 * Exact while every part keeps its user hashes and they are few (RANGE_EXACT_HASHES); a sketch merge (within 1 %)
 * once any part is sketched or the union would be large.
 */
function distinctUsers(parts: RangePart[]): number {
  if (parts.length === 0) return 0;
  let hashes = 0;
  for (const d of parts) for (const f of d.figures()) hashes += f.users;
  if (hashes <= RANGE_EXACT_HASHES && parts.every((d) => d.sketch === undefined)) return exactUsers(parts, hashes);
  return sketchedUsers(parts);
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

