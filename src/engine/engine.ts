// long because every rule of the contract meets here (gates, ingest, reads, lifecycle); questions live in questions.ts.
import type { Config } from '../config.ts';
import { dayOf, nextUtcMonthStart } from '../core/dates.ts';
import { parseEvent } from '../core/event-schema.ts';
import { guardJson } from '../core/json-guard.ts';
import { MAX_BATCH_EVENTS, MAX_EVENT_BYTES } from '../core/limits.ts';
import { compareRange, isCompareMode, resolveRange } from '../core/metrics.ts';
import { normalizeEvent } from '../core/normalize.ts';
import type { LogRecord, MetricsResponse, RealtimeResponse } from '../core/types.ts';
import { classifySource, type ClientFacts } from '../enrich/index.ts';
import type { KeyRecord, ProjectRecord } from '../store/log-store.ts';
import type { Catalog } from '../store/seams.ts';
import type { Backend } from './backend.ts';
import { ClusterBackend } from './cluster-backend.ts';
import { QuestionDesk } from './questions.ts';
import { LmdbBackend } from './lmdb-backend.ts';
import { bearerKey, bearerToken, generateId, generateKey, hashKey, keyHint, keyIdOf } from './keys.ts';
import { decodeCursor, encodeCursor, isAfter, isLive, isRecord, keyView, zodDetails } from './lifecycle-helpers.ts';
import {
  CreateKeySchema,
  CreateProjectSchema,
  DEFAULT_PAGE,
  MAX_PAGE,
  normalizeOrigin,
  UpdateKeySchema,
  UpdateProjectSchema,
} from './project-input.ts';
import { clientBucket, RateLimiter } from './rate-limiter.ts';
import type { OperatorMetrics } from './operator-metrics.ts';
import { failure as fail, type Failure as Fail } from './types.ts';
import type {
  AnalyticsEngine,
  CreatedKey,
  CreatedProject,
  EngineError,
  ErrorDetail,
  FunnelResponse,
  Gate,
  GoalView,
  QueryResponse,
  HealthView,
  IngestAck,
  KeyIdentity,
  KeyView,
  MetricsQuery,
  Outcome,
  PageQuery,
  ProjectPage,
  ProjectView,
  RateInfo,
  RealtimeQuery,
  RequestMeta,
} from './types.ts';

/** CONTRACT: default monthly allowance per project. */
const DEFAULT_MONTHLY_QUOTA = 100_000;
/** Cluster: lookups past the catalog mirror for unknown keys, per client IP (a key made elsewhere appears within ms). */
const KEY_REFRESH_RATE = 5;
const KEY_REFRESH_BURST = 10;
/** Salts rotate at midnight UTC; checking each minute keeps the rotation within a minute of it. */
const SALT_CHECK_EVERY_MS = 60_000;

interface Principal {
  key: KeyRecord;
  keyHash: string;
}

export interface EngineOptions {
  config: Readonly<Config>;
  /** operator metrics (METRICS_PORT); absent = not collected */
  ops?: OperatorMetrics | undefined;
  version: string;
  /** the clock; injected so tests can move time */
  now?: () => number;
  /** cluster mode, tests: a suffix for every NATS resource name (each test its own stream and buckets) */
  clusterTag?: string | undefined;
  log?: (line: string) => void;
}

/**
 * The service: every rule of the contract, behind the AnalyticsEngine interface that HTTP and gRPC call.
 * Write path: authenticate → scope → rate limit → validate → enrich → de-duplicate → quota → append (await the
 * commit) → fold → acknowledge. Read path: in-memory state only.
 */
export class Engine implements AnalyticsEngine {
  private readonly projects = new Map<string, ProjectRecord>();
  private readonly limiter = new RateLimiter();
  /** creation time of the newest project (creation times strictly increase) */
  private lastCreatedAt = 0;
  private closing = false;
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly startedAt: number;
  readonly now: () => number;
  private readonly log: (line: string) => void;
  private ops: OperatorMetrics | undefined;
  private readonly catalog: Catalog;
  private readonly desk: QuestionDesk;

  private constructor(
    private readonly config: Readonly<Config>,
    private readonly version: string,
    private readonly backend: Backend,
    now: () => number,
    log: (line: string) => void,
  ) {
    this.now = now;
    this.log = log;
    this.startedAt = now();
    this.catalog = backend.catalog;
    // Map order is creation order: GET /projects pages through it.
    const all = this.catalog.projects().sort(byCreation);
    for (const p of all) this.projects.set(p.id, p);
    this.lastCreatedAt = all.at(-1)?.createdAt ?? 0;
    // Changes made on another node (cluster), or here: the project list follows the catalog.
    this.catalog.onChange(({ kind, id }) => {
      if (kind === 'project') this.syncProject(id);
    });
    this.desk = new QuestionDesk({
      admitRead: async (meta, projectId) => {
        if (this.config.cluster) await this.refreshUnknownKey(meta);
        return this.admitRead(meta, projectId);
      },
      admitProject: (meta, projectId) => this.admitProject(meta, projectId),
      project: (id) => this.projects.get(id),
      saveProject: async (next, rate) => {
        const failed = await this.write(() => this.catalog.putProject(next, []), rate);
        if (!failed && this.projects.has(next.id)) this.projects.set(next.id, next); // a delete may have raced the write
        return failed;
      },
      questions: () => this.backend.questions,
      now: () => this.now(),
      closing: () => this.closing,
    });
  }

