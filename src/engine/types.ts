import type { FunnelStepAnswer, QueryRow } from '../core/query/types.ts';
import type { MetricsResponse, RealtimeResponse, StoredEvent } from '../core/types.ts';
import type { KeyKind } from '../store/records.ts';

/**
 * What the faces (HTTP, gRPC) see of the engine. Faces parse their wire format into plain values, call the
 * engine, and map the Outcome to their wire with one exhaustive mapping each. They never re-implement rules.
 */

export type ErrorCode =
  | 'invalid_json'
  | 'invalid_event'
  | 'invalid_request'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'method_not_allowed'
  | 'conflict'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'rate_limited'
  | 'quota_exceeded'
  | 'internal'
  | 'unavailable';

/** One problem with one field of one event (index is the event's position in the batch). */
export interface ErrorDetail {
  index?: number;
  path: string;
  message: string;
}

export interface EngineError {
  code: ErrorCode;
  message: string;
  details?: ErrorDetail[];
  /** for rate_limited / quota_exceeded / unavailable: seconds until a retry can succeed */
  retryAfterSeconds?: number;
}

/** Rate-limit state of the caller's key, sent on every authenticated response (RateLimit-* headers). */
export interface RateInfo {
  limit: number;
  remaining: number;
  resetSeconds: number;
}

/** A refused outcome; `rate` rides along so refusals still carry the RateLimit-* headers. */
export type Failure = { ok: false; error: EngineError; rate?: RateInfo };

export function failure(code: ErrorCode, message: string, extra: Partial<EngineError> = {}, rate?: RateInfo): Failure {
  const out: Failure = { ok: false, error: { code, message, ...extra } };
  if (rate) out.rate = rate;
  return out;
}

export type Outcome<T> =
  | { ok: true; value: T; rate?: RateInfo }
  | Failure;

/** Facts about one request that the rules need; the faces fill them from headers or gRPC metadata. */
export interface RequestMeta {
  /** raw `authorization` header or metadata value */
  authorization?: string | undefined;
  origin?: string | undefined;
  referer?: string | undefined;
  /**
   * the request comes from a page of the service itself (its Origin, or without one its Referer, names the host it
   * was sent to: the dashboard, a `#key=` link): never refused for its origin or referrer, the lists guard other sites
   */
  ownPage?: boolean;
  /** client IP as the face sees it (never stored) */
  ip: string;
  /** raw User-Agent (never stored) */
  userAgent: string;
  /** which face the request came through (operator metrics label); absent = http */
  face?: 'http' | 'grpc';
  /** the events come from a JSON body guardJson already checked whole (the HTTP face): not walked again per event */
  guarded?: boolean;
}

export interface IngestAck {
  ts: number;
  accepted: number;
  /** what became of the events (operator metrics); faces answer only ts and accepted */
  counts?: { stored: number; duplicate: number; bot: number };
}

/** POST /projects/{id}/history: every event of the batch is either stored or a duplicate. */
export interface HistoryAck {
  accepted: number;
  duplicates: number;
}

/** GET /projects/{id}/export: a range of days (GET /metrics rules, up to ten years). */
export interface ExportQuery {
  date?: string | undefined;
  from?: string | undefined;
  to?: string | undefined;
}

/** An admitted export: the days resolved, and the events in time order, a bounded chunk at a time. */
export interface ExportStream {
  from: string;
  to: string;
  chunks: AsyncGenerator<StoredEvent[]>;
}

export interface MetricsQuery {
  date?: string | undefined;
  from?: string | undefined;
  to?: string | undefined;
  projectId?: string | undefined;
  /** `previous` or `year` (anything else is invalid_request) */
  compare?: string | undefined;
}

export interface RealtimeQuery {
  projectId?: string | undefined;
}

export interface ProjectView {
  id: string;
  name: string;
  allowed_origins: string[];
  allowed_referrers: string[];
  timezone: string;
  monthly_quota: number;
  created_at: string;
  tracked_props: string[];
  /** the site's host name, when the project names one (Plausible's APIs find the site by it) */
  domain?: string;
}

/** A page of GET /projects: `next_cursor` is opaque, null on the last page. */
export interface ProjectPage {
  projects: ProjectView[];
  next_cursor: string | null;
}

export interface PageQuery {
  /** 1–1,000; absent = 100 */
  limit?: number | undefined;
  cursor?: string | undefined;
}

export type KeyType = 'secret' | 'publishable' | 'read';

/** A key as listed: never the key itself. */
export interface KeyView {
  id: string;
  type: KeyType;
  hint: string;
  created_at: string;
  expires_at: string | null;
}

/** A new key: the key is shown only here. */
export interface CreatedKey extends KeyView {
  key: string;
}

export interface CreatedProject {
  project: ProjectView;
  keys: { secret: string; publishable: string };
}

/** Who a key is: what a face needs to decide what to offer (MCP lists tools by it); the engine still judges each call. */
export interface KeyIdentity {
  kind: KeyKind;
  /** the key's project; undefined for admin keys */
  projectId: string | undefined;
}

