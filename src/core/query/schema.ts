import { z } from 'zod';
import { MAX_EVENT_NAME, MAX_HOUR_DAYS, MAX_PARAM_KEY, MAX_PROJECT_ID, MAX_QUESTION_DAYS, MAX_URL } from '../limits.ts';
import { daysBetween } from '../dates.ts';
import { resolveRange, type RangeQuery } from '../metrics.ts';
import {
  EVENT_DIMENSIONS,
  isRevenueMetric,
  METRICS,
  OPERATORS,
  TIME_DIMENSIONS,
  VISIT_DIMENSIONS,
  type Dimension,
  type Filter,
  type FunnelQuestion,
  type FunnelStep,
  type Goal,
  type Metric,
  type Question,
  type SortDirection,
} from './types.ts';

/**
 * The one parser of a question's wire (CONTRACT.md "Questions: POST /query", "Goals and funnels"): every face (HTTP,
 * gRPC, MCP, CLI) turns its input into the JSON body HTTP takes and parses it here, so a rule holds the same on each.
 * Pure: the range is resolved against a `today` the caller supplies in the project's timezone. Any unknown field or
 * name is refused with a message that names it.
 */

/** CONTRACT: a question's body is small; 64 KiB holds 20 filters of 100 long values with room to spare. */
export const MAX_QUERY_BODY_BYTES = 64 * 1024;
/** CONTRACT: metrics per question. */
export const MAX_QUERY_METRICS = 10;
/** CONTRACT: dimensions per question (rows grow as their product). */
export const MAX_QUERY_DIMENSIONS = 3;
/** CONTRACT: filters per question. */
export const MAX_QUERY_FILTERS = 20;
/** CONTRACT: values of one filter. */
export const MAX_FILTER_VALUES = 100;
/** CONTRACT: one filter value (a URL path is at most 2,048 characters). */
export const MAX_FILTER_VALUE = MAX_URL;
/** CONTRACT: rows of one page of an answer. */
export const MAX_QUERY_LIMIT = 10_000;
/** CONTRACT: rows of a page when the body names no limit. */
export const DEFAULT_QUERY_LIMIT = 100;
/** CONTRACT: steps of a funnel (fewer is no funnel; more is unreadable). */
export const MIN_FUNNEL_STEPS = 2;
export const MAX_FUNNEL_STEPS = 8;
/** CONTRACT: goal name length. */
export const MAX_GOAL_NAME = 64;
/** CONTRACT: goals per project (each is matched against every event a question reads). */
export const MAX_GOALS = 100;
/** CONTRACT: a page pattern is a path, so the URL bound applies. */
export const MAX_PAGE_PATTERN = MAX_URL;
/** An offset past this is no longer an exact integer in JSON. */
const MAX_OFFSET = Number.MAX_SAFE_INTEGER;

const PROP_PREFIX = 'prop:';
const list = (names: readonly string[]) => names.join(', ');
const NON_TIME_DIMENSIONS = [...VISIT_DIMENSIONS, ...EVENT_DIMENSIONS] as const;
const ALL_DIMENSIONS: readonly string[] = [...NON_TIME_DIMENSIONS, ...TIME_DIMENSIONS];

export function isTimeDimension(d: string): d is (typeof TIME_DIMENSIONS)[number] {
  return (TIME_DIMENSIONS as readonly string[]).includes(d);
}

export function isVisitDimension(d: string): boolean {
  return (VISIT_DIMENSIONS as readonly string[]).includes(d);
}

/** `prop:<key>` with a key of 1–40 characters (the eventParams key bound). */
function isPropDimension(d: string): boolean {
  return d.startsWith(PROP_PREFIX) && d.length > PROP_PREFIX.length && d.length - PROP_PREFIX.length <= MAX_PARAM_KEY;
}

export function isDimension(d: string): d is Dimension {
  return ALL_DIMENSIONS.includes(d) || isPropDimension(d);
}

function dimensionProblem(d: unknown, allowTime: boolean): string {
  if (typeof d !== 'string') return 'a dimension is a string';
  if (d.startsWith(PROP_PREFIX)) return `dimension "${d}": the key after prop: has 1 to ${MAX_PARAM_KEY} characters`;
  if (!allowTime && isTimeDimension(d)) return `"${d}" cannot be filtered: choose the range with date/from/to`;
  return `unknown dimension "${d}"; dimensions are ${list(allowTime ? ALL_DIMENSIONS : NON_TIME_DIMENSIONS)} and prop:<key>`;
}

