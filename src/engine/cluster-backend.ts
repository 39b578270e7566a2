import type { ClusterConfig, Config } from '../config.ts';
import { fromSnapshot, toSnapshot, type SnapshotData } from '../core/snapshot.ts';
import { AnalyticsState, applyOnce, collectSealable, isDuplicate, pruneEventIds, storedThisMonth, takeSealQueue } from '../core/state.ts';
import type { LogRecord } from '../core/types.ts';
import { createEnricher, type Enricher } from '../enrich/index.ts';
import type { KeyRecord } from '../store/log-store.ts';
import { openClusterStore } from '../store/nats/open-cluster.ts';
import type { Catalog, EventLog, Follower, LogEntry, SharedSalts, SnapshotStore } from '../store/seams.ts';
import { Ownership } from './ownership.ts';
import type { Backend, ReadRefusal, ReadView } from './backend.ts';
import { hashKey, keyHint } from './keys.ts';

/**
 * Cluster mode (CLUSTER.md), StreamFold: ingest publishes the batch as one message to its partition and acknowledges
 * after the PubAck; each partition's follower folds the stream with applyOnce (the 48 h eventId rule, deterministic in
 * log order), so every node folding a partition reaches the same state. This backend folds every partition
 * (ANALYTICS_FOLD=all) and answers reads locally behind a read barrier.
 *
 * Sealed days: in cluster mode days stay live (never written to a node-local sealed store), so a partition snapshot
 * holds everything a node that restores it needs. The bound: heap grows with project-days of history (see README
 * "Cluster mode"); ownership mode divides it by the number of owners.
 */

/** CLUSTER.md §6: a read waits at most this long for the fold to reach the stream's end, then answers 503. */
export const READ_BARRIER_MS = 2_000;
/** Prune remembered eventIds this often (they expire after 48 h): hourly keeps at most ~49 h plus the margin. */
const PRUNE_EVERY_MS = 3_600_000;
/** Drop the reducer's seal queue this often: cluster days stay live (nothing to write), the queue must not grow. */
const SEAL_QUEUE_DRAIN_MS = 60_000;

export interface ClusterParts {
  log: EventLog;
  catalog: Catalog & { ready(): Promise<void>; readonly isMirrorReady: boolean; ensureAdminKey(hash: string, record: KeyRecord): Promise<boolean> };
  salts: SharedSalts;
  /** the shared snapshot store (object store, with a local copy of what this node wrote or read) */
  snapshots: SnapshotStore;
  /** the number of live members (rate limits are shared by them); 1 until membership is known */
  liveMembers(): number;
  /** the partition of a project: fnv1a32(projectId) mod P */
  partitionOf(projectId: string): number;
  /** the batch id of §4 (`e:` + hash of the eventIds when all have one, else random) */
  batchIdFor(projectId: string, records: readonly LogRecord[]): string;
  /** leases (ANALYTICS_FOLD=all: they elect each partition's snapshot writer) and membership */
  ownership: Ownership | undefined;
  /** closes what the parts hold (connections) after the backend stopped using them */
  close(): Promise<void>;
}

export interface ClusterBackendOptions {
  /** the engine's clock (tests inject one) */
  now: () => number;
  log: (line: string) => void;
  version: string;
  /** tests: a suffix for every resource name */
  tag?: string | undefined;
}

/** One partition's fold. */
class Partition {
  state = new AnalyticsState();
  follower: Follower | undefined;
  /** the stream's last sequence when folding started: caughtUp once folded that far */
  startedAt = 0;
  caughtUp = false;
  lastBatchId: string | undefined;
  /** events folded since the last snapshot */
  sinceSnapshot = 0;
  snapshotSeq = 0;
  snapshotting: Promise<void> | undefined;
  /** this node holds the partition's lease: it writes the shared snapshots (ANALYTICS_FOLD=all) */
  writer = false;
  /** reads waiting for the fold to reach a sequence */
  waiters: Array<{ seq: number; resolve: () => void }> = [];
  /** the barrier's lastSeq request in flight, and the one queued for reads that arrived after it was sent */
  inflight: Promise<number> | undefined;
  queued: Promise<number> | undefined;

