import { existsSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Config } from '../config.ts';
import { dayOf, nextUtcMonthStart } from '../core/dates.ts';
import { parseEvent } from '../core/event-schema.ts';
import { guardJson } from '../core/json-guard.ts';
import { MAX_BATCH_EVENTS, MAX_EVENT_BYTES } from '../core/limits.ts';
import { metrics, resolveRange } from '../core/metrics.ts';
import { normalizeEvent } from '../core/normalize.ts';
import { isDuplicate, pruneSeenEventIds, storedThisMonth, type AnalyticsState } from '../core/state.ts';
import type { LogRecord, MetricsResponse } from '../core/types.ts';
import { classifySource, createEnricher, type ClientFacts, type Enricher } from '../enrich/index.ts';
import { LogStore, type KeyRecord, type ProjectRecord } from '../store/log-store.ts';
import { SnapshotFiles } from '../store/snapshot-files.ts';
import { bearerKey, generateId, generateKey, hashKey, keyHint } from './keys.ts';
import { CreateProjectSchema, normalizeOrigin } from './project-input.ts';
import { clientBucket, RateLimiter } from './rate-limiter.ts';
import { recoverState } from './recovery.ts';
import { Snapshotter } from './snapshotter.ts';
import { failure as fail, type Failure as Fail } from './types.ts';
import type {
  AnalyticsEngine,
  CreatedProject,
  EngineError,
  ErrorDetail,
  HealthView,
  IngestAck,
  KeyIdentity,
  MetricsQuery,
  Outcome,
  ProjectView,
  RateInfo,
  RequestMeta,
} from './types.ts';

/** CONTRACT: default monthly allowance per project. */
const DEFAULT_MONTHLY_QUOTA = 100_000;
/** Prune remembered eventIds this often; they expire after 48 h, so hourly keeps at most ~49 h of them. */
const PRUNE_EVERY_MS = 3_600_000;
/** Re-check that storage accepts writes this often while idle (health). */
const HEALTH_PROBE_EVERY_MS = 10_000;
/** Salts rotate at midnight UTC; checking each minute keeps the rotation within a minute of it. */
const SALT_CHECK_EVERY_MS = 60_000;

interface Principal {
  key: KeyRecord;
  keyHash: string;
}

export interface EngineOptions {
  config: Readonly<Config>;
  version: string;
  /** the clock; injected so tests can move time */
  now?: () => number;
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
  /** eventIds appended but not yet folded, so two concurrent requests cannot both store the same id */
  private readonly pendingIds = new Map<string, Set<string>>();
  /** events appended but not yet folded, per project (the quota must see them) */
  private readonly pendingCounts = new Map<string, number>();
  /** folds run in append (= sequence) order */
  private foldTail: Promise<void> = Promise.resolve();
  private storageOk = true;
  private closing = false;
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly startedAt: number;
  readonly now: () => number;
  private readonly log: (line: string) => void;

  private constructor(
    private readonly config: Readonly<Config>,
    private readonly version: string,
    private readonly store: LogStore,
    private readonly state: AnalyticsState,
    private readonly enricher: Enricher,
    private readonly snapshotter: Snapshotter,
    now: () => number,
    log: (line: string) => void,
  ) {
    this.now = now;
    this.log = log;
    this.startedAt = now();
    for (const p of store.listProjects()) this.projects.set(p.id, p);
  }

  static async open(opts: EngineOptions): Promise<Engine> {
    const now = opts.now ?? Date.now;
    const log = opts.log ?? ((line: string) => console.log(line));
    const store = LogStore.open(opts.config.dataDir, opts.config.durability);
    const files = new SnapshotFiles(opts.config.dataDir);
    const state = recoverState(store, files, log);
    const enricher = await createEnricher({
      geoDbPath: opts.config.geoDbPath,
      salts: { load: async () => store.loadSalts(), save: (s) => store.saveSalts(s) },
      now: now(),
    });
    const snapshotter = new Snapshotter(state, files, opts.config.snapshotEveryEvents, log);
    const engine = new Engine(opts.config, opts.version, store, state, enricher, snapshotter, now, log);
    await engine.bootstrapAdminKey();
    engine.startTimers();
    return engine;
  }

