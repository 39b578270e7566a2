import { create } from '@bufbuild/protobuf';
import {
  CreateKeyResponseSchema,
  CreateProjectResponseSchema,
  GetMetricsResponseSchema,
  GetRealtimeResponseSchema,
  ListKeysResponseSchema,
  ListProjectsResponseSchema,
  UpdateProjectResponseSchema,
} from '../gen/analytics/v1/analytics_pb.ts';
import type {
  ApiKey,
  CreateKeyResponse,
  ListKeysResponse,
  UpdateProjectResponse,
  BreakdownEntry,
  CreateProjectResponse,
  GetMetricsResponse,
  GetRealtimeResponse,
  ListProjectsResponse,
  Project,
} from '../gen/analytics/v1/analytics_pb.ts';
import type { Breakdown, DailyFigures, MetricsResponse, RealtimeResponse } from '../core/types.ts';
import type { CreatedKey, CreatedProject, KeyView, ProjectPage, ProjectView } from '../engine/types.ts';

/**
 * Engine results → response messages, field for field with the HTTP JSON, so GetMetrics carries everything
 * GET /metrics does (tested by converting back and comparing).
 */

/** Counts are integers; a range's distinct-user estimate is rounded by the engine, and rounding again is harmless. */
function count(n: number): bigint {
  return BigInt(Math.max(0, Math.round(n)));
}

/** A breakdown object keeps insertion order (highest count first); a list keeps it on the wire, a map would not. */
function breakdown(b: Breakdown): Array<Omit<BreakdownEntry, '$typeName'>> {
  return Object.entries(b).map(([key, n]) => ({ key, count: count(n) }));
}

export function metricsMessage(m: MetricsResponse): GetMetricsResponse {
  return create(GetMetricsResponseSchema, {
    projectId: m.projectId,
    from: m.from,
    to: m.to,
    timezone: m.timezone,
    users: count(m.users),
    sessions: count(m.sessions),
    pageviews: count(m.pageviews),
    bounceRate: m.bounceRate,
    trafficSources: breakdown(m.trafficSources),
    countries: breakdown(m.countries),
    devices: breakdown(m.devices),
    pages: breakdown(m.pages),
    events: breakdown(m.events),
    bots: count(m.bots),
    recentEvents: m.recentEvents.map((r) => ({
      ts: BigInt(r.ts),
      event: r.event,
      url: r.url,
      referrer: r.referrer,
      source: r.source,
      country: r.country,
      device: r.device,
      sessionId: r.sessionId,
    })),
    daily: daily(m.daily),
    entryPages: breakdown(m.entryPages),
    browsers: breakdown(m.browsers),
    operatingSystems: breakdown(m.operatingSystems),
    utmMediums: breakdown(m.utmMediums),
    utmCampaigns: breakdown(m.utmCampaigns),
    revenue: Object.entries(m.revenue).map(([currency, r]) => ({ currency, total: r.total, purchases: count(r.purchases) })),
    props: Object.entries(m.props).map(([key, values]) => ({ key, values: breakdown(values) })),
    ...(m.compare
      ? {
          compare: {
            from: m.compare.from,
            to: m.compare.to,
            users: count(m.compare.users),
            sessions: count(m.compare.sessions),
            pageviews: count(m.compare.pageviews),
            bounceRate: m.compare.bounceRate,
            daily: daily(m.compare.daily),
          },
        }
      : {}),
  });
}

function daily(days: DailyFigures[]) {
  return days.map((d) => ({
    date: d.date,
    users: count(d.users),
    sessions: count(d.sessions),
    pageviews: count(d.pageviews),
    bounceRate: d.bounceRate,
  }));
}

export function realtimeMessage(r: RealtimeResponse): GetRealtimeResponse {
  return create(GetRealtimeResponseSchema, {
    projectId: r.projectId,
    visitors: count(r.visitors),
    pageviews: count(r.pageviews),
    perMinute: r.perMinute.map(count),
    pages: breakdown(r.pages),
    sources: breakdown(r.sources),
  });
}

function project(p: ProjectView): Omit<Project, '$typeName'> {
  return {
    id: p.id,
    name: p.name,
    allowedOrigins: [...p.allowed_origins],
    allowedReferrers: [...p.allowed_referrers],
    timezone: p.timezone,
    monthlyQuota: BigInt(p.monthly_quota),
    createdAt: p.created_at,
    trackedProps: [...p.tracked_props],
    ...(p.domain !== undefined ? { domain: p.domain } : {}),
  };
}

export function projectsMessage(page: ProjectPage): ListProjectsResponse {
  return create(ListProjectsResponseSchema, { projects: page.projects.map(project), nextCursor: page.next_cursor ?? '' });
}

export function updatedProjectMessage(u: { project: ProjectView }): UpdateProjectResponse {
  return create(UpdateProjectResponseSchema, { project: project(u.project) });
}

function apiKey(k: KeyView): Omit<ApiKey, '$typeName'> {
  return { id: k.id, type: k.type, hint: k.hint, createdAt: k.created_at, expiresAt: k.expires_at ?? '' };
}

export function keysMessage(list: { keys: KeyView[] }): ListKeysResponse {
  return create(ListKeysResponseSchema, { keys: list.keys.map(apiKey) });
}

export function createdKeyMessage(k: CreatedKey): CreateKeyResponse {
  return create(CreateKeyResponseSchema, { key: k.key, info: apiKey(k) });
}

export function createdProjectMessage(c: CreatedProject): CreateProjectResponse {
  return create(CreateProjectResponseSchema, {
    project: project(c.project),
    keys: { secret: c.keys.secret, publishable: c.keys.publishable },
  });
}