const MetricName = z
  .string()
  .refine((m) => (METRICS as readonly string[]).includes(m) || isRevenueMetric(m), {
    error: (iss) => `unknown metric ${JSON.stringify(iss.input)}; metrics are ${list(METRICS)} and revenue:<CUR> (a currency code in upper case, e.g. revenue:EUR)`,
  })
  .meta({ description: `one of ${list(METRICS)}, or revenue:<CUR> (the sum of purchase values in that currency, e.g. revenue:EUR)`, examples: [...METRICS, 'revenue:EUR'] });

const DimensionName = z
  .string()
  .refine(isDimension, { error: (iss) => dimensionProblem(iss.input, true) })
  .meta({ description: `one of ${list(ALL_DIMENSIONS)}, or prop:<eventParams key>` });

const FilterDimension = z
  .string()
  .refine((d) => isDimension(d) && !isTimeDimension(d), { error: (iss) => dimensionProblem(iss.input, false) })
  .meta({ description: `one of ${list(NON_TIME_DIMENSIONS)}, or prop:<eventParams key>` });

const Operator = z.string().refine((o) => (OPERATORS as readonly string[]).includes(o), {
  error: (iss) => `unknown operator ${JSON.stringify(iss.input)}; operators are ${list(OPERATORS)}`,
}).meta({ description: `one of ${list(OPERATORS)}`, enum: [...OPERATORS] });

const FilterValues = z
  .array(z.string().max(MAX_FILTER_VALUE, `a filter value has at most ${MAX_FILTER_VALUE} characters`))
  .min(1, 'a filter needs 1 to 100 values')
  .max(MAX_FILTER_VALUES, `a filter takes at most ${MAX_FILTER_VALUES} values`);

const FilterSchema = z
  .tuple([Operator, FilterDimension, FilterValues], { error: 'a filter is [operator, dimension, [value, ...]]' })
  .meta({ description: 'all filters must hold; `goal` takes `is` only', example: ['is', 'country', ['DE', 'AT']] });

const Filters = z.array(FilterSchema).max(MAX_QUERY_FILTERS, `at most ${MAX_QUERY_FILTERS} filters`);

const RangeFields = {
  projectId: z.string().min(1).max(MAX_PROJECT_ID).optional().meta({ description: 'required for admin keys; else the key\'s project' }),
  date: z.string().optional().meta({ description: 'one day, YYYY-MM-DD, in the project\'s timezone' }),
  from: z.string().optional().meta({ description: 'first day of an inclusive range (≤ 3,653 days: ten years), YYYY-MM-DD' }),
  to: z.string().optional().meta({ description: 'last day of the range (defaults to today); needs `from`' }),
};

const OrderEntry = z
  .tuple([z.string(), z.enum(['asc', 'desc'], { error: (iss) => `a direction is "asc" or "desc", not ${JSON.stringify(iss.input)}` })], {
    error: 'an orderBy entry is [name, "asc" | "desc"]',
  });