  static async open(opts: EngineOptions): Promise<Engine> {
    const now = opts.now ?? Date.now;
    const log = opts.log ?? ((line: string) => console.log(line));
    const ops = opts.ops;
    const backend: Backend =
      opts.config.cluster !== undefined
        ? await ClusterBackend.open(opts.config, opts.config.cluster, { now, log, version: opts.version, tag: opts.clusterTag })
        : await LmdbBackend.open(opts.config, now, log, ops);
    const engine = new Engine(opts.config, opts.version, backend, now, log);
    if (ops) {
      engine.ops = ops;
      ops.observeState(() => engine.stats());
    }
    await backend.bootstrapAdminKey(opts.config, now());
    if (backend instanceof LmdbBackend) {
      // A delete interrupted by a crash: its project and keys are gone, its events not yet. Finish before serving.
      for (const id of backend.pendingErasures()) await backend.eraseProject(id);
      await backend.erasuresSettled();
    }
    engine.startTimers();
    return engine;
  }

  /** The catalog changed (here or on another node): keep creation order, so cursors never skip a project. */
  private syncProject(id: string): void {
    const p = this.catalog.project(id);
    if (!p) {
      this.projects.delete(id);
      return;
    }
    const had = this.projects.has(id);
    this.projects.set(id, p);
    if (p.createdAt > this.lastCreatedAt) this.lastCreatedAt = p.createdAt;
    if (!had) {
      const last = [...this.projects.values()].at(-2);
      if (last && byCreation(last, p) > 0) {
        const sorted = [...this.projects.values()].sort(byCreation);
        this.projects.clear();
        for (const q of sorted) this.projects.set(q.id, q);
      }
    }
  }

  // ---------------------------------------------------------------- ingest

  async ingest(meta: RequestMeta, events: unknown[]): Promise<Outcome<IngestAck>> {
    if (!this.ops) return this.ingestBatch(meta, events);
    const started = performance.now();
    const out = await this.ingestBatch(meta, events);
    const face = meta.face ?? 'http';
    this.ops.ingestSeconds(face, (performance.now() - started) / 1000);
    if (out.ok) {
      const c = out.value.counts ?? { stored: 0, duplicate: 0, bot: 0 };
      this.ops.eventOutcomes(face, { stored: c.stored, duplicate: c.duplicate, bot: c.bot });
    } else this.ops.eventOutcomes(face, { [out.error.code]: events.length });
    return out;
  }

  private async ingestBatch(meta: RequestMeta, events: unknown[]): Promise<Outcome<IngestAck>> {
    if (this.closing) return fail('unavailable', 'the service is shutting down', { retryAfterSeconds: 1 });
    if (this.config.cluster) await this.refreshUnknownKey(meta);
    const admitted = this.admitIngest(meta);
    if (!admitted.ok) return admitted;
    const { project, rate } = admitted.value;

    if (events.length === 0) return fail('invalid_request', 'the batch is empty: send 1 to 500 events', {}, rate);
    if (events.length > MAX_BATCH_EVENTS) {
      return fail('payload_too_large', `a batch holds at most ${MAX_BATCH_EVENTS} events (got ${events.length})`, {}, rate);
    }

    await this.backend.settled();
    const now = this.now();
    const client: ClientFacts = { ip: meta.ip, userAgent: meta.userAgent };
    const enricher = this.backend.enricher;
    const facts = enricher.classify(client);
    // Facts of the request, not of an event: worked out once per batch.
    const botDay = facts.bot ? dayOf(now, project.timezone) : '';
    const details: ErrorDetail[] = [];
    const records: LogRecord[] = [];
    const batchIds = new Set<string>();
    let stored = 0;

    for (let index = 0; index < events.length; index++) {
      const raw = events[index];
      const guard = guardJson(raw);
      if (!guard.ok) {
        details.push({ index, path: guard.path, message: guard.message });
        continue;
      }
      const bytes = Buffer.byteLength(JSON.stringify(raw) ?? '');
      if (bytes > MAX_EVENT_BYTES) {
        details.push({ index, path: '', message: `an event is at most ${MAX_EVENT_BYTES} bytes encoded (got ${bytes})` });
        continue;
      }
      const parsed = parseEvent(raw);
      if (!parsed.ok) {
        for (const issue of parsed.issues) details.push({ index, path: issue.path, message: issue.message });
        continue;
      }
      const input = parsed.event;
      if (input.projectId !== undefined && input.projectId !== project.id) {
        return fail('forbidden', `event ${index} names project "${input.projectId}", but the key belongs to another project`, {}, rate);
      }
      if (facts.bot) {
        records.push({ t: 'b', p: project.id, day: botDay, rt: now });
        continue;
      }
      const { source, referrer } = classifySource(input.referrer ?? '', input.url ?? '');
      const sessionId = input.sessionId ?? enricher.anonymousSessionId(project.id, client, now);
      const normalized = normalizeEvent(input, {
        projectId: project.id,
        timezone: project.timezone,
        now,
        source,
        referrer,
        sessionId,
        device: facts.device,
        country: facts.country,
        browser: facts.browser,
        os: facts.os,
        trackedProps: project.trackedProps,
      });
      if (!normalized.ok) {
        details.push({ index, path: normalized.path, message: normalized.message });
        continue;
      }
      if (details.length > 0) continue; // the batch is refused anyway: keep listing problems, store nothing
      const id = normalized.event.eventId;
      if (id !== undefined) {
        // A repeat is acknowledged again but stored once: already folded, in flight, or earlier in this batch.
        if (batchIds.has(id) || this.backend.seen(project.id, id, now)) continue;
        batchIds.add(id);
      }
      records.push(normalized.event);
      stored++;
    }

    if (details.length > 0) {
      return fail('invalid_event', `${new Set(details.map((d) => d.index)).size} of ${events.length} events are invalid; nothing was stored`, { details }, rate);
    }

    const quota = project.monthlyQuota;
    if (quota > 0 && stored > 0) {
      const used = this.backend.usedThisMonth(project.id, now);
      if (used + stored > quota) {
        const reset = nextUtcMonthStart(now);
        return fail('quota_exceeded', quotaMessage(project.id, quota, used), {
          retryAfterSeconds: Math.max(1, Math.ceil((reset - now) / 1000)),
        }, rate);
      }
    }

    if (records.length > 0) {
      const appended = await this.backend.commit(project.id, records, batchIds, stored);
      if (!appended) return fail('unavailable', 'storage is not accepting writes; nothing was stored', { retryAfterSeconds: 1 }, rate);
    }
    const bots = facts.bot ? records.length : 0;
    const counts = { stored, bot: bots, duplicate: events.length - stored - bots };
    return { ok: true, value: { ts: now, accepted: events.length, counts }, rate };
  }