export interface HealthView {
  status: 'ok' | 'unavailable';
  version: string;
  uptimeSeconds: number;
  /** the last verification of the log (startup checks checksums and continuity of everything it replays) */
  log?: { lastSeq: number; verifiedRecords: number; verifiedAt: string; ok: boolean };
}

/** The answer of POST /query (CONTRACT "Questions"). */
export interface QueryResponse {
  projectId: string;
  from: string;
  to: string;
  timezone: string;
  metrics: string[];
  dimensions: string[];
  results: QueryRow[];
  totals: number[];
  totalRows: number;
}

/** The answer of POST /query/funnel. */
export interface FunnelResponse {
  projectId: string;
  from: string;
  to: string;
  timezone: string;
  steps: FunnelStepAnswer[];
}

/** A goal as listed: exactly one of `event` or `page`. */
export interface GoalView {
  id: string;
  name: string;
  event?: string;
  page?: string;
  created_at: string;
}

/** Which gate a request the face could not parse passes before its wire error is told: ingest, management, or a read. */
export type Gate = 'ingest' | 'manage' | 'read';

/** The engine's public surface. `src/engine/engine.ts` implements it. */
export interface AnalyticsEngine {
  /** `events` are parsed JSON values (HTTP) or plain objects converted from protobuf (gRPC). */
  ingest(meta: RequestMeta, events: unknown[]): Promise<Outcome<IngestAck>>;
  /** Plausible's Events API (POST /api/event): no key, the site named by its domain (plausible.ts) */
  plausibleEvent(meta: RequestMeta, body: unknown): Promise<Outcome<{ dropped: boolean }>>;
  /** async: in cluster mode the read may wait for the fold (read barrier) or go to the partition's owner */
  metrics(meta: RequestMeta, query: MetricsQuery): Promise<Outcome<MetricsResponse>>;
  realtime(meta: RequestMeta, query: RealtimeQuery): Promise<Outcome<RealtimeResponse>>;
  /** POST /projects/{id}/history: events of any day since 2000, each counted in its own day, once per eventId for good. */
  history(meta: RequestMeta, projectId: string, events: unknown[]): Promise<Outcome<HistoryAck>>;
  /** GET /projects/{id}/export: the stored events of the days, in time order, for the face to stream. */
  exportEvents(meta: RequestMeta, projectId: string, query: ExportQuery): Outcome<ExportStream>;
  listProjects(meta: RequestMeta, page?: PageQuery): Outcome<ProjectPage>;
  createProject(meta: RequestMeta, body: unknown): Promise<Outcome<CreatedProject>>;
  updateProject(meta: RequestMeta, projectId: string, body: unknown): Promise<Outcome<{ project: ProjectView }>>;
  /** Deletes the project and erases its events from the log and every file (a snapshot is written at once). */
  deleteProject(meta: RequestMeta, projectId: string): Promise<Outcome<{ ok: true }>>;
  listKeys(meta: RequestMeta, projectId: string): Outcome<{ keys: KeyView[] }>;
  createKey(meta: RequestMeta, projectId: string, body: unknown): Promise<Outcome<CreatedKey>>;
  /** Sets a key's expiry (key rotation with an overlap). */
  updateKey(meta: RequestMeta, projectId: string, keyId: string, body: unknown): Promise<Outcome<KeyView>>;
  revokeKey(meta: RequestMeta, projectId: string, keyId: string): Promise<Outcome<{ ok: true }>>;
  /** POST /query: `body` is the parsed JSON (gRPC, MCP and CLI build the same object). */
  query(meta: RequestMeta, body: unknown): Promise<Outcome<QueryResponse>>;
  /** Plausible's Stats API v2 (POST /api/v2/query) over query (plausible-stats.ts): Plausible's answer or `{ error }` */
  plausibleQuery(meta: RequestMeta, body: unknown): Promise<{ ok: true; value: Record<string, unknown> } | { ok: false; status: number; error: string }>;
  /** POST /query/funnel */
  funnel(meta: RequestMeta, body: unknown): Promise<Outcome<FunnelResponse>>;
  listGoals(meta: RequestMeta, projectId: string): Promise<Outcome<{ goals: GoalView[] }>>;
  createGoal(meta: RequestMeta, projectId: string, body: unknown): Promise<Outcome<{ goal: GoalView }>>;
  deleteGoal(meta: RequestMeta, projectId: string, goalId: string): Promise<Outcome<{ ok: true }>>;
  /**
   * For a body the face could not even parse (wrong type, too large, not JSON): runs the endpoint's gate (key,
   * rate limit, scope) and answers `error` only if the gate passes, so precedence and RateLimit-* match the rest.
   */
  refuse(meta: RequestMeta, endpoint: Gate, error: EngineError): Failure;
  /** The key of the request (401 when missing, malformed or unknown); takes no rate-limit token. */
  identify(meta: RequestMeta): Outcome<KeyIdentity>;
  health(): HealthView;
}
