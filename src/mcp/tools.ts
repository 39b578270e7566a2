import { z } from 'zod';
import { EventSchema } from '../core/event-schema.ts';
import { FunnelBodySchema, QueryBodySchema } from '../core/query/schema.ts';
import { CreateProjectSchema } from '../engine/project-input.ts';
import { failure, type AnalyticsEngine, type KeyIdentity, type Outcome, type RequestMeta } from '../engine/types.ts';
import { pageQuery, QUERY_SCHEMAS } from '../engine/request-params.ts';

/**
 * The agent tools. Each one is a face of one engine call: its input schema is the schema the HTTP face uses for the
 * same call (advertised to the agent as JSON Schema), and its answer is the engine's Outcome, the same JSON the HTTP
 * answer carries. The engine judges every call; `kinds` only says which tools a key is shown, so an agent is not
 * offered what would be refused anyway (a tool called without being listed still goes to the engine, which refuses
 * it with the code HTTP would give).
 */

type KeyKind = KeyIdentity['kind'];

/** GET /metrics and GET /projects take their parameters in the query string; a tool takes the same names as arguments. */
const MetricsQuerySchema = QUERY_SCHEMAS['/metrics'].GET;
const ListProjectsQuerySchema = QUERY_SCHEMAS['/projects'].GET;
const RealtimeQuerySchema = QUERY_SCHEMAS['/metrics/realtime'].GET;

export interface ToolDefinition {
  name: string;
  title: string;
  description: string;
  /** the HTTP face's schema for the same call */
  input: z.ZodType;
  /** key kinds the tool is listed for */
  kinds: readonly KeyKind[];
  readOnly: boolean;
  call(engine: AnalyticsEngine, meta: RequestMeta, args: Record<string, unknown>): Promise<Outcome<unknown>> | Outcome<unknown>;
}

/** Checks tool arguments against a query schema the way the HTTP face checks a query string: 400 naming the problem. */
function parseQuery<T>(schema: z.ZodType<T>, args: Record<string, unknown>): Outcome<T> {
  const parsed = schema.safeParse(args);
  if (parsed.success) return { ok: true, value: parsed.data };
  const details = parsed.error.issues.map((i) => ({
    path: i.code === 'unrecognized_keys' ? i.keys.join(', ') : i.path.map(String).join('.'),
    message: i.message,
  }));
  return failure('invalid_request', `invalid arguments: ${details.map((d) => (d.path ? `${d.path}: ${d.message}` : d.message)).join('; ')}`, { details });
}

