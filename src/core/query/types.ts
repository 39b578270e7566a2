/**
 * The shapes of a question (`POST /query`, `POST /query/funnel`) once it is validated, and of its answer. Every face
 * (HTTP, gRPC, MCP, CLI) parses its wire into a Question with the one schema, and the column store answers it.
 * Semantics: CONTRACT.md "Questions: POST /query" and "Goals and funnels".
 */

export const METRICS = ['visitors', 'visits', 'pageviews', 'events', 'bounceRate', 'viewsPerVisit', 'visitDuration', 'conversionRate'] as const;
/** `revenue:<CUR>`: the sum of `value` over the selected purchases in that currency (ISO 4217, upper case). */
export type RevenueMetric = `revenue:${string}`;
export type Metric = (typeof METRICS)[number] | RevenueMetric;
export const REVENUE_METRIC = /^revenue:[A-Z]{3}$/;
export const isRevenueMetric = (m: string): m is RevenueMetric => REVENUE_METRIC.test(m);

/** Dimensions whose value belongs to the visit (taken from its first event, or its first / last page view). */
export const VISIT_DIMENSIONS = ['source', 'utmMedium', 'utmCampaign', 'country', 'device', 'browser', 'os', 'entryPage', 'exitPage'] as const;
export type VisitDimension = (typeof VISIT_DIMENSIONS)[number];

export const TIME_DIMENSIONS = ['time:hour', 'time:day', 'time:week', 'time:month'] as const;
export type TimeDimension = (typeof TIME_DIMENSIONS)[number];

/** Dimensions whose value belongs to each event. `prop:<key>` is any eventParams key. */
export const EVENT_DIMENSIONS = ['page', 'event', 'goal'] as const;
export type PropDimension = `prop:${string}`;
export type EventDimension = (typeof EVENT_DIMENSIONS)[number] | PropDimension;

export type Dimension = VisitDimension | EventDimension | TimeDimension;

export const OPERATORS = ['is', 'isNot', 'contains', 'notContains'] as const;
export type Operator = (typeof OPERATORS)[number];

/** `[operator, dimension, values]`; never a `time:*` dimension; `goal` only with `is`. */
export type Filter = [Operator, Exclude<Dimension, TimeDimension>, string[]];

export type SortDirection = 'asc' | 'desc';

/** A goal of a project: completed by an event of that name, or by a page_view whose path matches the pattern (`*` = any run). */
export interface Goal {
  id: string;
  name: string;
  event?: string;
  page?: string;
  /** ms since epoch */
  createdAt: number;
}

/** A validated `POST /query` body, with the range resolved to days in the project's timezone. */
export interface Question {
  /** first and last day, inclusive, YYYY-MM-DD in the project's timezone */
  from: string;
  to: string;
  metrics: Metric[];
  dimensions: Dimension[];
  filters: Filter[];
  /** resolved: the default order already applied when the body gave none */
  orderBy: Array<[string, SortDirection]>;
  limit: number;
  offset: number;
  /**
   * `HH:MM` in the project's timezone: the range's last day counts only its events before that time (a running
   * period compared with the same elapsed part of the previous one: today until 14:20 with yesterday until 14:20)
   */
  until?: string;
}

export interface QueryRow {
  /** the row's dimension values, in the order of `dimensions` */
  dimensions: string[];
  /** the row's metric values, in the order of `metrics` */
  metrics: number[];
}

export interface QueryAnswer {
  results: QueryRow[];
  /** the metrics of the selection with no dimension */
  totals: number[];
  /** rows before limit / offset */
  totalRows: number;
}

/** A funnel step once resolved: a goal (by name) becomes its event or page matcher; `label` is what the answer shows. */
export interface FunnelStep {
  label: string;
  event?: string;
  page?: string;
}

export interface FunnelQuestion {
  from: string;
  to: string;
  /** visit-level dimensions only */
  filters: Filter[];
  steps: FunnelStep[];
}

export interface FunnelStepAnswer {
  label: string;
  visits: number;
  visitors: number;
  conversionRate: number;
  dropoff: number;
}

/** What answers questions over a project's events: the column store (both modes put it behind this). */
export interface QueryEngine {
  query(projectId: string, timezone: string, goals: readonly Goal[], q: Question): Promise<QueryAnswer>;
  funnel(projectId: string, timezone: string, q: FunnelQuestion): Promise<FunnelStepAnswer[]>;
}