  constructor(readonly n: number) {}
}

export class ClusterBackend implements Backend {
  readonly catalog: ClusterParts['catalog'];
  storageOk = true;
  private readonly parts: Partition[] = [];
  /** batches published here and not yet folded: batchId -> project, eventIds, events (quota and eventId pre-check) */
  private readonly inflight = new Map<string, { projectId: string; ids: Set<string>; stored: number }>();
  private readonly inflightIds = new Map<string, Map<string, number>>();
  private readonly inflightCounts = new Map<string, number>();
  private closing = false;

  private constructor(
    private readonly config: Readonly<Config>,
    private readonly cp: ClusterParts,
    readonly enricher: Enricher,
    private readonly now: () => number,
    private readonly log: (line: string) => void,
  ) {
    this.catalog = cp.catalog;
  }

  /** Connects, creates what the cluster lacks, mirrors the catalog, restores and follows every partition. */
  static async open(config: Readonly<Config>, cc: ClusterConfig, opts: ClusterBackendOptions): Promise<ClusterBackend> {
    const store = await openClusterStore({
      urls: cc.natsUrls,
      nodeId: cc.nodeId,
      partitions: cc.partitions,
      dataDir: config.dataDir,
      publishDeadlineMs: cc.publishDeadlineMs,
      retentionDays: cc.retentionDays,
      maxStreamBytes: cc.maxStreamBytes,
      tag: opts.tag,
      log: opts.log,
    });
    try {
      // Serve nothing before the catalog holds what was stored when it opened (keys would answer 401).
      await store.catalog.ready();
      let backend: ClusterBackend | undefined;
      const ownership = new Ownership(store.leases, {
        nodeId: cc.nodeId,
        partitions: store.partitions,
        fold: 'all',
        member: { http: `${config.host}:${config.port}`, grpc: `${config.host}:${config.grpcPort}`, version: opts.version },
        listener: {
          onGain: (n) => backend?.writerOf(n, true),
          onLose: (n) => backend?.writerOf(n, false),
          onError: (err) => opts.log(`ownership: ${err instanceof Error ? err.message : String(err)}`),
        },
      });
      const parts: ClusterParts = {
        log: store.log,
        catalog: store.catalog,
        salts: store.salts,
        snapshots: store.snapshots,
        liveMembers: () => ownership.liveMembers().length,
        partitionOf: store.partitionOf,
        batchIdFor: store.batchIdFor,
        ownership,
        close: () => store.close(),
      };
      backend = await ClusterBackend.start(config, parts, opts);
      await ownership.start();
      return backend;
    } catch (err) {
      await store.close().catch(() => {});
      throw err;
    }
  }

  static async start(config: Readonly<Config>, cp: ClusterParts, opts: ClusterBackendOptions): Promise<ClusterBackend> {
    const enricher = await createEnricher({
      geoDbPath: config.geoDbPath,
      salts: sharedSaltStore(cp.salts),
      saltsAhead: true,
      now: opts.now(),
    });
    const b = new ClusterBackend(config, cp, enricher, opts.now, opts.log);
    await b.startPartitions();
    return b;
  }

  private async startPartitions(): Promise<void> {
    const P = this.cp.log.partitions;
    for (let n = 0; n < P; n++) this.parts.push(new Partition(n));
    await Promise.all(this.parts.map((p) => this.startPartition(p)));
  }

