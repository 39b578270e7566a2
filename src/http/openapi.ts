// long because the OpenAPI document is one literal object: every route with its request and answers, side by side as the reader checks them.
import { z } from 'zod';
import { EventSchema } from '../core/event-schema.ts';
import { MAX_BATCH_EVENTS } from '../core/limits.ts';
import { FunnelBodySchema, GoalBodySchema, MAX_QUERY_BODY_BYTES, QueryBodySchema } from '../core/query/schema.ts';
import { CreateKeySchema, CreateProjectSchema, UpdateKeySchema, UpdateProjectSchema } from '../engine/project-input.ts';
import { QUERY_SCHEMAS } from '../engine/request-params.ts';
import * as R from './response-schemas.ts';

/**
 * GET /openapi.json: an OpenAPI 3.1 document of every HTTP endpoint, generated from the zod schemas the service
 * validates requests with (and the response schemas beside them), so it cannot drift from the code.
 */

type Json = Record<string, unknown>;

const ref = (id: string): Json => ({ $ref: `#/components/schemas/${id}` });
const json = (schema: Json, description: string): Json => ({ description, content: { 'application/json': { schema } } });

const COMPONENTS: Record<string, z.ZodType> = {
  Error: R.ErrorBody,
  IngestAck: R.IngestAck,
  HistoryAck: R.HistoryAck,
  Metrics: R.MetricsBody,
  Realtime: R.RealtimeBody,
  Project: R.Project,
  ProjectPage: R.ProjectPage,
  CreatedProject: R.CreatedProject,
  ProjectOnly: R.ProjectOnly,
  Ok: R.Ok,
  Key: R.Key,
  KeyList: R.KeyList,
  CreatedKey: R.CreatedKey,
  Health: R.Health,
  Event: EventSchema,
  CreateProject: CreateProjectSchema,
  UpdateProject: UpdateProjectSchema,
  CreateKey: CreateKeySchema,
  UpdateKey: UpdateKeySchema,
  Query: QueryBodySchema,
  QueryAnswer: R.QueryAnswer,
  Funnel: FunnelBodySchema,
  FunnelAnswer: R.FunnelAnswer,
  CreateGoal: GoalBodySchema,
  Goal: R.GoalItem,
  GoalList: R.GoalList,
  CreatedGoal: R.CreatedGoal,
};

/** What each error status means on this API; an operation lists the ones it can answer. */
const ERRORS: Record<number, string> = {
  400: 'invalid_json, invalid_event or invalid_request (an unknown query parameter is named in the message)',
  401: 'unauthorized: no key, a malformed Authorization header, or an unknown, revoked or expired key',
  403: 'forbidden: the key may not do this (its type, its project, the Origin or Referer)',
  404: 'not_found',
  409: 'conflict: the project would lose its last secret key, already has a goal of that name, or names a domain another project has',
  413: `payload_too_large: a body over 1 MiB (${MAX_QUERY_BODY_BYTES / 1024} KiB for /query) or a batch over 500 events`,
  415: 'unsupported_media_type: a body that is not application/json or text/plain, or an encoding other than gzip',
  429: 'rate_limited or quota_exceeded; Retry-After says when to try again',
  500: 'internal',
  503: 'unavailable: storage cannot be written, the service is shutting down, or questions are not answered in this mode',
};

function errors(...statuses: number[]): Json {
  const out: Json = {};
  for (const s of [...statuses, 500, 503]) out[String(s)] = json(ref('Error'), ERRORS[s]!);
  return out;
}

/** Query parameters from a strict zod object schema (one per endpoint). */
function queryParameters(schema: z.ZodObject): Json[] {
  const objectSchema = z.toJSONSchema(schema, { target: 'draft-2020-12', io: 'input', unrepresentable: 'any' }) as Json;
  const props = (objectSchema.properties ?? {}) as Record<string, Json>;
  const required = new Set((objectSchema.required ?? []) as string[]);
  return Object.entries(props).map(([name, s]) => {
    const { description, ...rest } = s;
    return { name, in: 'query', required: required.has(name), ...(description ? { description } : {}), schema: rest };
  });
}

