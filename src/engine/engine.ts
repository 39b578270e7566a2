import { existsSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Config } from '../config.ts';
import { dayOf, nextUtcMonthStart } from '../core/dates.ts';
import { parseEvent } from '../core/event-schema.ts';
import { guardJson } from '../core/json-guard.ts';
import { MAX_BATCH_EVENTS, MAX_EVENT_BYTES, REALTIME_MINUTES } from '../core/limits.ts';
import type { SealedSource } from '../core/day-view.ts';
import { compareRange, isCompareMode, metrics, resolveRange } from '../core/metrics.ts';
import { sealedSource } from '../core/sealed-source.ts';
import { normalizeEvent } from '../core/normalize.ts';
import { collectSealable, sealAt, storedThisMonth, type AnalyticsState } from '../core/state.ts';
import type { LogRecord, MetricsResponse, RealtimeResponse } from '../core/types.ts';
import { classifySource, createEnricher, type ClientFacts, type Enricher } from '../enrich/index.ts';
import { LogStore, type KeyRecord, type ProjectRecord } from '../store/log-store.ts';
import type { RememberedIds } from '../store/remembered-ids.ts';
import type { SealedStore } from '../store/sealed-store.ts';
import { SnapshotFiles } from '../store/snapshot-files.ts';
import { bearerKey, generateId, generateKey, hashKey, keyHint, keyIdOf } from './keys.ts';
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
import { recoverState } from './recovery.ts';
import type { OperatorMetrics } from './operator-metrics.ts';
import { Sealer } from './sealer.ts';
import { Snapshotter } from './snapshotter.ts';
import { failure as fail, type Failure as Fail } from './types.ts';
import type {
  AnalyticsEngine,
  CreatedKey,
  CreatedProject,
  EngineError,
  ErrorDetail,
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
/** Prune remembered eventIds this often; they expire after 48 h, so hourly keeps at most ~49 h of them. */
const PRUNE_EVERY_MS = 3_600_000;
/** Records examined per retention slice before yielding to requests. */
const RETENTION_SLICE = 10_000;
const DAY_MS = 86_400_000;
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
  /** operator metrics (METRICS_PORT); absent = not collected */
  ops?: OperatorMetrics | undefined;
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
  /** creation time of the newest project (creation times strictly increase) */
  private lastCreatedAt = 0;
  private closing = false;
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly startedAt: number;
  readonly now: () => number;
  private readonly log: (line: string) => void;
  private ops: OperatorMetrics | undefined;
  private readonly sealer: Sealer;
  private readonly sealed: SealedSource;
  private readonly sealedStore: SealedStore;
  private readonly ids: RememberedIds;

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
    // Map order is creation order: GET /projects pages through it.
    const all = store.listProjects().sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    for (const p of all) this.projects.set(p.id, p);
    this.lastCreatedAt = all.at(-1)?.createdAt ?? 0;
    // State of a project deleted before its erasure finished (a crash): drop it, and every snapshot still holding it.
    for (const id of [...state.projects.keys()]) {
      if (!this.projects.has(id)) {
        state.projects.delete(id);
        snapshotter.purgePending = true;
      }
    }
    this.ids = store.openRememberedIds();
    void this.ids.start(now()).catch((err: unknown) => log(`loading remembered eventIds failed: ${err instanceof Error ? err.message : String(err)}`));
    this.sealedStore = store.openSealedStore();
    this.sealed = sealedSource(this.sealedStore);
    this.sealer = new Sealer(state, this.sealedStore, log);
    // Days whose window closed before the snapshot or during the replay are sealed now, in the background.
    collectSealable(state);
    this.sealer.kick();
    void this.snapshotter.prewarm().catch((err: unknown) => log(`snapshot warm-up failed: ${err instanceof Error ? err.message : String(err)}`));
  }

  static async open(opts: EngineOptions): Promise<Engine> {
    const now = opts.now ?? Date.now;
    const log = opts.log ?? ((line: string) => console.log(line));
    const store = LogStore.open(opts.config.dataDir, opts.config.durability, { log });
    const files = new SnapshotFiles(opts.config.dataDir);
    const state = recoverState(store, files, log);
    const enricher = await createEnricher({
      geoDbPath: opts.config.geoDbPath,
      salts: { load: async () => store.loadSalts(), save: (s) => store.saveSalts(s) },
      now: now(),
    });
    const ops = opts.ops;
    const snapshotter = new Snapshotter(state, files, opts.config.snapshotEveryEvents, log, ops ? (s, b) => ops.snapshot(s, b) : undefined);
    const engine = new Engine(opts.config, opts.version, store, state, enricher, snapshotter, now, log);
    if (ops) {
      engine.ops = ops;
      ops.observeState(() => engine.stats());
    }
    await engine.bootstrapAdminKey();
    // A delete interrupted by a crash: its project and keys are gone, its events not yet. Finish before serving.
    for (const id of store.pendingErasures()) await engine.eraseProject(id);
    engine.startTimers();
    return engine;
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
    const admitted = this.admitIngest(meta);
    if (!admitted.ok) return admitted;
    const { project, rate } = admitted.value;

    if (events.length === 0) return fail('invalid_request', 'the batch is empty: send 1 to 500 events', {}, rate);
    if (events.length > MAX_BATCH_EVENTS) {
      return fail('payload_too_large', `a batch holds at most ${MAX_BATCH_EVENTS} events (got ${events.length})`, {}, rate);
    }

    // After a project deletion the store compacts and swaps its file; the eventId check below may read LMDB.
    await this.store.settled();
    const now = this.now();
    const client: ClientFacts = { ip: meta.ip, userAgent: meta.userAgent };
    const facts = this.enricher.classify(client);
    // Facts of the request, not of an event: worked out once per batch.
    const botDay = facts.bot ? dayOf(now, project.timezone) : '';
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
        if (batchIds.has(id) || pending?.has(id) || this.ids.has(project.id, id, now)) continue;
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
    const bots = facts.bot ? records.length : 0;
    const counts = { stored, bot: bots, duplicate: events.length - stored - bots };
    return { ok: true, value: { ts: now, accepted: events.length, counts }, rate };
  }

  private async appendAndFold(projectId: string, records: LogRecord[], ids: Set<string>, stored: number): Promise<boolean> {
    let pending = this.pendingIds.get(projectId);
    if (!pending) this.pendingIds.set(projectId, (pending = new Set()));
    for (const id of ids) pending.add(id);
    this.pendingCounts.set(projectId, (this.pendingCounts.get(projectId) ?? 0) + stored);

    const appendStarted = performance.now();
    // The ids are written in the append's own transaction: durable exactly when their events are.
    const appended = this.store.append(records, () => this.ids.writeWith(records));
    let ok = false;
    const folded = this.foldTail.then(async () => {
      try {
        const first = await appended;
        if (this.ops) this.ops.commitSeconds((performance.now() - appendStarted) / 1000);
        for (const r of records) if (r.t === 'e' && r.eventId !== undefined) this.ids.remember(r.p, r.eventId, r.rt);
        this.snapshotter.fold(first, records);
        this.sealer.kick();
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
    const admitted = this.admitRead(meta, query.projectId);
    if (!admitted.ok) return admitted;
    const { project, rate } = admitted.value;
    const range = resolveRange(query, dayOf(this.now(), project.timezone));
    if (!range.ok) return fail('invalid_request', range.message, {}, rate);
    if (query.compare !== undefined && !isCompareMode(query.compare)) {
      return fail('invalid_request', '`compare` must be "previous" or "year"', {}, rate);
    }
    const compare = query.compare === undefined ? undefined : compareRange(query.compare, range.from, range.to);
    if (!this.store.readable()) {
      return fail('unavailable', 'storage is swapping in its compacted file after a project deletion; retry in a moment', { retryAfterSeconds: 1 }, rate);
    }
    const value = metrics(this.state, project.id, project.timezone, range.from, range.to, { trackedProps: project.trackedProps, compare, sealed: this.sealed });
    return { ok: true, value, rate };
  }

  /** The last 30 minutes of the project, by receive time, as of the engine clock. */
  realtime(meta: RequestMeta, query: RealtimeQuery): Outcome<RealtimeResponse> {
    const admitted = this.admitRead(meta, query.projectId);
    if (!admitted.ok) return admitted;
    const { project, rate } = admitted.value;
    const figures = this.state.projects.get(project.id)?.realtime.read(this.now());
    const value: RealtimeResponse = {
      projectId: project.id,
      visitors: figures?.visitors ?? 0,
      pageviews: figures?.pageviews ?? 0,
      perMinute: figures?.perMinute ?? new Array<number>(REALTIME_MINUTES).fill(0),
      pages: figures?.pages ?? {},
      sources: figures?.sources ?? {},
    };
    return { ok: true, value, rate };
  }

  /** The gate of the reads: an sk_ key for its own project, or an admin key naming one, from an allowed origin. */
  private admitRead(meta: RequestMeta, requested: string | undefined): Outcome<{ project: ProjectRecord; rate: RateInfo }> {
    const admitted = this.admit(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    if (key.kind === 'publishable') return fail('forbidden', 'pk_ keys can only ingest; read metrics with the sk_ or rk_ key', {}, rate);
    let projectId: string;
    if (key.kind === 'admin') {
      if (!requested) return fail('invalid_request', 'admin keys must name the project: ?projectId=...', {}, rate);
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
      await this.store.putProject(project, [[hashKey(secret), record('secret', secret)], [hashKey(publishable), record('publishable', publishable)]]);
    } catch (err) {
      this.storageOk = false;
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
    const written = await this.write(() => this.store.updateProject(next), rate);
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
    const removed = await this.write(() => this.store.deleteProject(projectId), rate);
    if (removed) return removed;
    await this.foldTail; // batches appended before the delete are folded (and so erased below)
    const erased = await this.write(() => this.eraseProject(projectId), rate);
    if (erased) return erased;
    return { ok: true, value: { ok: true }, rate };
  }

  /** Erases a deleted project's events from the log, its state, and every snapshot file. */
  private async eraseProject(projectId: string): Promise<void> {
    // Its live state goes first, and no day of it is left queued or being written by the sealer, so nothing of it
    // is sealed again after the store has erased its sealed days, month rollups and remembered eventIds.
    this.state.projects.delete(projectId);
    this.state.sealQueue = this.state.sealQueue.filter((r) => r.projectId !== projectId);
    await this.sealer.idle();
    const n = await this.store.eraseProjectEvents(projectId);
    this.state.projects.delete(projectId);
    this.pendingIds.delete(projectId);
    this.pendingCounts.delete(projectId);
    // The snapshots on disk still hold the project's aggregates: replace them all with one without it.
    await this.snapshotter.snapshot({ replaceAll: true });
    this.log(`project ${projectId} deleted; ${n} log records erased`);
  }

  listKeys(meta: RequestMeta, projectId: string): Outcome<{ keys: KeyView[] }> {
    const gate = this.admitProject(meta, projectId);
    if (!gate.ok) return gate;
    const keys = this.store
      .listKeys(projectId)
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
    const written = await this.write(() => this.store.putKey(hash, record), rate);
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
    const keys = this.store.listKeys(projectId);
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
    const written = await this.write(() => this.store.putKey(hash, next), rate);
    if (written) return written;
    return { ok: true, value: keyView(hash, next), rate };
  }

  async revokeKey(meta: RequestMeta, projectId: string, keyId: string): Promise<Outcome<{ ok: true }>> {
    if (this.closing) return fail('unavailable', 'the service is shutting down', { retryAfterSeconds: 1 });
    const gate = this.admitProject(meta, projectId);
    if (!gate.ok) return gate;
    const { rate } = gate.value;
    const keys = this.store.listKeys(projectId);
    const found = keys.find(([hash, r]) => keyIdOf(r, hash) === keyId);
    if (!found) return fail('not_found', `no key "${keyId}" in project "${projectId}"`, {}, rate);
    const [hash, record] = found;
    const now = this.now();
    if (record.kind === 'secret' && !keys.some(([h, r]) => h !== hash && r.kind === 'secret' && isLive(r, now))) {
      return fail('conflict', 'this is the project\'s last secret key: create another one before revoking it', {}, rate);
    }
    const written = await this.write(() => this.store.deleteKey(hash), rate);
    if (written) return written;
    return { ok: true, value: { ok: true }, rate };
  }

  /** Runs a storage write; a failure marks storage unhealthy and becomes 503. */
  private async write(run: () => Promise<unknown>, rate: RateInfo): Promise<Fail | undefined> {
    try {
      await run();
      return undefined;
    } catch (err) {
      this.storageOk = false;
      this.log(`storage write failed: ${err instanceof Error ? err.message : String(err)}`);
      return fail('unavailable', 'storage is not accepting writes', { retryAfterSeconds: 1 }, rate);
    }
  }

  health(): HealthView {
    return {
      status: this.closing || !this.storageOk ? 'unavailable' : 'ok',
      version: this.version,
      uptimeSeconds: Math.floor((this.now() - this.startedAt) / 1000),
      log: { lastSeq: this.store.lastSeq(), verifiedRecords: this.store.verified, verifiedAt: new Date(this.startedAt).toISOString(), ok: true },
    };
  }

  // ---------------------------------------------------------------- rules

  private authenticate(meta: RequestMeta): Outcome<Principal> {
    const key = bearerKey(meta.authorization);
    if (key === undefined) return fail('unauthorized', 'send Authorization: Bearer <API key>', {}, this.unspentRate());
    const keyHash = hashKey(key);
    const record = this.store.getKey(keyHash);
    if (!record) return fail('unauthorized', 'unknown or revoked API key', {}, this.unspentRate());
    if (!isLive(record, this.now())) return fail('unauthorized', 'the API key has expired', {}, this.unspentRate());
    if (record.projectId !== undefined && !this.projects.has(record.projectId)) {
      return fail('unauthorized', 'the key\'s project was deleted', {}, this.unspentRate());
    }
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
    if (key.kind === 'read') return fail('forbidden', 'rk_ keys are read-only; ingest with the sk_ or pk_ key', {}, rate);
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
    every(PRUNE_EVERY_MS, async () => {
      await this.ids.expire(this.now());
      await this.applyRetention();
    });
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
    await this.sealer.idle();
    await this.snapshotter.snapshotIfChanged();
    await this.snapshotter.close();
    await this.ids.stop();
    await this.store.close();
  }

  /** For operator metrics: what is held, read at scrape time. */
  stats(): { projects: number; liveDays: number; sealedDays: number } {
    let liveDays = 0;
    for (const p of this.state.projects.values()) liveDays += p.days.size;
    return { projects: this.projects.size, liveDays, sealedDays: this.sealedStore.dayCount() };
  }

  /**
   * ANALYTICS_LOG_RETENTION_DAYS: removes the oldest log records while each was received before the retention and
   * belongs to a sealed day (its aggregates are in the sealed store, so nothing read changes), never past the oldest
   * snapshot kept (a restart replays the log after it). The log stays a contiguous suffix; returns records removed.
   */
  async applyRetention(): Promise<number> {
    const days = this.config.logRetentionDays;
    if (days === undefined) return 0;
    const cutoff = this.now() - days * DAY_MS;
    const limit = this.snapshotter.oldestKeptSeq();
    let keepFrom = this.store.logStart();
    for (;;) {
      let n = 0;
      let stopped = false;
      for (const { seq, record } of this.store.readAfter(keepFrom - 1)) {
        // An erased entry (its project was deleted) holds nothing: it goes with the prefix it is in.
        const kept =
          seq > limit ||
          (record.t !== 'x' &&
            (record.rt >= cutoff || this.state.projects.get(record.p)?.days.get(record.day) !== undefined || sealAt(record.day) > this.state.maxRt));
        if (kept) {
          stopped = true;
          break;
        }
        keepFrom = seq + 1;
        if (++n === RETENTION_SLICE) break;
      }
      if (stopped || n < RETENTION_SLICE) break;
      await new Promise((resolve) => setImmediate(resolve));
    }
    return this.store.deleteBelow(keepFrom);
  }

  /** For tests and benches: wait until every day handed over for sealing is written. */
  async sealingIdle(): Promise<void> {
    await this.sealer.idle();
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