/** The body of `POST /query` (its JSON Schema is what MCP and OpenAPI show). */
export const QueryBodySchema = z
  .strictObject({
    ...RangeFields,
    metrics: z.array(MetricName).min(1, 'name 1 to 10 metrics').max(MAX_QUERY_METRICS, `at most ${MAX_QUERY_METRICS} metrics`),
    until: z
      .string()
      .regex(/^([01]\d|2[0-3]):[0-5]\d$/, 'until is a time of day HH:MM (00:00 to 23:59)')
      .optional()
      .meta({ description: 'HH:MM in the project\'s timezone: the last day of the range counts only its events before then (the same elapsed part of a running period)' }),
    dimensions: z.array(DimensionName).max(MAX_QUERY_DIMENSIONS, `at most ${MAX_QUERY_DIMENSIONS} dimensions`).optional(),
    filters: Filters.optional(),
    orderBy: z.array(OrderEntry).optional().meta({ description: 'default: a time dimension ascending; else the first metric descending, then the dimensions ascending' }),
    limit: z.number().int().min(1).max(MAX_QUERY_LIMIT).optional().meta({ description: `rows per page, 1 to ${MAX_QUERY_LIMIT} (default ${DEFAULT_QUERY_LIMIT})` }),
    offset: z.number().int().min(0).max(MAX_OFFSET).optional().meta({ description: 'rows to skip (default 0)' }),
  })
  .superRefine((b, ctx) => {
    const issue = (path: PropertyKey[], message: string) => ctx.addIssue({ code: 'custom', path, message });
    const metricsSeen = new Set<string>();
    b.metrics.forEach((m, i) => {
      if (metricsSeen.has(m)) issue(['metrics', i], `metric "${m}" is named twice`);
      metricsSeen.add(m);
    });
    const dims = b.dimensions ?? [];
    const dimsSeen = new Set<string>();
    dims.forEach((d, i) => {
      if (dimsSeen.has(d)) issue(['dimensions', i], `dimension "${d}" is named twice`);
      dimsSeen.add(d);
    });
    const times = dims.filter(isTimeDimension);
    if (times.length > 1) issue(['dimensions'], `at most one time dimension (got ${times.join(', ')})`);
    const filters = b.filters ?? [];
    filters.forEach(([op, dim], i) => {
      if (dim === 'goal' && op !== 'is') issue(['filters', i, 0], `the goal filter takes "is" only (got "${op}")`);
    });
    const hasGoal = dims.includes('goal') || filters.some(([, dim]) => dim === 'goal');
    if (metricsSeen.has('conversionRate') && !hasGoal) {
      issue(['metrics', b.metrics.indexOf('conversionRate')], 'conversionRate needs a goal dimension or a goal filter');
    }
    const orderSeen = new Set<string>();
    (b.orderBy ?? []).forEach(([name], i) => {
      if (!metricsSeen.has(name) && !dimsSeen.has(name)) {
        issue(['orderBy', i, 0], `orderBy names "${name}", which is not one of the query's metrics or dimensions`);
      } else if (orderSeen.has(name)) issue(['orderBy', i, 0], `orderBy names "${name}" twice`);
      orderSeen.add(name);
    });
  })
  .meta({
    description: 'A question over the project\'s events: metrics by up to three dimensions, with filters, over a range of days',
    example: { from: '2026-11-01', to: '2026-11-30', metrics: ['visitors', 'bounceRate'], dimensions: ['page'], filters: [['is', 'country', ['DE']]] },
  });

const GoalName = z.string().min(1, 'a goal name has 1 to 64 characters').max(MAX_GOAL_NAME, `a goal name has at most ${MAX_GOAL_NAME} characters`);
const EventName = z
  .string()
  .min(1, 'an event name has 1 to 64 characters')
  .max(MAX_EVENT_NAME, `an event name has at most ${MAX_EVENT_NAME} characters`)
  .regex(/^[^\u0000-\u001f\u007f]*$/, 'an event name has no control characters');
const PagePattern = z
  .string()
  .max(MAX_PAGE_PATTERN, `a page pattern has at most ${MAX_PAGE_PATTERN} characters`)
  .refine((p) => p.startsWith('/'), 'a page pattern is a path starting with "/" (`*` matches any run of characters)');

const FunnelStepSchema = z.union(
  [
    GoalName.meta({ description: 'the name of one of the project\'s goals' }),
    z.strictObject({ event: EventName }),
    z.strictObject({ page: PagePattern }),
  ],
  { error: 'a step is a goal\'s name, {"event": name} or {"page": "/pattern"}' },
);

/** The body of `POST /query/funnel`. */
export const FunnelBodySchema = z
  .strictObject({
    ...RangeFields,
    filters: Filters.optional().meta({ description: 'visit-level dimensions only' }),
    steps: z
      .array(FunnelStepSchema)
      .min(MIN_FUNNEL_STEPS, `a funnel has ${MIN_FUNNEL_STEPS} to ${MAX_FUNNEL_STEPS} steps`)
      .max(MAX_FUNNEL_STEPS, `a funnel has ${MIN_FUNNEL_STEPS} to ${MAX_FUNNEL_STEPS} steps`),
  })
  .superRefine((b, ctx) => {
    (b.filters ?? []).forEach(([, dim], i) => {
      if (!isVisitDimension(dim)) {
        ctx.addIssue({ code: 'custom', path: ['filters', i, 1], message: `a funnel filters visits: "${dim}" is not a visit-level dimension (${list(VISIT_DIMENSIONS)})` });
      }
    });
  })
  .meta({
    description: 'Visits that go through 2 to 8 steps in order',
    example: { from: '2026-11-01', to: '2026-11-30', steps: [{ page: '/pricing' }, 'Signed up'] },
  });

