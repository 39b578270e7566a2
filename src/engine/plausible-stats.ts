import { addDays, dayOf } from '../core/dates.ts';
import { MAX_QUESTION_DAYS } from '../core/limits.ts';
import type { ProjectRecord } from '../store/records.ts';
import type { Outcome, QueryResponse, RequestMeta } from './types.ts';

/**
 * Plausible's Stats API v2 (`POST /api/v2/query`) as a translation over `POST /query`, so a script, connector or
 * agent written for Plausible reads here by changing the host and the key: the body's names become ours, the question
 * is asked through the same desk (its gates, its schema, its column store), and the answer goes back in Plausible's
 * shape. What has no counterpart here (another metric or dimension, a logical filter, `match`) is a 400 naming it.
 */

export interface StatsParts {
  byDomain(domain: string): ProjectRecord | undefined;
  query(meta: RequestMeta, body: unknown): Promise<Outcome<QueryResponse>>;
  now(): number;
}

/** Plausible's answer, or its error shape with the HTTP status. */
export type StatsAnswer = { ok: true; value: Record<string, unknown> } | { ok: false; status: number; error: string };

const METRICS: Record<string, string> = {
  visitors: 'visitors',
  visits: 'visits',
  pageviews: 'pageviews',
  views_per_visit: 'viewsPerVisit',
  bounce_rate: 'bounceRate',
  visit_duration: 'visitDuration',
  events: 'events',
  conversion_rate: 'conversionRate',
};

const DIMENSIONS: Record<string, string> = {
  'event:page': 'page',
  'event:name': 'event',
  'event:goal': 'goal',
  'visit:source': 'source',
  'visit:utm_medium': 'utmMedium',
  'visit:utm_campaign': 'utmCampaign',
  'visit:country': 'country',
  'visit:device': 'device',
  'visit:browser': 'browser',
  'visit:os': 'os',
  'visit:entry_page': 'entryPage',
  'visit:exit_page': 'exitPage',
  'time:hour': 'time:hour',
  'time:day': 'time:day',
  'time:week': 'time:week',
  'time:month': 'time:month',
};

const OPERATORS: Record<string, string> = { is: 'is', is_not: 'isNot', contains: 'contains', contains_not: 'notContains' };

class Refused extends Error {}

function dimension(d: unknown, where: string, days: number): string {
  if (typeof d !== 'string') throw new Refused(`${where}: a dimension is a string`);
  if (d === 'time') return days <= 1 ? 'time:hour' : 'time:day'; // Plausible picks the interval from the range
  if (d.startsWith('event:props:') && d.length > 'event:props:'.length) return `prop:${d.slice('event:props:'.length)}`;
  const ours = DIMENSIONS[d];
  if (ours === undefined) throw new Refused(`${where}: dimension "${d}" is not supported here; dimensions are ${Object.keys(DIMENSIONS).join(', ')}, time and event:props:<key>`);
  return ours;
}

/** `date_range` as first and last day in the site's timezone. */
function range(r: unknown, today: string): { from: string; to: string } {
  const month = today.slice(0, 7);
  const monthsBack = (n: number) => {
    const d = new Date(Date.UTC(Number(today.slice(0, 4)), Number(today.slice(5, 7)) - 1 - n, 1));
    return d.toISOString().slice(0, 10);
  };
  if (Array.isArray(r) && r.length === 2 && r.every((x) => typeof x === 'string')) return { from: (r[0] as string).slice(0, 10), to: (r[1] as string).slice(0, 10) };
  switch (r) {
    case 'day':
      return { from: today, to: today };
    case '7d':
      return { from: addDays(today, -6), to: today };
    case '28d':
      return { from: addDays(today, -27), to: today };
    case '30d':
      return { from: addDays(today, -29), to: today };
    case '91d':
      return { from: addDays(today, -90), to: today };
    case 'month':
      return { from: `${month}-01`, to: today };
    case '6mo':
      return { from: monthsBack(5), to: today };
    case '12mo':
      return { from: monthsBack(11), to: today };
    case 'year':
      return { from: `${today.slice(0, 4)}-01-01`, to: today };
    case 'all':
      return { from: addDays(today, 1 - MAX_QUESTION_DAYS), to: today };
    default:
      throw new Refused(`date_range ${JSON.stringify(r)} is not supported; use day, 7d, 28d, 30d, 91d, month, 6mo, 12mo, year, all or [from, to]`);
  }
}

/** "+01:00" for a day in a timezone (Plausible's query echo gives the range as date-times with their offset). */
function offsetOf(day: string, timeZone: string): string {
  const name = new Intl.DateTimeFormat('en-US', { timeZone, timeZoneName: 'longOffset' }).formatToParts(Date.parse(`${day}T12:00:00Z`)).find((p) => p.type === 'timeZoneName')?.value ?? 'GMT';
  return name === 'GMT' ? '+00:00' : name.slice(3);
}

/** A time bucket as Plausible writes it. */
function timeValue(dim: string, v: string): string {
  if (dim === 'time:hour') return `${v.slice(0, 10)} ${v.slice(11, 13)}:00:00`;
  if (dim === 'time:month') return `${v}-01`;
  return v;
}