  /** The newest usable snapshot (the store prefers its local copy of a sequence), then a follower from its sequence. */
  private async startPartition(p: Partition): Promise<void> {
    const last = await this.cp.log.lastSeq(p.n);
    const skip = (name: string, why: string) => this.log(`partition ${p.n}: skipping snapshot ${name}: ${why}`);
    let best: { data: SnapshotData; lastBatchId?: string | undefined } | undefined;
    try {
      best = await this.cp.snapshots.loadNewest(p.n, last, skip);
    } catch (err) {
      this.log(`partition ${p.n}: snapshots unreadable (${err instanceof Error ? err.message : String(err)}); replaying the partition`);
    }
    if (best) {
      try {
        p.state = fromSnapshot(best.data);
        p.lastBatchId = best.lastBatchId;
        p.snapshotSeq = p.state.lastSeq;
        this.log(`partition ${p.n}: restored snapshot at sequence ${p.state.lastSeq}`);
        collectSealable(p.state);
        takeSealQueue(p.state);
      } catch (err) {
        this.log(`partition ${p.n}: snapshot unusable (${err instanceof Error ? err.message : String(err)}); replaying the partition`);
        p.state = new AnalyticsState();
      }
    }
    p.startedAt = last;
    p.caughtUp = p.state.lastSeq >= last;
    p.follower = this.cp.log.follow(p.n, p.state.lastSeq, (e) => this.fold(p, e));
  }

  /** One stream entry into the partition's state, in order (the follower drops anything at or below lastSeq). */
  private fold(p: Partition, e: LogEntry): void {
    if (e.seq <= p.state.lastSeq) return;
    for (const r of e.records) applyOnce(p.state, e.seq, r);
    p.state.lastSeq = e.seq;
    p.lastBatchId = e.batchId;
    p.sinceSnapshot += e.records.length;
    if (e.batchId !== undefined) this.folded(e.batchId);
    if (!p.caughtUp && e.seq >= p.startedAt) p.caughtUp = true;
    if (p.waiters.length > 0) {
      const still: typeof p.waiters = [];
      for (const w of p.waiters) (w.seq <= e.seq ? w.resolve() : still.push(w));
      p.waiters = still;
    }
    if (p.writer && p.sinceSnapshot >= this.config.snapshotEveryEvents && !p.snapshotting) void this.snapshot(p);
  }

  /** A batch this node published is folded: it no longer counts as in flight. */
  private folded(batchId: string): void {
    const b = this.inflight.get(batchId);
    if (!b) return;
    this.inflight.delete(batchId);
    this.release(b);
  }

  private release(b: { projectId: string; ids: Set<string>; stored: number }): void {
    const ids = this.inflightIds.get(b.projectId);
    if (ids) {
      for (const id of b.ids) {
        const n = (ids.get(id) ?? 1) - 1;
        if (n <= 0) ids.delete(id);
        else ids.set(id, n);
      }
      if (ids.size === 0) this.inflightIds.delete(b.projectId);
    }
    const left = (this.inflightCounts.get(b.projectId) ?? 0) - b.stored;
    if (left <= 0) this.inflightCounts.delete(b.projectId);
    else this.inflightCounts.set(b.projectId, left);
  }

  private partition(projectId: string): Partition {
    return this.parts[this.cp.partitionOf(projectId)]!;
  }

  settled(): Promise<void> {
    return Promise.resolve();
  }

  /** A pre-check that saves stream space; the fold is the authority (an id in flight on another node passes here). */
  seen(projectId: string, eventId: string, now: number): boolean {
    if (this.inflightIds.get(projectId)?.has(eventId)) return true;
    return isDuplicate(this.partition(projectId).state, projectId, eventId, now);
  }

  /** The folded count of the month plus what this node acknowledged and has not folded yet (CLUSTER.md §8). */
  usedThisMonth(projectId: string, now: number): number {
    return storedThisMonth(this.partition(projectId).state, projectId, now) + (this.inflightCounts.get(projectId) ?? 0);
  }