/** The body of `POST /projects/{id}/goals`. */
export const GoalBodySchema = z
  .union([z.strictObject({ name: GoalName, event: EventName }), z.strictObject({ name: GoalName, page: PagePattern })], {
    error: 'a goal is {"name", "event"} or {"name", "page"}: exactly one of event or page',
  })
  .meta({ example: { name: 'Signed up', event: 'signup' } });

export type QueryBody = z.infer<typeof QueryBodySchema>;
export type FunnelBody = z.infer<typeof FunnelBodySchema>;

export interface Problem {
  path: string;
  message: string;
}

export type Parsed<T> = { ok: true; value: T } | { ok: false; message: string; details: Problem[] };

/** A zod failure as the contract's 400: a message naming every problem, one detail per problem. */
function problems(error: z.ZodError): { ok: false; message: string; details: Problem[] } {
  const details: Problem[] = [];
  for (const i of error.issues) {
    const at = pathText(i.path);
    if (i.code === 'unrecognized_keys') {
      for (const k of i.keys) details.push({ path: pathText([...i.path, k]), message: `unknown field "${k}"` });
    } else {
      details.push({ path: at, message: i.message });
    }
  }
  const message = details.map((d) => (d.path ? `${d.path}: ${d.message}` : d.message)).join('; ');
  return { ok: false, message, details };
}

function pathText(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out === '' ? String(p) : `.${String(p)}`;
  return out;
}

/** A parsed `/query` body: what the engine still resolves (the project, so its timezone, today and goals). */
export interface QueryInput {
  projectId: string | undefined;
  range: RangeQuery;
  question: Omit<Question, 'from' | 'to'>;
}

function rangeOf(b: { date?: string | undefined; from?: string | undefined; to?: string | undefined }): RangeQuery {
  return { date: b.date, from: b.from, to: b.to };
}

/** The default order: a time dimension ascending; else the first metric descending, then the dimension values ascending. */
export function defaultOrder(metrics: readonly Metric[], dimensions: readonly Dimension[]): Array<[string, SortDirection]> {
  const time = dimensions.find(isTimeDimension);
  const rest = dimensions.filter((d) => d !== time).map((d): [string, SortDirection] => [d, 'asc']);
  if (time) return [[time, 'asc'], [metrics[0]!, 'desc'], ...rest];
  return [[metrics[0]!, 'desc'], ...rest];
}

export function parseQueryBody(body: unknown): Parsed<QueryInput> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return { ok: false, message: 'the body is a JSON object: {"metrics": [...], ...}', details: [{ path: '', message: 'not an object' }] };
  }
  const parsed = QueryBodySchema.safeParse(body);
  if (!parsed.success) return problems(parsed.error);
  const b = parsed.data;
  const metrics = b.metrics as Metric[];
  const dimensions = (b.dimensions ?? []) as Dimension[];
  return {
    ok: true,
    value: {
      projectId: b.projectId,
      range: rangeOf(b),
      question: {
        metrics,
        dimensions,
        filters: (b.filters ?? []) as Filter[],
        orderBy: b.orderBy && b.orderBy.length > 0 ? (b.orderBy as Array<[string, SortDirection]>) : defaultOrder(metrics, dimensions),
        limit: b.limit ?? DEFAULT_QUERY_LIMIT,
        offset: b.offset ?? 0,
        ...(b.until !== undefined ? { until: b.until } : {}),
      },
    },
  };
}

/** A step as the body gave it: a goal's name still to look up, or an event / page matcher. */
export type StepInput = { goal: string } | { event: string } | { page: string };

export interface FunnelInput {
  projectId: string | undefined;
  range: RangeQuery;
  filters: Filter[];
  steps: StepInput[];
}