  // ---------------------------------------------------------------- ingest

  async ingest(meta: RequestMeta, events: unknown[]): Promise<Outcome<IngestAck>> {
    if (this.closing) return fail('unavailable', 'the service is shutting down', { retryAfterSeconds: 1 });
    const admitted = this.admitIngest(meta);
    if (!admitted.ok) return admitted;
    const { project, rate } = admitted.value;

    if (events.length === 0) return fail('invalid_request', 'the batch is empty: send 1 to 500 events', {}, rate);
    if (events.length > MAX_BATCH_EVENTS) {
      return fail('payload_too_large', `a batch holds at most ${MAX_BATCH_EVENTS} events (got ${events.length})`, {}, rate);
    }

    const now = this.now();
    const client: ClientFacts = { ip: meta.ip, userAgent: meta.userAgent };
    const facts = this.enricher.classify(client);
    // Facts of the request, not of an event: worked out once per batch.
    const botDay = facts.bot ? dayOf(now, project.timezone) : '';
    const context: Record<string, string> = {};
    if (facts.browser) context.browser = facts.browser;
    if (facts.os) context.os = facts.os;
    const details: ErrorDetail[] = [];
    const records: LogRecord[] = [];
    const batchIds = new Set<string>();
    const pending = this.pendingIds.get(project.id);
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
      const sessionId = input.sessionId ?? this.enricher.anonymousSessionId(project.id, client, now);
      const normalized = normalizeEvent(input, {
        projectId: project.id,
        timezone: project.timezone,
        now,
        source,
        referrer,
        sessionId,
        device: facts.device,
        country: facts.country,
        context,
      });
      if (!normalized.ok) {
        details.push({ index, path: normalized.path, message: normalized.message });
        continue;
      }
      if (details.length > 0) continue; // the batch is refused anyway: keep listing problems, store nothing
      const id = normalized.event.eventId;
      if (id !== undefined) {
        // A repeat is acknowledged again but stored once: already folded, in flight, or earlier in this batch.
        if (batchIds.has(id) || pending?.has(id) || isDuplicate(this.state, project.id, id, now)) continue;
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
      const used = storedThisMonth(this.state, project.id, now) + (this.pendingCounts.get(project.id) ?? 0);
      if (used + stored > quota) {
        const reset = nextUtcMonthStart(now);
        return fail('quota_exceeded', `the monthly allowance of ${quota} events is used up (${used} stored this month)`, {
          retryAfterSeconds: Math.max(1, Math.ceil((reset - now) / 1000)),
        }, rate);
      }
    }

    if (records.length > 0) {
      const appended = await this.appendAndFold(project.id, records, batchIds, stored);
      if (!appended) return fail('unavailable', 'storage is not accepting writes; nothing was stored', { retryAfterSeconds: 1 }, rate);
    }
    return { ok: true, value: { ts: now, accepted: events.length }, rate };
  }

  private async appendAndFold(projectId: string, records: LogRecord[], ids: Set<string>, stored: number): Promise<boolean> {
    let pending = this.pendingIds.get(projectId);
    if (!pending) this.pendingIds.set(projectId, (pending = new Set()));
    for (const id of ids) pending.add(id);
    this.pendingCounts.set(projectId, (this.pendingCounts.get(projectId) ?? 0) + stored);

    const appended = this.store.append(records);
    let ok = false;
    const folded = this.foldTail.then(async () => {
      try {
        const first = await appended;
        this.snapshotter.fold(first, records);
        this.storageOk = true;
        ok = true;
      } catch (err) {
        this.storageOk = false;
        this.log(`append failed: ${err instanceof Error ? err.message : String(err)}`);
      } finally {
        for (const id of ids) pending.delete(id);
        this.pendingCounts.set(projectId, (this.pendingCounts.get(projectId) ?? 0) - stored);
      }
    });
    this.foldTail = folded;
    await folded;
    return ok;
  }