const pathParam = (name: string, description: string): Json => ({ name, in: 'path', required: true, description, schema: { type: 'string' } });
const projectId = pathParam('id', 'the project id');
const keyId = pathParam('keyId', 'the key id from GET /projects/{id}/keys');
const goalId = pathParam('goalId', 'the goal id from GET /projects/{id}/goals');
const body = (id: string, example?: unknown): Json => ({
  required: true,
  content: { 'application/json': { schema: ref(id), ...(example !== undefined ? { example } : {}) } },
});

let cached: Json | undefined;

export function openApiDocument(version: string): Json {
  if (cached) return cached;
  const registry = z.registry<{ id: string }>();
  for (const [id, schema] of Object.entries(COMPONENTS)) registry.add(schema, { id });
  const converted = z.toJSONSchema(registry, {
    target: 'draft-2020-12',
    io: 'input',
    unrepresentable: 'any',
    uri: (id) => `#/components/schemas/${id}`,
  }) as { schemas: Record<string, Json> };
  const schemas: Record<string, Json> = {};
  for (const [id, s] of Object.entries(converted.schemas)) {
    const { $schema: _s, $id: _i, ...rest } = s;
    schemas[id] = rest;
  }
  const batch: Json = {
    oneOf: [
      ref('Event'),
      { type: 'array', items: ref('Event'), minItems: 1, maxItems: MAX_BATCH_EVENTS },
      { type: 'object', properties: { events: { type: 'array', items: ref('Event'), minItems: 1, maxItems: MAX_BATCH_EVENTS } }, required: ['events'] },
    ],
  };
  const secured = [{ bearer: [] }];
  cached = {
    openapi: '3.1.0',
    info: {
      title: 'Privacy-first web analytics',
      version,
      description:
        'Cookie-free event ingestion and daily aggregates. Every error body is {"ok": false, "error": {"code", "message", "details"?}}. ' +
        'Authenticated responses carry RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset. Any query parameter an endpoint does not list is 400 invalid_request.',
    },
    servers: [{ url: '/' }],
    components: {
      securitySchemes: {
        bearer: {
          type: 'http',
          scheme: 'bearer',
          description: 'Authorization: Bearer <key>. ak_ admin, sk_ project secret, pk_ publishable (ingest only), rk_ read-only (metrics only).',
        },
      },
      schemas,
    },
    paths: {
      '/analytics': {
        post: {
          operationId: 'ingest',
          summary: 'Ingest one event, an array of events, or {"events": [...]}; atomic; answered once committed',
          security: secured,
          requestBody: {
            required: true,
            content: {
              'application/json': { schema: batch, example: { event: 'page_view', url: 'https://shop.example/pricing', referrer: 'https://www.google.com/' } },
              'text/plain': { schema: batch },
            },
          },
          responses: { '200': json(ref('IngestAck'), 'stored (or acknowledged again as a repeat)'), ...errors(400, 401, 403, 413, 415, 429) },
        },
      },
      '/api/event': {
        post: {
          operationId: 'plausibleEvent',
          summary: "Plausible's Events API: one event for the project whose domain the body names, with no key (Plausible's script and integrations send here by changing the host)",
          requestBody: {
            required: true,
            content: {
              'application/json': { schema: { type: 'object', additionalProperties: true }, example: { name: 'pageview', url: 'https://shop.example/pricing', domain: 'shop.example', referrer: 'https://www.google.com/' } },
              'text/plain': { schema: { type: 'string' } },
            },
          },
          responses: {
            '202': { description: 'taken, or dropped (an unknown domain, or refused by the site\'s rules) with the header x-plausible-dropped: 1; no body' },
            ...errors(400, 413, 415),
          },
        },
      },
      '/api/v2/query': {
        post: {
          operationId: 'plausibleQuery',
          summary: "Plausible's Stats API v2 over POST /query: site_id (a project's domain), metrics, date_range, dimensions, filters, order_by, include.total_rows, pagination; errors as { error }",
          security: secured,
          requestBody: {
            required: true,
            content: { 'application/json': { schema: { type: 'object', additionalProperties: true }, example: { site_id: 'shop.example', metrics: ['visitors', 'pageviews'], date_range: '7d', dimensions: ['visit:source'] } } },
          },
          responses: {
            '200': { description: "Plausible's answer: { results: [{ metrics, dimensions }], meta, query }", content: { 'application/json': { schema: { type: 'object', additionalProperties: true } } } },
            ...Object.fromEntries(
              ([
                ['400', 'what it cannot answer, named'],
                ['401', 'no key, or an unknown one'],
                ['403', 'a key of another site, or a pk_ key'],
                ['404', 'no project names that domain'],
                ['413', 'a body over 64 KiB'],
                ['415', 'not JSON'],
                ['429', 'rate limited'],
                ['503', 'questions cannot be answered right now'],
              ] as const).map(([status, d]) => [status, { description: `${d}: { error } as Plausible answers`, content: { 'application/json': { schema: { type: 'object', required: ['error'], properties: { error: { type: 'string' } } } } } }]),
            ),
          },
        },
      },
      '/metrics': {
        get: {
          operationId: 'getMetrics',
          summary: 'Aggregates of a day or an inclusive range (≤ 366 days) with a per-day series',
          security: secured,
          parameters: queryParameters(QUERY_SCHEMAS['/metrics'].GET),
          responses: { '200': json(ref('Metrics'), 'the figures'), ...errors(400, 401, 403, 404, 429) },
        },
      },
      '/metrics/realtime': {
        get: {
          operationId: 'getRealtime',
          summary: 'The last 30 minutes by receive time: visitors (5 minutes), page views per minute, top pages and sources',
          security: secured,
          parameters: queryParameters(QUERY_SCHEMAS['/metrics/realtime'].GET),
          responses: { '200': json(ref('Realtime'), 'the figures'), ...errors(400, 401, 403, 404, 429) },
        },
      },
      '/projects': {
        get: {
          operationId: 'listProjects',
          summary: 'Projects the key may see (admin: all; sk_: its own), in creation order, one page',
          security: secured,
          parameters: queryParameters(QUERY_SCHEMAS['/projects'].GET),
          responses: { '200': json(ref('ProjectPage'), 'a page of projects'), ...errors(400, 401, 403, 429) },
        },
        post: {
          operationId: 'createProject',
          summary: 'Create a project; its keys are shown only in this answer',
          security: secured,
          requestBody: body('CreateProject', { name: 'Shop', allowed_origins: ['https://shop.example'], allowed_referrers: [], timezone: 'Europe/Berlin' }),
          responses: { '200': json(ref('CreatedProject'), 'the project and its keys'), ...errors(400, 401, 403, 409, 413, 415, 429) },
        },
      },
      '/projects/{id}': {
        parameters: [projectId],
        patch: {
          operationId: 'updateProject',
          summary: 'Change any of name, allowed_origins, allowed_referrers, monthly_quota, rate_limit, tracked_props (not timezone)',
          security: secured,
          requestBody: body('UpdateProject', { allowed_origins: ['https://new.example'] }),
          responses: { '200': json(ref('ProjectOnly'), 'the changed project'), ...errors(400, 401, 403, 404, 409, 413, 415, 429) },
        },
        delete: {
          operationId: 'deleteProject',
          summary: 'Delete a project: its keys answer 401 at once; its events are erased from the log and every file',
          security: secured,
          responses: { '200': json(ref('Ok'), 'deleted and erased'), ...errors(400, 401, 403, 404, 429) },
        },
      },
      '/projects/{id}/keys': {
        parameters: [projectId],
        get: {
          operationId: 'listKeys',
          summary: "A project's keys, never the keys themselves",
          security: secured,
          responses: { '200': json(ref('KeyList'), 'the keys'), ...errors(400, 401, 403, 404, 429) },
        },
        post: {
          operationId: 'createKey',
          summary: 'Create a secret, publishable or read key, optionally expiring',
          security: secured,
          requestBody: body('CreateKey', { type: 'read', expires_at: '2027-01-01T00:00:00Z' }),
          responses: { '200': json(ref('CreatedKey'), 'the key, shown only here'), ...errors(400, 401, 403, 404, 413, 415, 429) },
        },
      },
      '/projects/{id}/keys/{keyId}': {
        parameters: [projectId, keyId],
        patch: {
          operationId: 'updateKey',
          summary: 'Set when a key expires (key rotation with an overlap)',
          security: secured,
          requestBody: body('UpdateKey', { expires_at: '2027-01-01T00:00:00Z' }),
          responses: { '200': json(ref('Key'), 'the key'), ...errors(400, 401, 403, 404, 409, 413, 415, 429) },
        },
        delete: {
          operationId: 'revokeKey',
          summary: 'Revoke a key: it answers 401 at once and after a restart',
          security: secured,
          responses: { '200': json(ref('Ok'), 'revoked'), ...errors(400, 401, 403, 404, 409, 429) },
        },
      },
      '/projects/{id}/history': {
        parameters: [projectId],
        post: {
          operationId: 'importHistory',
          summary:
            'Events of any day since 2000-01-01 (the body of POST /analytics; `timestamp` required; source, browser, os as export wrote them): ' +
            'each counted in its own day, once per eventId for good, not against the monthly allowance, never in realtime',
          security: secured,
          requestBody: {
            required: true,
            content: { 'application/json': { schema: batch, example: [{ event: 'page_view', url: 'https://shop.example/', timestamp: '2019-05-01T10:00:00Z', eventId: 'e1' }] } },
          },
          responses: { '200': json(ref('HistoryAck'), 'stored, and repeats of eventIds seen before'), ...errors(400, 401, 403, 404, 413, 415, 429) },
        },
      },
      '/projects/{id}/export': {
        parameters: [projectId],
        get: {
          operationId: 'exportEvents',
          summary: "The project's stored events of the days (at most ten years), in time order, one JSON event a line: what POST /projects/{id}/history takes",
          security: secured,
          parameters: queryParameters(QUERY_SCHEMAS['/projects/{id}/export'].GET),
          responses: {
            '200': { description: 'NDJSON, streamed', content: { 'application/x-ndjson': { schema: { type: 'string' } } } },
            ...errors(400, 401, 403, 404, 429),
          },
        },
      },
      '/query': {
        post: {
          operationId: 'query',
          summary: 'Ask a question: up to 10 metrics by up to 3 dimensions (hours, pages, sources, goals, any eventParams key...) with filters, over ≤ 3,653 days (ten years)',
          security: secured,
          requestBody: body('Query', { from: '2026-11-01', to: '2026-11-30', metrics: ['visitors', 'bounceRate'], dimensions: ['page'], filters: [['is', 'country', ['DE']]] }),
          responses: { '200': json(ref('QueryAnswer'), 'rows (paged by limit and offset), totals and the number of rows'), ...errors(400, 401, 403, 404, 413, 415, 429) },
        },
      },
      '/query/funnel': {
        post: {
          operationId: 'queryFunnel',
          summary: 'Visits through 2 to 8 steps in order (a goal\'s name, {"event"} or {"page"}), with visit-level filters',
          security: secured,
          requestBody: body('Funnel', { from: '2026-11-01', to: '2026-11-30', steps: [{ page: '/pricing' }, { event: 'signup' }] }),
          responses: { '200': json(ref('FunnelAnswer'), 'each step\'s visits, visitors, conversion rate and drop-off'), ...errors(400, 401, 403, 404, 413, 415, 429) },
        },
      },
      '/projects/{id}/goals': {
        parameters: [projectId],
        get: {
          operationId: 'listGoals',
          summary: "A project's goals (ak_, sk_, rk_)",
          security: secured,
          responses: { '200': json(ref('GoalList'), 'the goals'), ...errors(400, 401, 403, 404, 429) },
        },
        post: {
          operationId: 'createGoal',
          summary: 'Create a goal: an event name or a page pattern (`*` matches any run); counts over all kept history (ak_, sk_)',
          security: secured,
          requestBody: body('CreateGoal', { name: 'Signed up', event: 'signup' }),
          responses: { '200': json(ref('CreatedGoal'), 'the goal'), ...errors(400, 401, 403, 404, 409, 413, 415, 429) },
        },
      },
      '/projects/{id}/goals/{goalId}': {
        parameters: [projectId, goalId],
        delete: {
          operationId: 'deleteGoal',
          summary: 'Delete a goal (ak_, sk_)',
          security: secured,
          responses: { '200': json(ref('Ok'), 'deleted'), ...errors(400, 401, 403, 404, 429) },
        },
      },
      '/mcp': {
        post: {
          operationId: 'mcp',
          summary:
            'MCP (Model Context Protocol) over Streamable HTTP, stateless: a JSON-RPC message in, its answer out as JSON. Tools: ' +
            'get_metrics, get_realtime, query, funnel, list_projects, create_project, track_event; the key decides which are listed, the engine judges each call',
          security: secured,
          requestBody: {
            required: true,
            content: { 'application/json': { schema: { type: 'object', description: 'a JSON-RPC 2.0 message (send Accept: application/json, text/event-stream)' } } },
          },
          responses: {
            '200': { description: 'the JSON-RPC answer; a refused tool call is a result with isError and the error body', content: { 'application/json': { schema: { type: 'object' } } } },
            '202': { description: 'a notification, accepted' },
            '406': { description: 'the Accept header lacks application/json and text/event-stream (a JSON-RPC error)', content: { 'application/json': { schema: { type: 'object' } } } },
            ...errors(400, 401, 413, 415),
          },
        },
      },
      '/health': {
        get: {
          operationId: 'health',
          summary: 'Liveness and storage health (no key)',
          security: [],
          responses: { '200': json(ref('Health'), 'serving'), '503': json(ref('Health'), 'storage cannot be written, or shutting down') },
        },
        head: {
          operationId: 'healthHead',
          summary: 'As GET /health, without a body',
          security: [],
          responses: { '200': { description: 'serving' }, '503': { description: 'storage cannot be written, or shutting down' } },
        },
      },
      '/script.js': {
        get: {
          operationId: 'trackerScript',
          summary: 'The tracking script (no key), cached for a day; /script.<hash>.js is immutable',
          security: [],
          responses: {
            '200': { description: 'JavaScript', content: { 'application/javascript': { schema: { type: 'string' } } } },
            '304': { description: 'not modified (If-None-Match)' },
          },
        },
        head: {
          operationId: 'trackerScriptHead',
          summary: 'As GET /script.js, without a body',
          security: [],
          responses: { '200': { description: 'JavaScript' }, '304': { description: 'not modified (If-None-Match)' } },
        },
      },
      '/dashboard': {
        get: {
          operationId: 'dashboard',
          summary: 'The dashboard page (no key: it asks for one and calls the endpoints above); its assets are under /dashboard/',
          security: [],
          responses: { '200': { description: 'HTML', content: { 'text/html': { schema: { type: 'string' } } } } },
        },
      },
      '/openapi.json': {
        get: {
          operationId: 'openApi',
          summary: 'This document (no key)',
          security: [],
          responses: { '200': { description: 'OpenAPI 3.1', content: { 'application/json': { schema: { type: 'object' } } } } },
        },
      },
    },
  };
  return cached;
}