export function parseFunnelBody(body: unknown): Parsed<FunnelInput> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return { ok: false, message: 'the body is a JSON object: {"steps": [...], ...}', details: [{ path: '', message: 'not an object' }] };
  }
  const parsed = FunnelBodySchema.safeParse(body);
  if (!parsed.success) return problems(parsed.error);
  const b = parsed.data;
  const steps = b.steps.map((s): StepInput => (typeof s === 'string' ? { goal: s } : s));
  return { ok: true, value: { projectId: b.projectId, range: rangeOf(b), filters: (b.filters ?? []) as Filter[], steps } };
}

export type GoalInput = { name: string; event: string } | { name: string; page: string };

export function parseGoalBody(body: unknown): Parsed<GoalInput> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return { ok: false, message: 'the body is a JSON object: {"name", "event"} or {"name", "page"}', details: [{ path: '', message: 'not an object' }] };
  }
  const b = body as Record<string, unknown>;
  // Name the precise problem rather than the union's summary where it is plain which shape was meant.
  if ('event' in b && 'page' in b) return { ok: false, message: 'a goal has exactly one of event or page, not both', details: [{ path: 'page', message: 'not with event' }] };
  if (!('event' in b) && !('page' in b)) return { ok: false, message: 'a goal needs one of event (an event name) or page (a path pattern)', details: [{ path: 'event', message: 'required' }] };
  const schema = 'event' in b ? z.strictObject({ name: GoalName, event: EventName }) : z.strictObject({ name: GoalName, page: PagePattern });
  const parsed = schema.safeParse(body);
  if (!parsed.success) return problems(parsed.error);
  return { ok: true, value: parsed.data as GoalInput };
}

/**
 * The range resolved against today in the project's timezone (the rules of GET /metrics); a goal filter's value that
 * is no goal of the project is refused, naming it (as a funnel step is), not answered with zeros.
 */
export function resolveQuestion(input: QueryInput, today: string, goals: readonly Goal[]): Parsed<Question> {
  const range = resolveRange(input.range, today, MAX_QUESTION_DAYS);
  if (!range.ok) return { ok: false, message: range.message, details: [{ path: '', message: range.message }] };
  if (input.question.dimensions.includes('time:hour') && daysBetween(range.from, range.to) > MAX_HOUR_DAYS) {
    const message = `time:hour covers at most ${MAX_HOUR_DAYS} days (this range has ${daysBetween(range.from, range.to)}): ask time:day, time:week or time:month`;
    return { ok: false, message, details: [{ path: 'dimensions', message }] };
  }
  for (const [i, [, dim, values]] of input.question.filters.entries()) {
    if (dim !== 'goal') continue;
    const unknown = values.find((v) => !goals.some((g) => g.name === v));
    if (unknown === undefined) continue;
    const message = `filters[${i}]: no goal named "${unknown}" in this project (GET /projects/{id}/goals lists them)`;
    return { ok: false, message, details: [{ path: `filters[${i}][2]`, message: `no goal named "${unknown}"` }] };
  }
  return { ok: true, value: { from: range.from, to: range.to, ...input.question } };
}

/** Funnel steps resolved against the project's goals; a name that is no goal is refused, naming it. */
export function resolveFunnel(input: FunnelInput, today: string, goals: readonly Goal[]): Parsed<FunnelQuestion> {
  const range = resolveRange(input.range, today, MAX_QUESTION_DAYS);
  if (!range.ok) return { ok: false, message: range.message, details: [{ path: '', message: range.message }] };
  const steps: FunnelStep[] = [];
  for (const [i, s] of input.steps.entries()) {
    if ('goal' in s) {
      const goal = goals.find((g) => g.name === s.goal);
      if (!goal) {
        const message = `steps[${i}]: no goal named "${s.goal}" in this project (a step is a goal's name, {"event": name} or {"page": "/pattern"})`;
        return { ok: false, message, details: [{ path: `steps[${i}]`, message: `no goal named "${s.goal}"` }] };
      }
      steps.push(goal.event !== undefined ? { label: goal.name, event: goal.event } : { label: goal.name, page: goal.page! });
    } else if ('event' in s) steps.push({ label: `event:${s.event}`, event: s.event });
    else steps.push({ label: `page:${s.page}`, page: s.page });
  }
  return { ok: true, value: { from: range.from, to: range.to, filters: input.filters, steps } };
}
