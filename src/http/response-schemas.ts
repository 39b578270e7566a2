import { z } from 'zod';

/**
 * The JSON answers of the HTTP API as zod schemas, for the OpenAPI document (src/http/openapi.ts). Requests are
 * described by the schemas the service validates them with; these describe what it sends back, and the HTTP test
 * suites check every answer they receive against the document built from them.
 */

const ERROR_CODES = [
  'invalid_json',
  'invalid_event',
  'invalid_request',
  'unauthorized',
  'forbidden',
  'not_found',
  'method_not_allowed',
  'conflict',
  'payload_too_large',
  'unsupported_media_type',
  'rate_limited',
  'quota_exceeded',
  'internal',
  'unavailable',
] as const;

export const ErrorBody = z
  .strictObject({
    ok: z.literal(false),
    error: z.strictObject({
      code: z.enum(ERROR_CODES),
      message: z.string(),
      details: z
        .array(z.strictObject({ index: z.number().int().min(0).optional(), path: z.string(), message: z.string() }))
        .optional()
        .meta({ description: 'one entry per bad field (for a batch: with the event index)' }),
    }),
  })
  .meta({ example: { ok: false, error: { code: 'invalid_event', message: '1 of 2 events are invalid; nothing was stored', details: [{ index: 1, path: 'url', message: 'is required for page_view' }] } } });

export const IngestAck = z
  .strictObject({ ok: z.literal(true), ts: z.number().int(), accepted: z.number().int().min(0) })
  .meta({ example: { ok: true, ts: 1763700000000, accepted: 2 } });

export const HistoryAck = z
  .strictObject({ ok: z.literal(true), accepted: z.number().int().min(0), duplicates: z.number().int().min(0) })
  .meta({ example: { ok: true, accepted: 498, duplicates: 2 } });

const count = z.number().min(0);
const breakdown = z.record(z.string(), count).meta({ description: 'counts by key, highest first, at most 1,000 keys plus (other)' });
const date = z.string().regex(/^\d{4}-\d{2}-\d{2}$/);
const rate = z.string().regex(/^\d+\.\d%$/);

const dailyFigures = z.array(z.looseObject({ date, users: count, sessions: count, pageviews: count, bounceRate: rate }));

/** Open (extra keys allowed): later fields can join the same answer. */
export const MetricsBody = z
  .looseObject({
    projectId: z.string(),
    from: date,
    to: date,
    timezone: z.string(),
    users: count,
    sessions: count,
    pageviews: count,
    bounceRate: rate,
    trafficSources: breakdown,
    countries: breakdown,
    devices: breakdown,
    pages: breakdown,
    events: breakdown,
    bots: count.meta({ description: 'hits from known bots, acknowledged and not counted as traffic' }),
    recentEvents: z.array(
      z.looseObject({
        ts: z.number().int(),
        event: z.string(),
        url: z.string(),
        referrer: z.string(),
        country: z.string(),
        device: z.string(),
        sessionId: z.string(),
      }),
    ),
    daily: dailyFigures,
    entryPages: breakdown.meta({ description: 'sessions by the path of their first page_view of the day' }),
    browsers: breakdown.meta({ description: 'sessions by browser name ("Unknown" when the User-Agent names none)' }),
    operatingSystems: breakdown.meta({ description: 'sessions by operating system name ("Unknown" when none)' }),
    utmMediums: breakdown.meta({ description: 'sessions by utm_medium of their first event\'s URL (sessions without one are not counted)' }),
    utmCampaigns: breakdown.meta({ description: 'sessions by utm_campaign of their first event\'s URL' }),
    revenue: z
      .record(z.string().regex(/^[A-Z]{3}$/), z.strictObject({ total: z.number(), purchases: count }))
      .meta({ description: 'purchase events with a numeric value and a 3-letter currency, by currency (at most 200); total rounded to 2 decimals' }),
    props: z
      .record(z.string(), z.record(z.string(), count))
      .meta({ description: 'per tracked_props key: events by value (as a string), at most 100 values per key per day plus (other)' }),
    compare: z
      .strictObject({ from: date, to: date, users: count, sessions: count, pageviews: count, bounceRate: rate, daily: dailyFigures })
      .optional()
      .meta({ description: 'with ?compare=previous|year: the headline figures of the comparison range' }),
  })
  .meta({
    id: 'Metrics',
    example: {
      projectId: 'p_x', from: '2026-11-01', to: '2026-11-01', timezone: 'UTC', users: 12, sessions: 14, pageviews: 40,
      bounceRate: '41.3%', trafficSources: { Google: 8, Direct: 6 }, countries: { DE: 9 }, devices: { desktop: 10 },
      pages: { '/': 30 }, events: { page_view: 40 }, bots: 0, recentEvents: [],
      daily: [{ date: '2026-11-01', users: 12, sessions: 14, pageviews: 40, bounceRate: '41.3%' }],
      entryPages: { '/': 9, '/pricing': 5 }, browsers: { Chrome: 8, Safari: 6 }, operatingSystems: { Windows: 7, iOS: 7 },
      utmMediums: { email: 3 }, utmCampaigns: { launch: 3 }, revenue: { EUR: { total: 49.9, purchases: 1 } },
      props: { plan: { pro: 2 } },
    },
  });