  // ---------------------------------------------------------------- reads

  async metrics(meta: RequestMeta, query: MetricsQuery): Promise<Outcome<MetricsResponse>> {
    if (this.config.cluster) await this.refreshUnknownKey(meta);
    const admitted = this.admitRead(meta, query.projectId);
    if (!admitted.ok) return admitted;
    const { project, rate } = admitted.value;
    const range = resolveRange(query, dayOf(this.now(), project.timezone));
    if (!range.ok) return fail('invalid_request', range.message, {}, rate);
    if (query.compare !== undefined && !isCompareMode(query.compare)) {
      return fail('invalid_request', '`compare` must be "previous" or "year"', {}, rate);
    }
    const compare = query.compare === undefined ? undefined : compareRange(query.compare, range.from, range.to);
    const out = await this.backend.read({ kind: 'metrics', projectId: project.id, timezone: project.timezone, from: range.from, to: range.to, trackedProps: project.trackedProps, compare });
    if ('unavailable' in out) return fail('unavailable', out.unavailable, { retryAfterSeconds: 1 }, rate);
    return { ok: true, value: out.value as MetricsResponse, rate };
  }

  /** The last 30 minutes of the project, by receive time, as of the engine clock. */
  async realtime(meta: RequestMeta, query: RealtimeQuery): Promise<Outcome<RealtimeResponse>> {
    if (this.config.cluster) await this.refreshUnknownKey(meta);
    const admitted = this.admitRead(meta, query.projectId);
    if (!admitted.ok) return admitted;
    const { project, rate } = admitted.value;
    const out = await this.backend.read({ kind: 'realtime', projectId: project.id, now: this.now() });
    if ('unavailable' in out) return fail('unavailable', out.unavailable, { retryAfterSeconds: 1 }, rate);
    return { ok: true, value: out.value as RealtimeResponse, rate };
  }

  // ---------------------------------------------------------------- questions and goals (src/engine/questions.ts)

  query(meta: RequestMeta, body: unknown): Promise<Outcome<QueryResponse>> {
    return this.desk.query(meta, body);
  }

  funnel(meta: RequestMeta, body: unknown): Promise<Outcome<FunnelResponse>> {
    return this.desk.funnel(meta, body);
  }

  listGoals(meta: RequestMeta, projectId: string): Promise<Outcome<{ goals: GoalView[] }>> {
    return this.desk.listGoals(meta, projectId);
  }

  createGoal(meta: RequestMeta, projectId: string, body: unknown): Promise<Outcome<{ goal: GoalView }>> {
    return this.desk.createGoal(meta, projectId, body);
  }

  deleteGoal(meta: RequestMeta, projectId: string, goalId: string): Promise<Outcome<{ ok: true }>> {
    return this.desk.deleteGoal(meta, projectId, goalId);
  }