  // ---------------------------------------------------------------- reads

  metrics(meta: RequestMeta, query: MetricsQuery): Outcome<MetricsResponse> {
    const admitted = this.admit(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    if (key.kind === 'publishable') return fail('forbidden', 'pk_ keys can only ingest; read metrics with the sk_ key', {}, rate);
    let projectId: string;
    if (key.kind === 'admin') {
      if (!query.projectId) return fail('invalid_request', 'admin keys must name the project: ?projectId=...', {}, rate);
      projectId = query.projectId;
    } else {
      if (query.projectId !== undefined && query.projectId !== key.projectId) {
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
    const range = resolveRange(query, dayOf(this.now(), project.timezone));
    if (!range.ok) return fail('invalid_request', range.message, {}, rate);
    return { ok: true, value: metrics(this.state, project.id, project.timezone, range.from, range.to), rate };
  }

  listProjects(meta: RequestMeta): Outcome<{ projects: ProjectView[] }> {
    const admitted = this.admitManage(meta);
    if (!admitted.ok) return admitted;
    const { key } = admitted.value.who;
    const visible = key.kind === 'admin' ? [...this.projects.values()] : [this.projects.get(key.projectId!)].filter((p) => p !== undefined);
    return { ok: true, value: { projects: visible.map(view) }, rate: admitted.value.rate };
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
    const now = this.now();
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
    const record = (kind: 'secret' | 'publishable'): KeyRecord => ({ kind, projectId: project.id, ownerId: key.ownerId, createdAt: now });
    try {
      await this.store.putProject(project, [[hashKey(secret), record('secret')], [hashKey(publishable), record('publishable')]]);
    } catch (err) {
      this.storageOk = false;
      this.log(`project write failed: ${err instanceof Error ? err.message : String(err)}`);
      return fail('unavailable', 'storage is not accepting writes', { retryAfterSeconds: 1 }, rate);
    }
    this.projects.set(project.id, project);
    return { ok: true, value: { project: view(project), keys: { secret, publishable } }, rate };
  }

  health(): HealthView {
    return {
      status: this.closing || !this.storageOk ? 'unavailable' : 'ok',
      version: this.version,
      uptimeSeconds: Math.floor((this.now() - this.startedAt) / 1000),
    };
  }

  // ---------------------------------------------------------------- rules

  private authenticate(meta: RequestMeta): Outcome<Principal> {
    const key = bearerKey(meta.authorization);
    if (key === undefined) return fail('unauthorized', 'send Authorization: Bearer <API key>', {}, this.unspentRate());
    const keyHash = hashKey(key);
    const record = this.store.getKey(keyHash);
    if (!record) return fail('unauthorized', 'unknown or revoked API key', {}, this.unspentRate());
    return { ok: true, value: { key: record, keyHash } };
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
    const project = this.projects.get(key.projectId);
    if (!project) return fail('unauthorized', 'the key\'s project no longer exists', {}, rate);
    const scope = this.checkOrigin(project, key, meta, rate);
    if (scope) return scope;
    return { ok: true, value: { project, rate } };
  }

  /** The gate of GET and POST /projects: an admin or secret key, within its limits, from an allowed origin. */
  private admitManage(meta: RequestMeta): Outcome<{ who: Principal; rate: RateInfo }> {
    const admitted = this.admit(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    if (key.kind === 'publishable') return fail('forbidden', 'pk_ keys can only ingest', {}, rate);
    const own = key.projectId === undefined ? undefined : this.projects.get(key.projectId);
    if (own) {
      const scope = this.checkOrigin(own, key, meta, rate);
      if (scope) return scope;
    }
    return admitted;
  }

  /**
   * A request the face refused on the wire (unsupported type, body too large, bad JSON). The caller still passes the
   * endpoint's gate first: a bad key answers 401 before a bad body, and every authenticated answer costs a token and
   * carries RateLimit-* headers, whatever was wrong with the body.
   */
  refuse(meta: RequestMeta, endpoint: 'ingest' | 'manage', error: EngineError): Fail {
    if (this.closing) return fail('unavailable', 'the service is shutting down', { retryAfterSeconds: 1 });
    const admitted = endpoint === 'ingest' ? this.admitIngest(meta) : this.admitManage(meta);
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
    const byKey = this.limiter.take(`k:${who.keyHash}`, r?.perKey ?? d.perKey, r?.burstPerKey ?? d.burstPerKey, now);
    if (!byKey.allowed) {
      return fail('rate_limited', 'too many requests for this key', { retryAfterSeconds: byKey.retryAfterSeconds }, byKey.info);
    }
    if (who.key.kind === 'publishable' && project) {
      const byIp = this.limiter.take(`i:${project.id}:${clientBucket(meta.ip)}`, r?.perIp ?? d.perIp, r?.burstPerIp ?? d.burstPerIp, now);
      if (!byIp.allowed) {
        return fail('rate_limited', 'too many requests from this client', { retryAfterSeconds: byIp.retryAfterSeconds }, byIp.info);
      }
      return { ok: true, value: byIp.info.remaining < byKey.info.remaining ? byIp.info : byKey.info };
    }
    return { ok: true, value: byKey.info };
  }

  // ---------------------------------------------------------------- lifecycle

  private async bootstrapAdminKey(): Promise<void> {
    const configured = this.config.adminKey;
    const record: KeyRecord = { kind: 'admin', ownerId: 'o_admin', createdAt: this.now() };
    if (configured !== undefined) {
      // A configured key is the only admin key: a generated or earlier configured one stops working (rotation).
      await this.store.replaceAdminKeys(hashKey(configured), this.store.getKey(hashKey(configured)) ?? record);
      this.log(`admin key: from ANALYTICS_ADMIN_KEY (${keyHint(configured)}); any other admin key is revoked`);
      // A generated key left in its file would now answer 401: remove it rather than let someone try it.
      const file = path.join(this.config.dataDir, 'admin.key');
      if (existsSync(file) && readFileSync(file, 'utf8').trim() !== configured) {
        unlinkSync(file);
        this.log(`removed ${file}: its key is revoked`);
      }
      return;
    }
    if (this.store.hasAdminKey()) return;
    const key = generateKey('admin');
    const file = path.join(this.config.dataDir, 'admin.key');
    writeFileSync(file, `${key}\n`, { mode: 0o600 });
    await this.store.putKey(hashKey(key), record);
    await this.store.putMeta('admin_key_created', true);
    // Never the key itself: logs are read by more people than the data directory.
    this.log(`admin key generated and written to ${file} (${keyHint(key)})`);
  }

  private startTimers(): void {
    const every = (ms: number, fn: () => void | Promise<void>) => {
      const t = setInterval(() => void Promise.resolve(fn()).catch((e: unknown) => this.log(`timer: ${String(e)}`)), ms);
      t.unref();
      this.timers.push(t);
    };
    every(this.config.snapshotIntervalMs, () => this.snapshotter.snapshotIfChanged());
    every(PRUNE_EVERY_MS, () => void pruneSeenEventIds(this.state, this.now()));
    every(SALT_CHECK_EVERY_MS, () => this.enricher.rotateSalts(this.now()));
    every(HEALTH_PROBE_EVERY_MS, async () => {
      try {
        await this.store.probeWrite(this.now());
        this.storageOk = true;
      } catch {
        this.storageOk = false;
      }
    });
  }

  /** Stop taking writes (health turns 503); in-flight requests still finish. */
  beginShutdown(): void {
    this.closing = true;
  }

  /** Waits for in-flight writes, writes a final snapshot and closes LMDB. */
  async close(): Promise<void> {
    this.closing = true;
    for (const t of this.timers) clearInterval(t);
    await this.foldTail;
    await this.snapshotter.snapshotIfChanged();
    await this.snapshotter.idle();
    await this.store.close();
  }

  /** For tests and benches: write a snapshot now. */
  async snapshotNow(): Promise<void> {
    await this.snapshotter.snapshot();
  }
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