export const RealtimeBody = z
  .strictObject({
    projectId: z.string(),
    visitors: count.meta({ description: 'distinct sessions seen in the last 5 minutes (receive time)' }),
    pageviews: count.meta({ description: 'page views of the last 30 minutes' }),
    perMinute: z.array(count).length(30).meta({ description: 'page views per minute, oldest first; the last is the current minute' }),
    pages: z.record(z.string(), count).meta({ description: 'top 10 paths of the last 30 minutes' }),
    sources: z.record(z.string(), count).meta({ description: 'top 10 traffic sources of the last 30 minutes' }),
  })
  .meta({
    id: 'Realtime',
    example: { projectId: 'p_x', visitors: 3, pageviews: 4, perMinute: [...Array(29).fill(0), 4], pages: { '/pricing': 2 }, sources: { Direct: 2 } },
  });

export const Project = z
  .looseObject({
    id: z.string(),
    name: z.string(),
    allowed_origins: z.array(z.string()),
    allowed_referrers: z.array(z.string()),
    timezone: z.string(),
    monthly_quota: z.number().int().min(0),
    created_at: z.iso.datetime(),
    tracked_props: z.array(z.string()),
    domain: z.string().optional().meta({ description: "the site's host name, when set: Plausible's Events API (POST /api/event) finds the project by it" }),
  })
  ;

export const ProjectPage = z
  .strictObject({ projects: z.array(Project), next_cursor: z.string().nullable() })
  .meta({ example: { projects: [], next_cursor: null } });

export const CreatedProject = z
  .strictObject({ project: Project, keys: z.strictObject({ secret: z.string().regex(/^sk_/), publishable: z.string().regex(/^pk_/) }) })
  ;

export const ProjectOnly = z.strictObject({ project: Project });

export const Ok = z.strictObject({ ok: z.literal(true) }).meta({ example: { ok: true } });

export const Key = z
  .strictObject({
    id: z.string(),
    type: z.enum(['secret', 'publishable', 'read']),
    hint: z.string(),
    created_at: z.iso.datetime(),
    expires_at: z.iso.datetime().nullable(),
  })
  .meta({ example: { id: 'key_3Yc9', type: 'read', hint: 'rk_…x9Qa', created_at: '2026-11-23T06:00:00.000Z', expires_at: null } });

export const KeyList = z.strictObject({ keys: z.array(Key) });

export const CreatedKey = z
  .strictObject({ ...Key.shape, key: z.string().regex(/^(sk|pk|rk)_/) })
  .meta({ description: 'the key itself is shown only here' });

export const Health = z
  .strictObject({
    status: z.enum(['ok', 'unavailable']),
    version: z.string(),
    uptimeSeconds: z.number().int().min(0),
    log: z
      .strictObject({
        lastSeq: z.number().int().min(0),
        verifiedRecords: z.number().int().min(0),
        verifiedAt: z.iso.datetime(),
        ok: z.boolean(),
      })
      .optional()
      .meta({ description: 'the last verification of the log: startup checks the checksum and continuity of every entry it replays' }),
  })
  .meta({
    example: {
      status: 'ok',
      version: '0.1.0',
      uptimeSeconds: 42,
      log: { lastSeq: 3000, verifiedRecords: 120, verifiedAt: '2026-11-23T06:00:00.000Z', ok: true },
    },
  });

const Day = z.string().regex(/^\d{4}-\d\d-\d\d$/);

export const QueryAnswer = z
  .strictObject({
    projectId: z.string(),
    from: Day,
    to: Day,
    timezone: z.string(),
    metrics: z.array(z.string()),
    dimensions: z.array(z.string()),
    results: z.array(
      z.strictObject({
        dimensions: z.array(z.string()).meta({ description: 'the row\'s values, in the order of `dimensions`' }),
        metrics: z.array(z.number()).meta({ description: 'the row\'s figures, in the order of `metrics`' }),
      }),
    ),
    totals: z.array(z.number()).meta({ description: 'the metrics of the selection with no dimension' }),
    totalRows: z.number().int().min(0).meta({ description: 'rows before limit and offset' }),
  })
  .meta({
    example: {
      projectId: 'p_x', from: '2026-11-01', to: '2026-11-30', timezone: 'UTC', metrics: ['visitors', 'bounceRate'], dimensions: ['page'],
      results: [{ dimensions: ['/pricing'], metrics: [120, 38.5] }], totals: [510, 41.2], totalRows: 37,
    },
  });

export const FunnelAnswer = z
  .strictObject({
    projectId: z.string(),
    from: Day,
    to: Day,
    timezone: z.string(),
    steps: z.array(
      z.strictObject({
        label: z.string().meta({ description: 'the goal\'s name, event:<name> or page:<pattern>' }),
        visits: z.number().int().min(0),
        visitors: z.number().int().min(0),
        conversionRate: z.number().min(0).meta({ description: 'the step\'s visits ÷ step 1\'s visits × 100, one decimal' }),
        dropoff: z.number().int().min(0).meta({ description: 'the previous step\'s visits minus this step\'s (0 for step 1)' }),
      }),
    ),
  })
  .meta({
    example: {
      projectId: 'p_x', from: '2026-11-01', to: '2026-11-30', timezone: 'UTC',
      steps: [{ label: 'page:/pricing', visits: 200, visitors: 180, conversionRate: 100, dropoff: 0 }, { label: 'Signed up', visits: 30, visitors: 29, conversionRate: 15, dropoff: 170 }],
    },
  });

export const GoalItem = z
  .union([
    z.strictObject({ id: z.string(), name: z.string(), event: z.string(), created_at: z.iso.datetime() }),
    z.strictObject({ id: z.string(), name: z.string(), page: z.string(), created_at: z.iso.datetime() }),
  ])
  .meta({ example: { id: 'goal_4fQ2', name: 'Signed up', event: 'signup', created_at: '2026-11-23T06:00:00.000Z' } });

export const GoalList = z.strictObject({ goals: z.array(GoalItem) });

export const CreatedGoal = z.strictObject({ goal: GoalItem });