  /** StreamFold: one message per batch, acknowledged after the PubAck; the follower folds it. */
  async commit(projectId: string, records: LogRecord[], ids: Set<string>, stored: number): Promise<boolean> {
    const batchId = this.cp.batchIdFor(projectId, records);
    const b = { projectId, ids: new Set(ids), stored };
    let idMap = this.inflightIds.get(projectId);
    if (!idMap) this.inflightIds.set(projectId, (idMap = new Map()));
    for (const id of ids) idMap.set(id, (idMap.get(id) ?? 0) + 1);
    this.inflightCounts.set(projectId, (this.inflightCounts.get(projectId) ?? 0) + stored);
    const p = this.partition(projectId);
    try {
      const appended = await this.cp.log.append(p.n, records, batchId);
      this.storageOk = true;
      // Folded already (a fast follower), or a transport repeat whose first copy was folded: nothing is in flight.
      if (appended.seq <= p.state.lastSeq || (appended.duplicate && !this.inflight.has(batchId))) this.release(b);
      else if (this.inflight.has(batchId)) this.release(b); // the same batch id in flight twice: count it once
      else this.inflight.set(batchId, b);
      return true;
    } catch (err) {
      this.release(b);
      this.log(`publish failed: ${err instanceof Error ? err.message : String(err)}`);
      return false;
    }
  }

  /**
   * Read barrier (CLUSTER.md §6): the stream's last sequence of the partition, read after the request arrived, then
   * wait (≤ READ_BARRIER_MS) until the fold has reached it, so a read after a 200 sees that event, as on one node.
   * Reads arriving while a lastSeq request is in flight share the next one.
   */
  async readView(projectId: string): Promise<ReadView | ReadRefusal> {
    const p = this.partition(projectId);
    const deadline = Date.now() + READ_BARRIER_MS;
    let target: number;
    try {
      target = await withTimeout(this.barrierSeq(p), READ_BARRIER_MS);
    } catch {
      return { unavailable: 'the event stream did not answer in time; retry in a moment' };
    }
    if (p.state.lastSeq < target) {
      const reached = await new Promise<boolean>((resolve) => {
        const t = setTimeout(() => resolve(false), Math.max(1, deadline - Date.now()));
        p.waiters.push({
          seq: target,
          resolve: () => {
            clearTimeout(t);
            resolve(true);
          },
        });
      });
      if (!reached) return { unavailable: `partition ${p.n} is still folding (at ${p.state.lastSeq} of ${target}); retry in a moment` };
    }
    return { state: p.state, sealed: undefined };
  }

  private barrierSeq(p: Partition): Promise<number> {
    if (!p.inflight) {
      const req = this.cp.log.lastSeq(p.n).finally(() => {
        if (p.inflight === req) p.inflight = undefined;
      });
      p.inflight = req;
      return req;
    }
    if (!p.queued) {
      const q = p.inflight
        .catch(() => 0)
        .then(() => {
          if (p.queued === q) p.queued = undefined;
          return this.barrierSeq(p);
        });
      p.queued = q;
    }
    return p.queued;
  }

  async eraseProject(projectId: string): Promise<void> {
    // Engine refuses deletion in cluster mode before calling this (see deleteRefusal); kept for the interface.
    throw new Error(`erasing project ${projectId} is not available in cluster mode`);
  }

  /** Why a project cannot be deleted here (cluster mode does not erase stream messages yet). */
  deleteRefusal(): string {
    return 'deleting a project is not available in cluster mode yet: its events would stay in the shared stream';
  }

  async bootstrapAdminKey(config: Readonly<Config>, now: number): Promise<void> {
    const key = config.adminKey;
    if (key === undefined) throw new Error('cluster mode needs ANALYTICS_ADMIN_KEY'); // config.ts refuses this earlier
    const created = await this.cp.catalog.ensureAdminKey(hashKey(key), { kind: 'admin', ownerId: 'o_admin', createdAt: now });
    this.log(`admin key: from ANALYTICS_ADMIN_KEY (${keyHint(key)})${created ? ', stored in the cluster catalog' : ''}`);
  }

  health(): { ready: boolean } {
    return { ready: this.cp.catalog.isMirrorReady };
  }