export const TOOLS: readonly ToolDefinition[] = [
  {
    name: 'get_metrics',
    title: 'Read aggregates',
    description:
      'Daily aggregates of a project for one day (`date`) or an inclusive range (`from`, optional `to`; default: today), ' +
      'the same JSON as GET /metrics: users, sessions, pageviews, bounceRate, trafficSources, countries, devices, pages, ' +
      'events, entryPages, browsers, operatingSystems, utmMediums, utmCampaigns, revenue, props, recentEvents and a per-day ' +
      'series. `compare`: `previous` (the range of the same length just before) or `year` (the same dates a year earlier) ' +
      'adds the other range\'s figures under `compare`. Dates are YYYY-MM-DD in the project\'s timezone. Admin keys name ' +
      'the project with `projectId`.',
    input: MetricsQuerySchema,
    kinds: ['admin', 'secret', 'read'],
    readOnly: true,
    call(engine, meta, args) {
      const q = parseQuery(MetricsQuerySchema, args);
      if (!q.ok) return q;
      return engine.metrics(meta, q.value);
    },
  },
  {
    name: 'get_realtime',
    title: 'Read the last 30 minutes',
    description:
      'What is happening now, as GET /metrics/realtime answers: `visitors` (distinct sessions in the last 5 minutes), ' +
      '`pageviews` (last 30 minutes), `perMinute` (30 counts, oldest first), top `pages` and `sources` of the last 30 ' +
      'minutes. Admin keys name the project with `projectId`.',
    input: RealtimeQuerySchema,
    kinds: ['admin', 'secret', 'read'],
    readOnly: true,
    call(engine, meta, args) {
      const q = parseQuery(RealtimeQuerySchema, args);
      if (!q.ok) return q;
      return engine.realtime(meta, q.value);
    },
  },
  {
    name: 'query',
    title: 'Ask a question',
    description:
      'Any question over the project\'s events, the same JSON as POST /query: `metrics` (1-10 of visitors, visits, pageviews, ' +
      'events, bounceRate, viewsPerVisit, visitDuration, conversionRate), `dimensions` (0-3 of source, utmMedium, utmCampaign, ' +
      'country, device, browser, os, entryPage, exitPage, page, event, goal, prop:<eventParams key>, and one of time:hour, ' +
      'time:day, time:week, time:month), `filters` ([operator, dimension, [values]] with is, isNot, contains, notContains), ' +
      '`orderBy`, `limit`, `offset`, and the range as `date` or `from`/`to` (YYYY-MM-DD, ≤ 3,653 days; time:hour ≤ 31). conversionRate needs a ' +
      'goal dimension or goal filter (a row\'s converted visitors ÷ the visitors of its group without goal filters). Answers rows of dimension values and metric values, totals and totalRows. Admin keys ' +
      'name the project with `projectId`.',
    input: QueryBodySchema,
    kinds: ['admin', 'secret', 'read'],
    readOnly: true,
    call(engine, meta, args) {
      return engine.query(meta, args);
    },
  },
  {
    name: 'funnel',
    title: 'Measure a funnel',
    description:
      'Visits that go through 2 to 8 steps in order, the same JSON as POST /query/funnel: `steps` (each a goal\'s name, ' +
      '{"event": name} or {"page": "/pattern"} where * matches any run), optional `filters` on visit-level dimensions, and the ' +
      'range as `date` or `from`/`to`. Answers each step\'s visits, visitors, conversionRate (% of step 1) and dropoff. ' +
      'Admin keys name the project with `projectId`.',
    input: FunnelBodySchema,
    kinds: ['admin', 'secret', 'read'],
    readOnly: true,
    call(engine, meta, args) {
      return engine.funnel(meta, args);
    },
  },
  {
    name: 'list_projects',
    title: 'List projects',
    description:
      'The projects the key may see (all of them for an admin key, its own for a project key), as GET /projects answers: ' +
      'a page of `limit` (1-1000, default 100, as a string like the query parameter) from `cursor` (the `next_cursor` of the previous page).',
    input: ListProjectsQuerySchema,
    kinds: ['admin', 'secret'],
    readOnly: true,
    call(engine, meta, args) {
      const q = parseQuery(ListProjectsQuerySchema, args);
      if (!q.ok) return q;
      return engine.listProjects(meta, pageQuery(q.value));
    },
  },
  {
    name: 'create_project',
    title: 'Create a project',
    description:
      'Creates a project, as POST /projects does, and answers it with its keys (shown only here): `allowed_origins` ' +
      '(URL origins) and `allowed_referrers` (host names) are required, possibly empty; `name`, `timezone` (IANA) and ' +
      '`monthly_quota` are optional. Admin keys only.',
    input: CreateProjectSchema,
    kinds: ['admin'],
    readOnly: false,
    async call(engine, meta, args) {
      // Project keys may create projects over HTTP; an agent holding one is kept to its project.
      const who = engine.identify(meta);
      if (!who.ok) return who;
      if (who.value.kind !== 'admin') return failure('forbidden', 'create_project takes an admin key');
      return engine.createProject(meta, args);
    },
  },
  {
    name: 'track_event',
    title: 'Send an event',
    description:
      'Sends one event to the key\'s project, as POST /analytics does: `event` (name; `page_view` for a page view, which ' +
      'needs `url`), optional `url`, `referrer`, `sessionId`, `userId`, `eventParams`, `eventId` (a repeat is counted once) ' +
      'and the other event fields. Answers {ok, ts, accepted} once the event is durable.',
    input: EventSchema,
    kinds: ['secret', 'publishable'],
    readOnly: false,
    async call(engine, meta, args) {
      const out = await engine.ingest(meta, [args]);
      return out.ok ? { ok: true, value: { ok: true, ts: out.value.ts, accepted: out.value.accepted } } : out;
    },
  },
];

/** The tools a key of this kind is shown. */
export function toolsFor(kind: KeyKind): ToolDefinition[] {
  return TOOLS.filter((t) => t.kinds.includes(kind));
}