  /** The gate of the reads: an sk_ key for its own project, or an admin key naming one, from an allowed origin. */
  private admitRead(meta: RequestMeta, requested: string | undefined): Outcome<{ project: ProjectRecord; rate: RateInfo }> {
    const admitted = this.admit(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    if (key.kind === 'publishable') return fail('forbidden', 'pk_ keys can only ingest; read metrics with the sk_ or rk_ key', {}, rate);
    let projectId: string;
    if (key.kind === 'admin') {
      if (!requested) return fail('invalid_request', 'admin keys must name the project: projectId (the ?projectId= parameter, or the field of a POST /query body)', {}, rate);
      projectId = requested;
    } else {
      if (requested !== undefined && requested !== key.projectId) {
        return fail('forbidden', 'the key belongs to another project', {}, rate);
      }
      projectId = key.projectId!;
    }
    const project = this.projects.get(projectId);
    if (!project) return fail('not_found', `no project "${projectId}"`, {}, rate);
    if (key.kind !== 'admin') {
      const scope = this.checkOrigin(project, key, meta, rate);
      if (scope) return scope;
    }
    return { ok: true, value: { project, rate } };
  }

  listProjects(meta: RequestMeta, page: PageQuery = {}): Outcome<ProjectPage> {
    const admitted = this.admitManage(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    const limit = page.limit ?? DEFAULT_PAGE;
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE) {
      return fail('invalid_request', `limit must be an integer from 1 to ${MAX_PAGE}`, {}, rate);
    }
    let after: [number, string] | undefined;
    if (page.cursor !== undefined) {
      after = decodeCursor(page.cursor);
      if (!after) return fail('invalid_request', 'cursor is not one this service gave out; pass next_cursor as it was returned', {}, rate);
    }
    const visible = key.kind === 'admin' ? this.projects.values() : [this.projects.get(key.projectId!)].filter((p) => p !== undefined);
    const projects: ProjectView[] = [];
    let more = false;
    let last: ProjectRecord | undefined;
    for (const p of visible) {
      if (after && !isAfter(p, after)) continue;
      if (projects.length === limit) {
        more = true;
        break;
      }
      projects.push(view(p));
      last = p;
    }
    return { ok: true, value: { projects, next_cursor: more && last ? encodeCursor(last) : null }, rate };
  }

  async createProject(meta: RequestMeta, body: unknown): Promise<Outcome<CreatedProject>> {
    if (this.closing) return fail('unavailable', 'the service is shutting down', { retryAfterSeconds: 1 });
    const admitted = this.admitManage(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    const guard = guardJson(body);
    if (!guard.ok) return fail('invalid_request', guard.message, { details: [{ path: guard.path, message: guard.message }] }, rate);
    const parsed = CreateProjectSchema.safeParse(body);
    if (!parsed.success) {
      const details = parsed.error.issues.map((i) => ({ path: i.path.map(String).join('.'), message: i.message }));
      return fail('invalid_request', 'invalid project', { details }, rate);
    }
    const input = parsed.data;
    // Creation times strictly increase, so (created_at, id) order is Map order and cursors never skip a project.
    const now = Math.max(this.now(), this.lastCreatedAt + 1);
    this.lastCreatedAt = now;
    const project: ProjectRecord = {
      id: generateId('p_'),
      name: input.name ?? 'Untitled project',
      ownerId: key.ownerId,
      allowedOrigins: [...new Set(input.allowed_origins.map(normalizeOrigin))],
      allowedReferrers: [...new Set(input.allowed_referrers.map((h) => h.toLowerCase()))],
      timezone: input.timezone ?? 'UTC',
      monthlyQuota: input.monthly_quota ?? DEFAULT_MONTHLY_QUOTA,
      createdAt: now,
    };
    if (input.tracked_props !== undefined && input.tracked_props.length > 0) project.trackedProps = [...new Set(input.tracked_props)];
    if (input.rate_limit) {
      const r = input.rate_limit;
      project.rate = {};
      if (r.per_key !== undefined) project.rate.perKey = r.per_key;
      if (r.burst_per_key !== undefined) project.rate.burstPerKey = r.burst_per_key;
      if (r.per_ip !== undefined) project.rate.perIp = r.per_ip;
      if (r.burst_per_ip !== undefined) project.rate.burstPerIp = r.burst_per_ip;
    }
    const secret = generateKey('secret');
    const publishable = generateKey('publishable');
    const record = (kind: 'secret' | 'publishable', k: string): KeyRecord => ({
      kind,
      projectId: project.id,
      ownerId: key.ownerId,
      createdAt: now,
      id: generateId('key_'),
      hint: keyHint(k),
    });
    try {
      await this.catalog.putProject(project, [[hashKey(secret), record('secret', secret)], [hashKey(publishable), record('publishable', publishable)]]);
    } catch (err) {
      this.backend.storageOk = false;
      this.log(`project write failed: ${err instanceof Error ? err.message : String(err)}`);
      return fail('unavailable', 'storage is not accepting writes', { retryAfterSeconds: 1 }, rate);
    }
    this.projects.set(project.id, project);
    return { ok: true, value: { project: view(project), keys: { secret, publishable } }, rate };
  }

  async updateProject(meta: RequestMeta, projectId: string, body: unknown): Promise<Outcome<{ project: ProjectView }>> {
    if (this.closing) return fail('unavailable', 'the service is shutting down', { retryAfterSeconds: 1 });
    const gate = this.admitProject(meta, projectId);
    if (!gate.ok) return gate;
    const { project, rate } = gate.value;
    const guard = guardJson(body);
    if (!guard.ok) return fail('invalid_request', guard.message, { details: [{ path: guard.path, message: guard.message }] }, rate);
    if (isRecord(body) && 'timezone' in body) {
      return fail('invalid_request', 'timezone cannot change: past days were counted in it; create a new project instead', {
        details: [{ path: 'timezone', message: 'cannot be changed' }],
      }, rate);
    }
    const parsed = UpdateProjectSchema.safeParse(body);
    if (!parsed.success) return fail('invalid_request', 'invalid project update', { details: zodDetails(parsed.error.issues) }, rate);
    const input = parsed.data;
    const next: ProjectRecord = { ...project };
    if (input.name !== undefined) next.name = input.name;
    if (input.allowed_origins !== undefined) next.allowedOrigins = [...new Set(input.allowed_origins.map(normalizeOrigin))];
    if (input.allowed_referrers !== undefined) next.allowedReferrers = [...new Set(input.allowed_referrers.map((h) => h.toLowerCase()))];
    if (input.monthly_quota !== undefined) next.monthlyQuota = input.monthly_quota;
    if (input.tracked_props !== undefined) next.trackedProps = [...new Set(input.tracked_props)];
    if (input.rate_limit !== undefined) {
      const r = input.rate_limit;
      next.rate = {};
      if (r.per_key !== undefined) next.rate.perKey = r.per_key;
      if (r.burst_per_key !== undefined) next.rate.burstPerKey = r.burst_per_key;
      if (r.per_ip !== undefined) next.rate.perIp = r.per_ip;
      if (r.burst_per_ip !== undefined) next.rate.burstPerIp = r.burst_per_ip;
    }
    const written = await this.write(() => this.catalog.putProject(next, []), rate);
    if (written) return written;
    if (this.projects.has(projectId)) this.projects.set(projectId, next); // a delete may have raced the write
    return { ok: true, value: { project: view(next) }, rate };
  }

  async deleteProject(meta: RequestMeta, projectId: string): Promise<Outcome<{ ok: true }>> {
    if (this.closing) return fail('unavailable', 'the service is shutting down', { retryAfterSeconds: 1 });
    const gate = this.admitProject(meta, projectId);
    if (!gate.ok) return gate;
    const { rate } = gate.value;
    // Gone for every request from here on: its keys answer 401, its metrics 404, nothing more is appended for it.
    this.projects.delete(projectId);
    const removed = await this.write(() => this.catalog.deleteProject(projectId), rate);
    if (removed) return removed;
    const erased = await this.write(() => this.backend.eraseProject(projectId), rate);
    if (erased) return erased;
    return { ok: true, value: { ok: true }, rate };
  }

  listKeys(meta: RequestMeta, projectId: string): Outcome<{ keys: KeyView[] }> {
    const gate = this.admitProject(meta, projectId);
    if (!gate.ok) return gate;
    const keys = this.catalog
      .keys(projectId)
      .sort(([, a], [, b]) => a.createdAt - b.createdAt)
      .map(([hash, record]) => keyView(hash, record));
    return { ok: true, value: { keys }, rate: gate.value.rate };
  }

  async createKey(meta: RequestMeta, projectId: string, body: unknown): Promise<Outcome<CreatedKey>> {
    if (this.closing) return fail('unavailable', 'the service is shutting down', { retryAfterSeconds: 1 });
    const gate = this.admitProject(meta, projectId);
    if (!gate.ok) return gate;
    const { project, rate } = gate.value;
    const parsed = CreateKeySchema.safeParse(body);
    if (!parsed.success) return fail('invalid_request', 'invalid key request', { details: zodDetails(parsed.error.issues) }, rate);
    const now = this.now();
    const record: KeyRecord = { kind: parsed.data.type, projectId: project.id, ownerId: project.ownerId, createdAt: now, id: generateId('key_') };
    if (parsed.data.expires_at !== undefined) {
      const at = Date.parse(parsed.data.expires_at);
      if (at <= now) return fail('invalid_request', 'expires_at must be in the future', { details: [{ path: 'expires_at', message: 'must be in the future' }] }, rate);
      record.expiresAt = at;
    }
    const key = generateKey(parsed.data.type);
    record.hint = keyHint(key);
    const hash = hashKey(key);
    const written = await this.write(() => this.catalog.putKey(hash, record), rate);
    if (written) return written;
    return { ok: true, value: { key, ...keyView(hash, record) }, rate };
  }

  async updateKey(meta: RequestMeta, projectId: string, keyId: string, body: unknown): Promise<Outcome<KeyView>> {
    if (this.closing) return fail('unavailable', 'the service is shutting down', { retryAfterSeconds: 1 });
    const gate = this.admitProject(meta, projectId);
    if (!gate.ok) return gate;
    const { rate } = gate.value;
    const parsed = UpdateKeySchema.safeParse(body);
    if (!parsed.success) return fail('invalid_request', 'invalid key update', { details: zodDetails(parsed.error.issues) }, rate);
    const keys = this.catalog.keys(projectId);
    const found = keys.find(([hash, r]) => keyIdOf(r, hash) === keyId);
    if (!found) return fail('not_found', `no key "${keyId}" in project "${projectId}"`, {}, rate);
    const [hash, record] = found;
    const now = this.now();
    const at = Date.parse(parsed.data.expires_at);
    if (at <= now) return fail('invalid_request', 'expires_at must be in the future', { details: [{ path: 'expires_at', message: 'must be in the future' }] }, rate);
    if (record.kind === 'secret' && !keys.some(([h, r]) => h !== hash && r.kind === 'secret' && (r.expiresAt === undefined || r.expiresAt > at))) {
      return fail('conflict', 'a project keeps at least one secret key: create another one (keys rotate) first', {}, rate);
    }
    const next: KeyRecord = { ...record, expiresAt: at };
    const written = await this.write(() => this.catalog.putKey(hash, next), rate);
    if (written) return written;
    return { ok: true, value: keyView(hash, next), rate };
  }

  async revokeKey(meta: RequestMeta, projectId: string, keyId: string): Promise<Outcome<{ ok: true }>> {
    if (this.closing) return fail('unavailable', 'the service is shutting down', { retryAfterSeconds: 1 });
    const gate = this.admitProject(meta, projectId);
    if (!gate.ok) return gate;
    const { rate } = gate.value;
    const keys = this.catalog.keys(projectId);
    const found = keys.find(([hash, r]) => keyIdOf(r, hash) === keyId);
    if (!found) return fail('not_found', `no key "${keyId}" in project "${projectId}"`, {}, rate);
    const [hash, record] = found;
    const now = this.now();
    if (record.kind === 'secret' && !keys.some(([h, r]) => h !== hash && r.kind === 'secret' && isLive(r, now))) {
      return fail('conflict', 'this is the project\'s last secret key: create another one before revoking it', {}, rate);
    }
    const written = await this.write(() => this.catalog.deleteKey(hash), rate);
    if (written) return written;
    return { ok: true, value: { ok: true }, rate };
  }

  /** Runs a storage write; a failure marks storage unhealthy and becomes 503. */
  private async write(run: () => Promise<unknown>, rate: RateInfo): Promise<Fail | undefined> {
    try {
      await run();
      return undefined;
    } catch (err) {
      this.backend.storageOk = false;
      this.log(`storage write failed: ${err instanceof Error ? err.message : String(err)}`);
      return fail('unavailable', 'storage is not accepting writes', { retryAfterSeconds: 1 }, rate);
    }
  }

  health(): HealthView {
    const h = this.backend.health(this.startedAt);
    const view: HealthView = {
      status: this.closing || !this.backend.storageOk || !h.ready ? 'unavailable' : 'ok',
      version: this.version,
      uptimeSeconds: Math.floor((this.now() - this.startedAt) / 1000),
    };
    if (h.log) view.log = h.log;
    return view;
  }

  // ---------------------------------------------------------------- rules

  private authenticate(meta: RequestMeta): Outcome<Principal> {
    const key = bearerKey(meta.authorization);
    if (key === undefined) {
      if (bearerToken(meta.authorization) !== undefined) return fail('unauthorized', UNKNOWN_KEY, {}, this.unspentRate());
      return fail('unauthorized', 'send Authorization: Bearer <API key>', {}, this.unspentRate());
    }
    const keyHash = hashKey(key);
    const record = this.catalog.key(keyHash);
    if (!record) return fail('unauthorized', UNKNOWN_KEY, {}, this.unspentRate());
    if (!isLive(record, this.now())) return fail('unauthorized', 'the API key has expired', {}, this.unspentRate());
    if (record.projectId !== undefined && !this.projects.has(record.projectId)) {
      return fail('unauthorized', 'the key\'s project was deleted', {}, this.unspentRate());
    }
    return { ok: true, value: { key: record, keyHash } };
  }

  /**
   * Cluster: a key the catalog mirror does not hold may have been made on another node a moment ago: one lookup past
   * the mirror before the 401, under a per-client-IP bucket so unknown keys cannot turn into a flood of lookups.
   * Single node: the catalog is the store, nothing to refresh.
   */
  private async refreshUnknownKey(meta: RequestMeta): Promise<void> {
    const key = bearerKey(meta.authorization);
    if (key === undefined) return;
    const hash = hashKey(key);
    if (this.catalog.key(hash) !== undefined) return;
    const bucket = this.limiter.take(`refresh:${clientBucket(meta.ip)}`, KEY_REFRESH_RATE, KEY_REFRESH_BURST, this.now());
    if (!bucket.allowed) return;
    try {
      await this.catalog.refreshKey(hash);
    } catch (err) {
      this.log(`key lookup failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  /**
   * A 401 has no bucket to report (the caller is nobody), but the contract puts RateLimit-* on every response of an
   * authenticated endpoint: report the default per-key policy, untouched.
   */
  private unspentRate(): RateInfo {
    const burst = this.config.rate.burstPerKey;
    return { limit: burst, remaining: burst, resetSeconds: 0 };
  }

  /**
   * Every gate starts here: a known key, within its limits. Limiting comes before judging scope, so a refused
   * request still costs a token and carries the RateLimit-* headers.
   */
  private admit(meta: RequestMeta): Outcome<{ who: Principal; rate: RateInfo }> {
    const who = this.authenticate(meta);
    if (!who.ok) return who;
    const limited = this.rateLimit(who.value, meta);
    if (!limited.ok) return limited;
    return { ok: true, value: { who: who.value, rate: limited.value } };
  }

  /** The gate of POST /analytics: a project key, within its limits, from an allowed origin. */
  private admitIngest(meta: RequestMeta): Outcome<{ project: ProjectRecord; rate: RateInfo }> {
    const admitted = this.admit(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    if (key.kind === 'admin' || key.projectId === undefined) {
      return fail('forbidden', 'admin keys cannot ingest; use the project\'s sk_ or pk_ key', {}, rate);
    }
    if (key.kind === 'read') return fail('forbidden', 'rk_ keys are read-only; ingest with the sk_ or pk_ key', {}, rate);
    const project = this.projects.get(key.projectId);
    if (!project) return fail('unauthorized', 'the key\'s project no longer exists', {}, rate);
    const scope = this.checkOrigin(project, key, meta, rate);
    if (scope) return scope;
    return { ok: true, value: { project, rate } };
  }

  /** The gate of a read whose project is not known yet (a body that did not parse): any key but pk_. */
  private admitReader(meta: RequestMeta): Outcome<{ who: Principal; rate: RateInfo }> {
    const admitted = this.admit(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    if (key.kind === 'publishable') return fail('forbidden', 'pk_ keys can only ingest; read with the sk_ or rk_ key', {}, rate);
    return admitted;
  }

  /** The gate of GET and POST /projects: an admin or secret key, within its limits, from an allowed origin. */
  private admitManage(meta: RequestMeta): Outcome<{ who: Principal; rate: RateInfo }> {
    const admitted = this.admit(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    if (key.kind === 'publishable') return fail('forbidden', 'pk_ keys can only ingest', {}, rate);
    if (key.kind === 'read') return fail('forbidden', 'rk_ keys can only read metrics', {}, rate);
    const own = key.projectId === undefined ? undefined : this.projects.get(key.projectId);
    if (own) {
      const scope = this.checkOrigin(own, key, meta, rate);
      if (scope) return scope;
    }
    return admitted;
  }

  /** The gate of /projects/{id}[/keys...]: an admin key, or a secret key of that very project. */
  private admitProject(meta: RequestMeta, projectId: string): Outcome<{ project: ProjectRecord; rate: RateInfo }> {
    const admitted = this.admitManage(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    if (key.kind !== 'admin' && key.projectId !== projectId) return fail('forbidden', 'the key belongs to another project', {}, rate);
    const project = this.projects.get(projectId);
    if (!project) return fail('not_found', `no project "${projectId}"`, {}, rate);
    return { ok: true, value: { project, rate } };
  }

  /**
   * A request the face refused on the wire (unsupported type, body too large, bad JSON). The caller still passes the
   * endpoint's gate first: a bad key answers 401 before a bad body, and every authenticated answer costs a token and
   * carries RateLimit-* headers, whatever was wrong with the body.
   */
  refuse(meta: RequestMeta, endpoint: Gate, error: EngineError): Fail {
    if (this.closing) return fail('unavailable', 'the service is shutting down', { retryAfterSeconds: 1 });
    const admitted = endpoint === 'ingest' ? this.admitIngest(meta) : endpoint === 'read' ? this.admitReader(meta) : this.admitManage(meta);
    if (!admitted.ok) return admitted;
    return fail(error.code, error.message, error, admitted.value.rate);
  }

  identify(meta: RequestMeta): Outcome<KeyIdentity> {
    const who = this.authenticate(meta);
    if (!who.ok) return who;
    return { ok: true, value: { kind: who.value.key.kind, projectId: who.value.key.projectId } };
  }

  /** Origin and Referer rules of the project (undefined = allowed). */
  private checkOrigin(project: ProjectRecord, key: KeyRecord, meta: RequestMeta, rate: RateInfo): Fail | undefined {
    if (project.allowedOrigins.length > 0) {
      if (meta.origin === undefined) {
        if (key.kind === 'publishable') return fail('forbidden', 'this project only accepts pk_ requests from its allowed origins', {}, rate);
      } else if (!project.allowedOrigins.includes(safeOrigin(meta.origin))) {
        return fail('forbidden', `origin ${meta.origin} is not allowed for this project`, {}, rate);
      }
    }
    if (project.allowedReferrers.length > 0 && meta.referer !== undefined) {
      const host = safeHost(meta.referer);
      if (host === undefined || !project.allowedReferrers.includes(host)) {
        return fail('forbidden', 'the Referer host is not allowed for this project', {}, rate);
      }
    }
    return undefined;
  }

  /**
   * One token from the key's bucket and, for pk_ keys, from the client IP's bucket in the key's project. The buckets
   * belong to the key, so their sizes are its own project's (admin keys: the service defaults), whatever the
   * request names.
   */
  private rateLimit(who: Principal, meta: RequestMeta): Outcome<RateInfo> {
    const d = this.config.rate;
    const project = who.key.projectId === undefined ? undefined : this.projects.get(who.key.projectId);
    const r = project?.rate;
    const now = this.now();
    // Cluster: each node takes its share of every bucket (CLUSTER.md §8); one node: the whole bucket.
    const share = this.backend.rateShare();
    const take = (key: string, rate: number, burst: number) => this.limiter.take(key, share === 1 ? rate : rate / share, share === 1 ? burst : Math.ceil(burst / share), now);
    const byKey = take(`k:${who.keyHash}`, r?.perKey ?? d.perKey, r?.burstPerKey ?? d.burstPerKey);
    if (!byKey.allowed) {
      return fail('rate_limited', 'too many requests for this key', { retryAfterSeconds: byKey.retryAfterSeconds }, byKey.info);
    }
    if (who.key.kind === 'publishable' && project) {
      const byIp = take(`i:${project.id}:${clientBucket(meta.ip)}`, r?.perIp ?? d.perIp, r?.burstPerIp ?? d.burstPerIp);
      if (!byIp.allowed) {
        return fail('rate_limited', 'too many requests from this client', { retryAfterSeconds: byIp.retryAfterSeconds }, byIp.info);
      }
      return { ok: true, value: byIp.info.remaining < byKey.info.remaining ? byIp.info : byKey.info };
    }
    return { ok: true, value: byKey.info };
  }

  // ---------------------------------------------------------------- lifecycle

  private startTimers(): void {
    const every = (ms: number, fn: () => void | Promise<void>) => {
      const t = setInterval(() => void Promise.resolve(fn()).catch((e: unknown) => this.log(`timer: ${String(e)}`)), ms);
      t.unref();
      this.timers.push(t);
    };
    this.backend.startTimers(every);
    every(SALT_CHECK_EVERY_MS, () => this.backend.enricher.rotateSalts(this.now()));
  }

  /** Stop taking writes (health turns 503); in-flight requests still finish. */
  beginShutdown(): void {
    this.closing = true;
  }

  /** Waits for in-flight writes, writes a final snapshot and closes LMDB. */
  async close(): Promise<void> {
    this.closing = true;
    for (const t of this.timers) clearInterval(t);
    await this.backend.close();
  }

  /** For operator metrics: what is held, read at scrape time. */
  stats(): { projects: number; liveDays: number; sealedDays: number } {
    return { projects: this.projects.size, ...this.backend.stats() };
  }

  /** Single node: see LmdbBackend.applyRetention (ANALYTICS_LOG_RETENTION_DAYS); returns records removed. */
  async applyRetention(): Promise<number> {
    return this.backend.applyRetention();
  }

  /** For tests and benches: wait until every day handed over for sealing is written. */
  async sealingIdle(): Promise<void> {
    await this.backend.sealingIdle();
  }

  /** For tests and benches: write a snapshot now. */
  async snapshotNow(): Promise<void> {
    await this.backend.snapshotNow();
  }
}

/** A Bearer token that names no live key: cut short, mistyped, revoked or never issued (the caller did send one). */
const UNKNOWN_KEY = 'unknown or revoked API key (check it was copied whole; a revoked key stays refused)';

/** The 429 of a used-up allowance names the setting and both ways to raise it. */
function quotaMessage(projectId: string, quota: number, used: number): string {
  return (
    `the project's monthly_quota of ${quota} events is used up (${used} stored this month; it resets at the start of ` +
    `the next UTC month). Raise it with PATCH /projects/${projectId} {"monthly_quota": N} (0 means unlimited) or ` +
    `npx analytics projects update ${projectId} --quota N`
  );
}

function byCreation(a: ProjectRecord, b: ProjectRecord): number {
  return a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

function view(p: ProjectRecord): ProjectView {
  return {
    id: p.id,
    name: p.name,
    allowed_origins: p.allowedOrigins,
    allowed_referrers: p.allowedReferrers,
    timezone: p.timezone,
    monthly_quota: p.monthlyQuota,
    created_at: new Date(p.createdAt).toISOString(),
    tracked_props: p.trackedProps ?? [],
  };
}

function safeOrigin(s: string): string {
  try {
    return new URL(s).origin;
  } catch {
    return s;
  }
}

function safeHost(s: string): string | undefined {
  try {
    return new URL(s).hostname.toLowerCase();
  } catch {
    return undefined;
  }
}