  /** Ownership's verdict: the lease holder of a partition writes its snapshots (one writer per partition). */
  writerOf(n: number, held: boolean): void {
    const p = this.parts[n];
    if (p) p.writer = held;
  }

  rateShare(): number {
    return Math.max(1, this.cp.liveMembers());
  }

  startTimers(every: (ms: number, fn: () => void | Promise<void>) => void): void {
    every(this.config.snapshotIntervalMs, async () => {
      for (const p of this.parts) if (p.writer && p.state.lastSeq !== p.snapshotSeq) await this.snapshot(p);
    });
    every(PRUNE_EVERY_MS, () => {
      for (const p of this.parts) pruneEventIds(p.state, this.now());
    });
    every(SEAL_QUEUE_DRAIN_MS, () => {
      for (const p of this.parts) takeSealQueue(p.state);
    });
  }

  /** A partition's snapshot: the shared store (named by its sequence, with the last batch id; it keeps a local copy). */
  private snapshot(p: Partition): Promise<void> {
    if (p.snapshotting) return p.snapshotting;
    const run = (async () => {
      takeSealQueue(p.state);
      const data = toSnapshot(p.state);
      const batchId = p.lastBatchId;
      p.sinceSnapshot = 0;
      await this.cp.snapshots.write(p.n, data, batchId);
      p.snapshotSeq = data.lastSeq;
    })()
      .catch((err: unknown) => this.log(`partition ${p.n}: snapshot failed: ${err instanceof Error ? err.message : String(err)}`))
      .finally(() => {
        p.snapshotting = undefined;
      });
    p.snapshotting = run;
    return run;
  }

  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    // Release the leases first (SIGTERM: successors claim at once), then the last snapshots of what this node wrote.
    const writer = this.parts.map((p) => p.writer);
    await this.cp.ownership?.stop({ release: true }).catch((err: unknown) => this.log(`releasing leases failed: ${String(err)}`));
    await Promise.all(this.parts.map((p) => p.follower?.stop()));
    for (const p of this.parts) for (const w of p.waiters) w.resolve();
    await Promise.all(this.parts.map(async (p, i) => (writer[i] && p.state.lastSeq !== p.snapshotSeq ? this.snapshot(p) : p.snapshotting)));
    await this.cp.log.close();
    await this.cp.snapshots.close();
    await this.cp.close();
  }

  stats(): { liveDays: number; sealedDays: number } {
    let liveDays = 0;
    for (const p of this.parts) for (const ps of p.state.projects.values()) liveDays += ps.days.size;
    return { liveDays, sealedDays: 0 };
  }

  async applyRetention(): Promise<number> {
    return 0; // the stream's max_age (ANALYTICS_RETENTION_DAYS) does it
  }

  async sealingIdle(): Promise<void> {}

  /** Tests and benches: every partition's snapshot now, whoever holds the lease. */
  async snapshotNow(): Promise<void> {
    await Promise.all(this.parts.map((p) => this.snapshot(p)));
  }

  /** For tests: the partitions' folded sequences. */
  foldedSeqs(): number[] {
    return this.parts.map((p) => p.state.lastSeq);
  }
}

/** The salts of every node: the first node to store a day's salt wins, the others take it (same session ids). */
function sharedSaltStore(shared: SharedSalts): { load(): Promise<Array<{ day: string; key: string }>>; save(s: Array<{ day: string; key: string }>): Promise<Array<{ day: string; key: string }>> } {
  let known = new Set<string>();
  return {
    async load() {
      const all = await shared.load();
      known = new Set(all.map((s) => s.day));
      return all;
    },
    async save(salts) {
      const held = await Promise.all(salts.map((s) => shared.createOrGet(s)));
      const keep = new Set(salts.map((s) => s.day));
      // Expired here (48 h after its day began) is expired everywhere: purge it from the bucket.
      for (const day of known) if (!keep.has(day)) await shared.remove(day).catch(() => {});
      known = keep;
      return held;
    },
  };
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('timeout')), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(t);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}
