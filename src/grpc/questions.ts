import { create } from '@bufbuild/protobuf';
import {
  CreateGoalResponseSchema,
  GoalSchema,
  ListGoalsResponseSchema,
  QueryFunnelResponseSchema,
  QueryResponseSchema,
  type CreateGoalRequest,
  type CreateGoalResponse,
  type Goal,
  type ListGoalsResponse,
  type QueryFilter,
  type QueryFunnelRequest,
  type QueryFunnelResponse,
  type QueryRequest,
  type QueryResponse,
} from '../gen/analytics/v1/analytics_pb.ts';
import type { FunnelResponse, GoalView, QueryResponse as QueryAnswer } from '../engine/types.ts';

/**
 * Query, QueryFunnel and the goal calls: each request message becomes the JSON body HTTP takes (a field only when
 * the message sets it), so the one schema in src/core/query judges it; each answer is the HTTP JSON, field for field.
 */

type Plain = Record<string, unknown>;

function range(req: { projectId?: string | undefined; date?: string | undefined; from?: string | undefined; to?: string | undefined }): Plain {
  const body: Plain = {};
  if (req.projectId !== undefined) body.projectId = req.projectId;
  if (req.date !== undefined) body.date = req.date;
  if (req.from !== undefined) body.from = req.from;
  if (req.to !== undefined) body.to = req.to;
  return body;
}

const filter = (f: QueryFilter): unknown[] => [f.operator, f.dimension, f.values];

export function queryBody(req: QueryRequest): Plain {
  const body = range(req);
  body.metrics = req.metrics;
  if (req.dimensions.length > 0) body.dimensions = req.dimensions;
  if (req.filters.length > 0) body.filters = req.filters.map(filter);
  if (req.orderBy.length > 0) body.orderBy = req.orderBy.map((o) => [o.name, o.direction]);
  if (req.limit !== undefined) body.limit = req.limit;
  if (req.offset !== undefined) body.offset = req.offset;
  return body;
}

export function funnelBody(req: QueryFunnelRequest): Plain {
  const body = range(req);
  if (req.filters.length > 0) body.filters = req.filters.map(filter);
  // A step that sets nothing becomes null, which the schema refuses naming the step.
  body.steps = req.steps.map((s) => {
    switch (s.step.case) {
      case 'goal':
        return s.step.value;
      case 'event':
        return { event: s.step.value };
      case 'page':
        return { page: s.step.value };
      default:
        return null;
    }
  });
  return body;
}

export function goalBody(req: CreateGoalRequest): Plain {
  const body: Plain = { name: req.name };
  if (req.match.case === 'event') body.event = req.match.value;
  else if (req.match.case === 'page') body.page = req.match.value;
  return body;
}

export function queryMessage(a: QueryAnswer): QueryResponse {
  return create(QueryResponseSchema, {
    projectId: a.projectId,
    from: a.from,
    to: a.to,
    timezone: a.timezone,
    metrics: a.metrics,
    dimensions: a.dimensions,
    results: a.results.map((r) => ({ dimensions: r.dimensions, metrics: r.metrics })),
    totals: a.totals,
    totalRows: BigInt(a.totalRows),
  });
}

export function funnelMessage(a: FunnelResponse): QueryFunnelResponse {
  return create(QueryFunnelResponseSchema, {
    projectId: a.projectId,
    from: a.from,
    to: a.to,
    timezone: a.timezone,
    steps: a.steps.map((s) => ({ label: s.label, visits: BigInt(s.visits), visitors: BigInt(s.visitors), conversionRate: s.conversionRate, dropoff: BigInt(s.dropoff) })),
  });
}

function goalMessage(g: GoalView): Goal {
  return create(GoalSchema, {
    id: g.id,
    name: g.name,
    match: g.event !== undefined ? { case: 'event', value: g.event } : { case: 'page', value: g.page ?? '' },
    createdAt: g.created_at,
  });
}

export const goalsMessage = (v: { goals: GoalView[] }): ListGoalsResponse => create(ListGoalsResponseSchema, { goals: v.goals.map(goalMessage) });
export const createdGoalMessage = (v: { goal: GoalView }): CreateGoalResponse => create(CreateGoalResponseSchema, { goal: goalMessage(v.goal) });