const inverse = (m: Record<string, string>) => Object.fromEntries(Object.entries(m).map(([k, v]) => [v, k]));
const METRIC_NAMES = inverse(METRICS);

/** POST /api/v2/query: Plausible's body → POST /query → Plausible's answer. */
export async function plausibleQuery(parts: StatsParts, meta: RequestMeta, body: unknown): Promise<StatsAnswer> {
  try {
    if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new Refused('the body is a JSON object: {"site_id", "metrics", "date_range", ...}');
    const b = body as Record<string, unknown>;
    for (const field of Object.keys(b)) {
      if (!['site_id', 'metrics', 'date_range', 'dimensions', 'filters', 'order_by', 'include', 'pagination'].includes(field)) throw new Refused(`field "${field}" is not supported here`);
    }
    if (typeof b.site_id !== 'string') throw new Refused('site_id is required: the domain of a project');
    const project = parts.byDomain(b.site_id);
    if (!project) return { ok: false, status: 404, error: `no site "${b.site_id}": a project names its domain with PATCH /projects/{id} {"domain": ...}` };
    if (!Array.isArray(b.metrics) || b.metrics.length === 0) throw new Refused('metrics is a non-empty list');
    const metrics = b.metrics.map((m, i) => {
      const ours = typeof m === 'string' ? METRICS[m] : undefined;
      if (ours === undefined) throw new Refused(`metrics[${i}]: metric ${JSON.stringify(m)} is not supported here; metrics are ${Object.keys(METRICS).join(', ')}`);
      return ours;
    });
    const today = dayOf(parts.now(), project.timezone);
    const { from, to } = range(b.date_range, today);
    const days = Math.round((Date.parse(to) - Date.parse(from)) / 86_400_000) + 1;
    const dims = b.dimensions === undefined ? [] : Array.isArray(b.dimensions) ? b.dimensions.map((d, i) => dimension(d, `dimensions[${i}]`, days)) : (() => { throw new Refused('dimensions is a list'); })();
    const filters = b.filters === undefined ? [] : Array.isArray(b.filters) ? b.filters.map((f, i) => {
      if (!Array.isArray(f) || typeof f[0] !== 'string') throw new Refused(`filters[${i}]: a filter is [operator, dimension, [values]]`);
      const op = OPERATORS[f[0]];
      if (op === undefined) throw new Refused(`filters[${i}]: operator "${f[0]}" is not supported here (logical filters and match neither); operators are ${Object.keys(OPERATORS).join(', ')}`);
      if (f.length !== 3) throw new Refused(`filters[${i}]: a filter is [operator, dimension, [values]]`);
      return [op, dimension(f[1], `filters[${i}]`, days), f[2]];
    }) : (() => { throw new Refused('filters is a list'); })();
    const orderBy = Array.isArray(b.order_by)
      ? b.order_by.map((o, i) => {
          if (!Array.isArray(o) || o.length !== 2 || typeof o[0] !== 'string') throw new Refused(`order_by[${i}]: an entry is [name, "asc" | "desc"]`);
          return [METRICS[o[0]] ?? dimension(o[0], `order_by[${i}]`, days), o[1]];
        })
      : undefined;
    const page = (b.pagination ?? {}) as { limit?: unknown; offset?: unknown };
    const question = {
      projectId: project.id,
      from,
      to,
      metrics,
      dimensions: dims,
      filters,
      ...(orderBy ? { orderBy } : {}),
      limit: typeof page.limit === 'number' ? page.limit : 10_000,
      offset: typeof page.offset === 'number' ? page.offset : 0,
    };
    const asked = await parts.query(meta, question);
    if (!asked.ok) return { ok: false, status: statusOf(asked.error.code), error: asked.error.message };
    const a = asked.value;
    const results = a.results.map((r) => ({ metrics: r.metrics, dimensions: r.dimensions.map((v, i) => (dims[i]!.startsWith('time:') ? timeValue(dims[i]!, v) : v)) }));
    const include = (b.include ?? {}) as { total_rows?: unknown };
    return {
      ok: true,
      value: {
        results,
        meta: include.total_rows === true ? { total_rows: a.totalRows } : {},
        query: {
          site_id: b.site_id,
          metrics: metrics.map((m) => METRIC_NAMES[m]),
          date_range: [`${from}T00:00:00${offsetOf(from, project.timezone)}`, `${to}T23:59:59${offsetOf(to, project.timezone)}`],
          dimensions: b.dimensions ?? [],
          filters: b.filters ?? [],
          order_by: b.order_by ?? [],
          include: b.include ?? {},
          pagination: { limit: question.limit, offset: question.offset },
        },
      },
    };
  } catch (err) {
    if (err instanceof Refused) return { ok: false, status: 400, error: err.message };
    throw err;
  }
}

/** Our error codes as the statuses Plausible's clients read. */
function statusOf(code: string): number {
  return code === 'unauthorized' ? 401 : code === 'forbidden' ? 403 : code === 'not_found' ? 404 : code === 'rate_limited' ? 429 : code === 'unavailable' ? 503 : code === 'internal' ? 500 : 400;
}
