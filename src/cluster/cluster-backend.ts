// long because one class holds a partition's whole life around its fold (start from a snapshot, follower, barrier,
// owner reads and forwarding, in-flight batches, close); the fold itself is PartitionFold (engine/partition-fold.ts),
// erasure (cluster-erasure.ts) and questions' columns (cluster-columns.ts) live beside it.
import type { ClusterConfig, Config, FoldMode } from '../config.ts';
import { utcMonthOf } from '../core/dates.ts';
import { fromSnapshot, toSnapshot, type SnapshotData } from '../core/snapshot.ts';
import type { SealedSource } from '../core/day-view.ts';
import { sealedSource } from '../core/sealed-source.ts';
import { AnalyticsState, collectSealable, dayCounts, isDuplicate, storedThisMonth } from '../core/state.ts';
import type { FunnelStepAnswer, QueryAnswer, QueryEngine } from '../core/query/types.ts';
import type { LogRecord, MetricsResponse, RealtimeResponse, StoredEvent } from '../core/types.ts';
import { createEnricher, type Enricher } from '../enrich/index.ts';
import type { KeyRecord } from '../store/records.ts';
import { PartitionHistoryIds } from '../store/lmdb/partition-history-ids.ts';
import { openClusterStore } from '../store/nats/open-cluster.ts';
import { READ_TIMEOUT_MS, ReadFailedError, ReadUnavailableError, type ReadRpc } from '../store/nats/read-rpc.ts';
import type { KvSealedStore } from '../store/nats/sealed.ts';
import type { Usage } from '../store/nats/usage.ts';
import type { Catalog, EventLog, Follower, LogEntry, SharedSalts, SnapshotStore } from '../store/seams.ts';
import type { Backend, BackendStats, ReadRefusal } from '../engine/backend.ts';
import { answerQuestion, catchUpColumns, isQuestionRead, PartitionColumns, QUESTION_WIRE_VERSION, unsupportedRead, type QuestionRead } from './cluster-columns.ts';
import { ClusterErasure, ERASE_CHECK_MS, type ErasureHooks, type ErasureParts } from './cluster-erasure.ts';
import { catchUpHistoryIds, exportFromStream } from './cluster-history.ts';
import { COLUMN_FLUSH_MS } from '../engine/column-projection.ts';
import { sumOpenStats } from '../engine/open-columns.ts';
import { hashKey, keyHint } from '../engine/keys.ts';
import { Ownership } from './ownership.ts';
import { QuestionsUnavailable } from '../engine/questions.ts';
import { answerRead, type ReadQuery } from '../engine/read-query.ts';
import { PartitionFold, PRUNE_EVERY_MS, type Projection } from '../engine/partition-fold.ts';
import { REST_EVERY_MS } from '../engine/day-rest.ts';

/**
 * Cluster mode (CLUSTER.md), StreamFold: ingest publishes the batch as one message to its partition and acknowledges
 * after the PubAck; a partition's follower folds the stream with applyOnce (the 48 h eventId rule, deterministic in
 * log order), so every node folding a partition reaches the same state.
 *
 * ANALYTICS_FOLD=owner (default): a node folds the partitions it owns or stands by for (Ownership decides), answers
 * their reads while fenced in, and forwards other reads to the owner over request/reply. ANALYTICS_FOLD=all: every
 * node folds every partition and answers reads locally; the leases only elect each partition's snapshot writer.
 * Either way a read waits behind a read barrier, so a read after a 200 sees that event, as on one node.
 *
 * Sealed days, as on one node: a day whose window closed is sealed and dropped from the heap, so memory and partition
 * snapshots follow the live days, not history. Every node folding a partition seals it (deterministic in log order)
 * into the shared sealed-rows bucket first and its local copy of it second (store/nats/sealed.ts), then drops the day;
 * a partition start restores the snapshot, then waits until its copy holds every row the bucket holds, so the days
 * that snapshot no longer carries are there before the partition serves a read.
 */

/** CLUSTER.md §6: a read waits at most this long for the fold to reach the stream's end, then answers 503. */
export const READ_BARRIER_MS = 2_000;
/**
 * An export waits this long for the partition's fold (its history ids) to reach the stream's end: its answer is a
 * stream already under way, so a partition still catching up after a start gets longer than a read's 503 allows.
 */
const EXPORT_BARRIER_MS = 30_000;
/** A partition whose start failed (the stream did not answer, e.g. during a leader failover) is tried again this soon. */
const START_RETRY_MS = 1_000;
/** A partition's start still waiting this long says what it waits for (each step has its own timeout, or should). */
const START_SLOW_LOG_MS = 10_000;
/**
 * A forwarded read's barrier gives up this long before the asker's READ_TIMEOUT_MS, so the asker gets the owner's
 * 503 reason (and retries) instead of a bare timeout racing the owner's answer.
 */
const FORWARD_REPLY_MARGIN_MS = 500;
/**
 * A partition whose newest folded receive time is this far behind the clock gets a clock tick from its lease holder
 * (a ClockRecord message), so its closed days are sealed although no event arrives: sealing is an hour late at most.
 */
const TICK_IDLE_MS = 3_600_000;
/** How often lease holders look for idle partitions. */
const TICK_CHECK_MS = 60_000;
/** Look for in-flight batches to forget this often (see INFLIGHT_FORGET_MS). */
const INFLIGHT_SWEEP_MS = 60_000;
/** Owners publish changed monthly usage this often (CLUSTER.md §8: quota enforced within ~1–2 s). */
const USAGE_PUBLISH_MS = 1_000;
/**
 * A batch acknowledged here stops counting as in flight once folded here or covered by a published usage; one whose
 * partition nobody folds where this node can see it is forgotten after this long (its owner published by then, or died).
 */
const INFLIGHT_FORGET_MS = 60_000;

export interface ClusterParts {
  log: EventLog;
  catalog: Catalog & { ready(): Promise<void>; readonly isMirrorReady: boolean; ensureAdminKey(hash: string, record: KeyRecord): Promise<boolean> };
  salts: SharedSalts;
  /** the shared snapshot store (object store, with a local copy of what this node wrote or read) */
  snapshots: SnapshotStore;
  /** the partition of a project: fnv1a32(projectId) mod P */
  partitionOf(projectId: string): number;
  /** the batch id of §4 (`e:` + hash of the eventIds when all have one, else random) */
  batchIdFor(projectId: string, records: readonly LogRecord[]): string;
  reads: ReadRpc;
  /**
   * CLUSTER.md §5: why a snapshot at `seq` whose last folded message had `batchId` cannot be resumed from (the stream
   * numbers that message differently, or retention removed messages after it), or undefined when it can.
   */
  resumeRefusal(seq: number, batchId: string | undefined): Promise<string | undefined>;
  usage: { get(projectId: string, month: string): Usage | undefined; publish(projectId: string, month: string, u: Usage): Promise<void> };
  /** sealed days and month rollups: the shared bucket and this node's copy of it */
  sealed: Pick<KvSealedStore, 'caughtUp' | 'write' | 'readDays' | 'month' | 'days' | 'dayCount' | 'removeLocal' | 'eraseProject'>;
  /** what erasing a deleted project needs (src/cluster/cluster-erasure.ts) */
  erasure: ErasureParts;
  /** a partition's column projection in this node's data directory (questions); absent: questions answer 503 */
  openColumns?: ((partition: number) => PartitionColumns) | undefined;
  /** removes a partition's columns from this node's data directory (closed first) */
  removeColumns?: ((partition: number) => void) | undefined;
  /** whether this node's data directory holds a partition's columns */
  hasColumns?: ((partition: number) => boolean) | undefined;
  /** the partition's table of history eventIds, beside its columns (removed with them); absent: the 48 h rule only */
  openHistoryIds?: ((partition: number) => PartitionHistoryIds) | undefined;
  /** `fn(partition, seq)` for each erase floor known now and each raised later, on any node (cluster-erasure.ts) */
  onEraseFloor?: ((fn: (partition: number, seq: number) => void) => void) | undefined;
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
  /**
   * Tests: handed a function that makes this node die as a kill -9 would leave the cluster: no release, no snapshot,
   * connections dropped; its leases expire by themselves. The faces stay up (answering 503 from health) until the
   * service is stopped.
   */
  crashable?: ((crash: () => Promise<void>) => void) | undefined;
  /** tests: what the erasure asks at its turns (ErasureHooks) */
  erasureHooks?: ErasureHooks | undefined;
}

/** One partition: its fold (PartitionFold: state, sealer, snapshot schedule, projections), follower and readers. */
class Partition {
  fold!: PartitionFold;
  follower: Follower | undefined;
  /** folding (owner mode: owned or standby; all: always) */
  active = false;
  /** bumped when folding stops, so a start still in progress does nothing */
  generation = 0;
  starting: Promise<void> | undefined;
  /** the stream's last sequence when folding started: caughtUp once folded that far */
  startedAt = 0;
  caughtUp = false;
  /** this node holds the partition's lease: it writes the shared snapshots and (owner mode) answers its reads */
  writer = false;
  /** reads waiting for the fold to reach a sequence */
  waiters: Array<{ seq: number; resolve: (reached: boolean) => void }> = [];
  /** the barrier's lastSeq request in flight, and the one queued for reads that arrived after it was sent */
  inflight: Promise<number> | undefined;
  queued: Promise<number> | undefined;
  /** usage published last, per project (owner: publish only what changed) */
  published = new Map<string, number>();
  /** the questions' columns of this partition (opened at its first start, kept while it moves away and back) */
  columns: PartitionColumns | undefined;
  /** stream sequence the columns already hold: entries after it are fed to them */
  columnsFrom = Infinity;
  /** removing columns that missed an erasure (the partition is not folded here); a start waits for it */
  columnsDrop: Promise<void> | undefined;
  /** the partition's history eventIds (opened with its columns; an export on a node not folding it opens it too) */
  history: PartitionHistoryIds | undefined;

  constructor(readonly n: number) {}
}

interface InFlight {
  projectId: string;
  partition: number;
  ids: Set<string>;
  stored: number;
  /** the PubAck's sequence (0 until it came) */
  seq: number;
  at: number;
}

export class ClusterBackend implements Backend {
  readonly catalog: ClusterParts['catalog'];
  storageOk = true;
  private readonly parts: Partition[] = [];
  /** batches published here and not yet folded or published as usage: quota and the eventId pre-check see them */
  private readonly inflight = new Map<string, InFlight>();
  private readonly inflightIds = new Map<string, Map<string, number>>();
  private readonly inflightCounts = new Map<string, number>();
  private ownership: Ownership | undefined;
  private readonly sealedSource: SealedSource;
  /** deleting projects */
  erasure!: ClusterErasure;
  private closing = false;
  private crashed = false;

  private constructor(
    private readonly config: Readonly<Config>,
    private readonly cp: ClusterParts,
    readonly enricher: Enricher,
    private readonly fold: FoldMode,
    private readonly now: () => number,
    private readonly log: (line: string) => void,
  ) {
    this.catalog = cp.catalog;
    this.sealedSource = sealedSource(cp.sealed);
  }

  /** Connects, creates what the cluster lacks, mirrors the catalog, then folds (all, or what Ownership hands it). */
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
      const parts: ClusterParts = {
        log: store.log,
        catalog: store.catalog,
        salts: store.salts,
        snapshots: store.snapshots,
        partitionOf: store.partitionOf,
        batchIdFor: store.batchIdFor,
        reads: store.reads,
        usage: store.usage,
        sealed: store.sealed,
        erasure: { partitionOf: store.partitionOf, log: store.log, pending: store.erasures, snapshots: store.snapshots, usage: store.usage, sealed: store.sealed },
        openColumns: (n) => PartitionColumns.open(config.dataDir, n, opts.log),
        removeColumns: (n) => PartitionColumns.remove(config.dataDir, n),
        hasColumns: (n) => PartitionColumns.exists(config.dataDir, n),
        openHistoryIds: (n) => PartitionHistoryIds.open(PartitionColumns.dir(config.dataDir, n)),
        onEraseFloor: (fn) => void store.erasures.onFloor(fn),
        async resumeRefusal(seq, batchId) {
          const first = await store.log.firstSeq();
          if (seq < first - 1) return `the stream starts at ${first}: retention removed messages after it`;
          if (batchId === undefined) return undefined; // written without one (none folded yet)
          const at = await store.log.batchIdAt(seq);
          return at === batchId ? undefined : `the stream's message ${seq} is ${at ?? 'absent'}, the snapshot's was ${batchId}`;
        },
        close: () => store.close(),
      };
      const backend = await ClusterBackend.start(config, parts, cc.fold, opts);
      const ownership = new Ownership(store.leases, {
        nodeId: cc.nodeId,
        partitions: store.partitions,
        fold: cc.fold,
        member: { http: `${config.host}:${config.port}`, grpc: `${config.host}:${config.grpcPort}`, version: opts.version },
        listener: {
          onGain: (n) => backend.gain(n),
          onLose: (n) => backend.lose(n),
          onStandby: (n, wanted) => backend.standby(n, wanted),
          onError: (err) => opts.log(`ownership: ${err instanceof Error ? err.message : String(err)}`),
        },
      });
      backend.ownership = ownership;
      await ownership.start();
      return backend;
    } catch (err) {
      await store.close().catch(() => {});
      throw err;
    }
  }

  /** The backend over ready parts (ANALYTICS_FOLD=all: every partition restored and followed before this resolves). */
  static async start(config: Readonly<Config>, cp: ClusterParts, fold: FoldMode, opts: ClusterBackendOptions): Promise<ClusterBackend> {
    const enricher = await createEnricher({
      geoDbPath: config.geoDbPath,
      salts: sharedSaltStore(cp.salts),
      saltsAhead: true,
      now: opts.now(),
    });
    const b = new ClusterBackend(config, cp, enricher, fold, opts.now, opts.log);
    b.erasure = new ClusterErasure(cp.erasure, opts.log, opts.erasureHooks);
    for (let n = 0; n < cp.log.partitions; n++) b.parts.push(b.partitionAt(n));
    if (fold === 'all') await Promise.all(b.parts.map((p) => b.activate(p)));
    cp.onEraseFloor?.((n, seq) => b.columnsFloor(n, seq));
    opts.crashable?.(() => b.crash());
    return b;
  }

  /** Partition n with its fold: snapshots to the shared store by the lease holder, the columns fed what applyOnce applied. */
  private partitionAt(n: number): Partition {
    const p = new Partition(n);
    const columns: Projection = {
      fold(seq, applied) {
        if (seq > p.columnsFrom) p.columns?.feed(seq, applied.filter((r) => r.t === 'e'));
      },
      erase(projectId, seq) {
        if (seq > p.columnsFrom) p.columns?.erase(projectId);
      },
    };
    p.fold = new PartitionFold(new AnalyticsState(), {
      numbering: 'message',
      repeatsInLog: true,
      sealed: this.cp.sealed,
      // named by its sequence, with the last batch id (a resume checks it); the store keeps a local copy
      writeSnapshot: (fold) => this.cp.snapshots.write(n, toSnapshot(fold.state), fold.lastBatchId),
      snapshotEveryEvents: this.config.snapshotEveryEvents,
      writesSnapshots: () => p.writer,
      erased: (projectId, seq, held) => this.erasedInPartition(p, projectId, seq, held),
      projections: [columns],
      historyIds: {
        firstSeq: (projectId, eventId) => p.history?.firstSeq(projectId, eventId),
        note: (seq, records) => p.history?.note(seq, records),
        erase: (projectId, seq) => p.history?.erase(projectId, seq),
      },
      log: (line) => this.log(`partition ${n}: ${line}`),
    });
    return p;
  }

  // ------------------------------------------------------------ ownership

  private gain(n: number): void {
    const p = this.parts[n];
    if (!p || this.closing) return;
    p.writer = true;
    this.log(`partition ${n}: owned here`);
    if (this.fold === 'all') return;
    void this.activate(p);
    this.cp.reads.serve<ReadQuery | QuestionRead, unknown>(n, (q) => this.answerOwned(p, q), () => this.ownership?.serves(n) === true);
  }

  private lose(n: number): void {
    const p = this.parts[n];
    if (!p) return;
    p.writer = false;
    this.log(`partition ${n}: no longer owned here`);
    if (this.fold === 'all') return;
    this.cp.reads.unserve(n);
    if (!this.ownership?.wantsStandby(n)) this.deactivate(p);
  }

  private standby(n: number, wanted: boolean): void {
    const p = this.parts[n];
    if (!p || this.fold === 'all' || this.closing) return;
    if (wanted) void this.activate(p);
    else if (!p.writer) this.deactivate(p);
  }

  /** Starts folding a partition: the newest usable snapshot, then a follower from its sequence. */
  private activate(p: Partition): Promise<void> {
    if (p.active) return p.starting ?? Promise.resolve();
    p.active = true;
    const gen = ++p.generation;
    p.starting = this.startPartition(p, gen).catch((err: unknown) => {
      if (p.generation !== gen) return;
      p.active = false;
      // e.g. lastSeq timed out during a stream leader failover: while the partition is still ours (or a standby's),
      // try again, else it would stay unfolded and its reads refused until the next ownership change
      const again = !this.closing && this.wanted(p);
      this.log(`partition ${p.n}: start failed (${err instanceof Error ? err.message : String(err)}); ${again ? `retried in ${START_RETRY_MS} ms` : 'retried on the next ownership change'}`);
      if (again) setTimeout(() => void (!p.active && !this.closing && this.wanted(p) && this.activate(p)), START_RETRY_MS).unref();
    });
    return p.starting;
  }

  /** This node should fold p: every partition (fold all), or one it owns or stands by for. */
  private wanted(p: Partition): boolean {
    return this.fold === 'all' || p.writer || this.ownership?.wantsStandby(p.n) === true;
  }

  /** Stops folding a partition and frees its state (it is neither owned nor a standby here any more). */
  private deactivate(p: Partition): void {
    if (!p.active) return;
    p.active = false;
    p.generation++;
    const f = p.follower;
    p.follower = undefined;
    void f?.stop();
    for (const w of p.waiters) w.resolve(false);
    p.waiters = [];
    p.history?.advance(p.fold.state.lastSeq); // it took every history id the fold folded
    p.fold.clear();
    p.caughtUp = false;
    p.published.clear();
    p.columnsFrom = Infinity;
    void p.columns?.flush().catch((err: unknown) => this.log(`partition ${p.n}: sealing its columns failed: ${String(err)}`));
    void this.ownership?.clearReady(p.n).catch(() => {});
  }

  private async startPartition(p: Partition, gen: number): Promise<void> {
    // Named, so a start that never gets as far as its snapshot can be told from one that never began.
    this.log(`partition ${p.n}: starting its fold (${p.writer ? 'owner' : 'standby'})`);
    const step = { at: "the stream's last sequence", since: performance.now() };
    const slow = setInterval(() => {
      if (gen === p.generation) this.log(`partition ${p.n}: its start has waited ${Math.round((performance.now() - step.since) / 1000)} s for ${step.at}`);
    }, START_SLOW_LOG_MS).unref();
    const waitFor = (what: string) => {
      step.at = what;
      step.since = performance.now();
    };
    try {
      await this.foldFromSnapshot(p, gen, waitFor);
    } finally {
      clearInterval(slow);
    }
  }

  private async foldFromSnapshot(p: Partition, gen: number, waitFor: (what: string) => void): Promise<void> {
    const last = await this.cp.log.lastSeq(p.n);
    // What was folded into the columns before (a partition that moved away and back) is sealed first: their marker
    // is then exactly where feeding them resumes.
    waitFor('the removal of stale columns');
    await p.columnsDrop;
    if (gen !== p.generation) return;
    const cols = (p.columns ??= this.cp.openColumns?.(p.n));
    waitFor('its columns to seal');
    await cols?.flush();
    if (gen !== p.generation) return;
    const colMark = cols?.streamMarker() ?? Infinity;
    const skip = (name: string, why: string) => this.log(`partition ${p.n}: skipping snapshot ${name}: ${why}`);
    let best: { data: SnapshotData; lastBatchId?: string | undefined } | undefined;
    // Unreachable (not damaged: damaged ones are skipped for older ones) is a failed start, retried: a replay from
    // the stream's start is only right while retention has removed nothing, and sealed days left the stream's fold.
    waitFor(`the newest snapshot at or below sequence ${last}`);
    best = await this.cp.snapshots.loadNewest(p.n, last, skip);
    if (gen !== p.generation) return;
    if (best && best.data.lastSeq > 0) {
      waitFor(`the resume check at sequence ${best.data.lastSeq}`);
      const refusal = await this.cp.resumeRefusal(best.data.lastSeq, best.lastBatchId).catch((err: unknown) => `resume check failed: ${String(err)}`);
      if (refusal !== undefined) {
        // An alert for the operator: nats-server 2.9.10 can number replicas differently (CLUSTER.md §12 risk 1).
        this.log(`ALERT partition ${p.n}: snapshot at sequence ${best.data.lastSeq} refused (${refusal}); replaying the partition from the start`);
        best = undefined;
      }
    }
    if (gen !== p.generation) return;
    // The columns fold from the same point as the state, so they see what applyOnce applied: a snapshot at or below
    // their marker, else the stream from its start; else (retention) they catch up on their own (cluster-columns.ts).
    let columnsCatchUp = false;
    if (cols && colMark < (best?.data.lastSeq ?? 0)) {
      waitFor(`a snapshot at or below the columns' sequence ${colMark}`);
      const base = await this.columnsBase(p, colMark, skip);
      if (gen !== p.generation) return;
      if (base === 'start') best = undefined;
      else if (base) best = base;
      else columnsCatchUp = true;
      this.log(`partition ${p.n}: columns at sequence ${colMark}: ${base === 'start' ? 'replaying the partition from the start' : base ? `starting from the snapshot at ${base.data.lastSeq}` : 'no snapshot at or below it; they catch up alone'}`);
    }
    // The days this snapshot no longer holds were put into the sealed-rows bucket before it was written: wait until
    // this node's copy holds them, or reads would miss them.
    waitFor("the sealed rows' copy to catch up");
    await this.cp.sealed.caughtUp();
    if (gen !== p.generation) return;
    let state = new AnalyticsState();
    let lastBatchId: string | undefined;
    if (best) {
      try {
        state = fromSnapshot(best.data);
        lastBatchId = best.lastBatchId;
        this.log(`partition ${p.n}: restored snapshot at sequence ${state.lastSeq}`);
        collectSealable(state); // days whose window closed after the snapshot: sealed once the follower runs
      } catch (err) {
        this.log(`partition ${p.n}: snapshot unusable (${err instanceof Error ? err.message : String(err)}); replaying the partition`);
        state = new AnalyticsState();
      }
    }
    const hist = (p.history ??= this.cp.openHistoryIds?.(p.n));
    if (hist && hist.marker() < state.lastSeq) {
      const from = hist.marker();
      waitFor(`the history ids to catch up from ${from}`);
      // Ids only in messages retention removed are unknown here: a re-send of one counts again on this node.
      const gone = await this.cp.resumeRefusal(from, undefined).catch(() => undefined);
      if (gone !== undefined) this.log(`partition ${p.n}: history ids from ${from}: ${gone}; a history eventId only those messages carried counts again if sent again`);
      const n = await catchUpHistoryIds(hist, this.cp.log.read(p.n, from), state.lastSeq, () => gen === p.generation);
      if (gen !== p.generation) return;
      this.log(`partition ${p.n}: history ids caught up from ${from} to ${state.lastSeq} (${n} messages)`);
    }
    if (cols && columnsCatchUp) {
      waitFor(`the columns to catch up from ${colMark}`);
      const n = await catchUpColumns(cols, this.cp.log.read(p.n, colMark), state.lastSeq, () => gen === p.generation);
      if (gen !== p.generation) return;
      this.log(`partition ${p.n}: columns caught up from ${colMark} to ${state.lastSeq} (${n} messages; a repeat of an eventId first sent before ${colMark} may count twice in questions)`);
    }
    p.columnsFrom = cols ? Math.max(colMark, columnsCatchUp ? state.lastSeq : 0) : Infinity;
    if (cols && colMark > last) this.log(`ALERT partition ${p.n}: its columns are at sequence ${colMark}, past the stream's end ${last} (another stream?): remove ${p.n}'s columns directory to rebuild them`);
    p.fold.restart(state, lastBatchId);
    // Reads that waited for the fold before the snapshot was in: the snapshot may already cover what they wait for.
    const still: typeof p.waiters = [];
    for (const w of p.waiters) (w.seq <= state.lastSeq ? w.resolve(true) : still.push(w));
    p.waiters = still;
    p.startedAt = last;
    p.caughtUp = false;
    if (this.closing) return; // closed meanwhile (a retried start can outlast close): no follower on a closed log
    p.follower = this.cp.log.follow(p.n, state.lastSeq, (e) => {
      if (gen === p.generation) this.foldEntry(p, e);
    });
    if (state.lastSeq >= last) this.caughtUp(p);
    p.fold.sealer.kick();
  }

  /**
   * An erasure's floor rose for partition n: columns kept here for a partition this node does not fold now missed its
   * erase marker, and may never fold it (the partition may not come back): they go, and rebuild from the stream if it
   * does. A partition folded here erases in its fold, in log order.
   */
  private columnsFloor(n: number, seq: number): void {
    const p = this.parts[n];
    if (!p || p.active || this.closing) return;
    p.columnsDrop = (p.columnsDrop ?? Promise.resolve())
      .then(async () => {
        if (p.active || this.closing || !(p.columns || this.cp.hasColumns?.(n))) return;
        const cols = p.columns ?? this.cp.openColumns?.(n);
        if (!cols) return;
        p.columns = undefined;
        const marker = cols.streamMarker();
        if (marker >= seq) {
          p.columns = cols;
          return;
        }
        await cols.close();
        const hist = p.history;
        p.history = undefined;
        await hist?.close();
        this.cp.removeColumns?.(n);
        this.log(`partition ${n}: columns removed: they stop at sequence ${marker}, before the erase marker at ${seq} (rebuilt from the stream when the partition is folded here again)`);
      })
      .catch((err: unknown) => this.log(`partition ${n}: removing columns that missed an erasure failed: ${String(err)}`));
  }

  /**
   * The starting point for a partition whose columns are behind the newest snapshot: an older snapshot at or below
   * their marker, or 'start' (no snapshot: the stream still holds everything), or undefined (retention removed some).
   */
  private async columnsBase(p: Partition, colMark: number, skip: (name: string, why: string) => void): Promise<{ data: SnapshotData; lastBatchId?: string | undefined } | 'start' | undefined> {
    if (colMark > 0) {
      const older = await this.cp.snapshots.loadNewest(p.n, colMark, skip);
      if (older && older.data.lastSeq > 0) {
        const refusal = await this.cp.resumeRefusal(older.data.lastSeq, older.lastBatchId).catch((err: unknown) => `resume check failed: ${String(err)}`);
        if (refusal === undefined) return older;
      }
    }
    return (await this.cp.resumeRefusal(0, undefined)) === undefined ? 'start' : undefined;
  }

  /** The fold reached the stream's end as of its start: a standby may now take the partition over (ready mark). */
  private caughtUp(p: Partition): void {
    if (p.caughtUp) return;
    p.caughtUp = true;
    if (this.fold === 'owner') this.markReady(p, p.generation);
    if (p.writer && p.fold.changed()) void p.fold.snapshotSoon(); // CLUSTER.md §5: after catching up a new partition
  }

  /**
   * Tells the current owner this standby may take p over. A mark that fails (the owners bucket busy or in a leader
   * failover) is tried again while p is still folded here: without it the owner never hands p back.
   */
  private markReady(p: Partition, gen: number): void {
    this.ownership?.markReady(p.n).catch((err: unknown) => {
      const again = gen === p.generation && p.active && !this.closing;
      this.log(`partition ${p.n}: ready mark failed: ${String(err)}${again ? `; retried in ${START_RETRY_MS} ms` : ''}`);
      if (again) setTimeout(() => void (gen === p.generation && p.active && !this.closing && this.markReady(p, gen)), START_RETRY_MS).unref();
    });
  }

  /** One stream entry into the partition's fold, in order (the follower drops anything at or below lastSeq). */
  private foldEntry(p: Partition, e: LogEntry): void {
    if (e.seq <= p.fold.state.lastSeq) return;
    p.fold.fold(e.seq, e.records, e);
    if (e.batchId !== undefined) this.folded(e.batchId);
    if (!p.caughtUp && e.seq >= p.startedAt) this.caughtUp(p);
    if (p.waiters.length > 0) {
      const still: typeof p.waiters = [];
      for (const w of p.waiters) (w.seq <= e.seq ? w.resolve(true) : still.push(w));
      p.waiters = still;
    }
  }

  /**
   * A deleted project's erase marker, folded in log order (cluster-erasure.ts): its state goes (the same on every node
   * folding p), local snapshot copies from before the marker go, and the lease holder stores a snapshot without it.
   */
  private erasedInPartition(p: Partition, projectId: string, seq: number, held: boolean): void {
    p.published.delete(projectId);
    this.cp.erasure.snapshots.setFloor(p.n, seq);
    if (p.writer) void p.fold.snapshot();
    // Its sealed rows, once this node's sealer wrote what it was writing (maybe a day of it). Not for a marker of an
    // earlier life of the id (a replay): the project exists again, and its rows are the new one's.
    const sealer = p.fold.sealer;
    if (this.catalog.project(projectId) === undefined) {
      void (async () => {
        await sealer?.idle();
        await this.cp.sealed.eraseProject(projectId);
      })().catch((err: unknown) => this.log(`partition ${p.n}: sealed rows of ${projectId} not removed (the erasure removes them): ${String(err)}`));
    }
    this.log(`partition ${p.n}: project ${projectId} erased at sequence ${seq}${held ? '' : ' (nothing of it was held)'}`);
  }

  // ------------------------------------------------------------ in-flight batches (quota, eventId pre-check)

  /** A batch this node published is folded here: it no longer counts as in flight. */
  private folded(batchId: string): void {
    const b = this.inflight.get(batchId);
    if (!b) return;
    this.inflight.delete(batchId);
    this.release(b);
  }

  private release(b: InFlight): void {
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

  /** A pre-check that saves stream space where this node folds the partition; the fold is the authority. */
  seen(projectId: string, eventId: string, now: number): boolean {
    if (this.inflightIds.get(projectId)?.has(eventId)) return true;
    const p = this.partition(projectId);
    return p.active && isDuplicate(p.fold.state, projectId, eventId, now);
  }

  /**
   * History's pre-check: also the partition's table of history ids where this node folds it and caught up (a table
   * behind may not have taken an erasure yet). Elsewhere a repeat is acknowledged as accepted and the fold skips it.
   */
  seenForGood(projectId: string, eventId: string, now: number): boolean {
    if (this.seen(projectId, eventId, now)) return true;
    const p = this.partition(projectId);
    return p.active && p.caughtUp && p.history?.has(projectId, eventId) === true;
  }

  /**
   * GET /projects/{id}/export from the partition's stream (cluster-history.ts), on any node. The history-id table must
   * hold every message up to the stream's end as the export starts: where this node folds the partition, its fold
   * reaching that end brings it there; elsewhere the table kept in this node's data directory is read up to it.
   */
  async *exportEvents(projectId: string, from: string, to: string): AsyncGenerator<StoredEvent[]> {
    const p = this.partition(projectId);
    const end = await this.cp.log.lastSeq(p.n);
    if (p.active) {
      const reached = await this.barrier(p, EXPORT_BARRIER_MS);
      if (reached !== true) throw new Error(reached.unavailable);
    } else {
      const caughtUp = (p.columnsDrop ?? Promise.resolve()).then(async () => {
        const hist = (p.history ??= this.cp.openHistoryIds?.(p.n));
        if (hist && hist.marker() < end) await catchUpHistoryIds(hist, this.cp.log.read(p.n, hist.marker()), end, () => !this.closing);
      });
      p.columnsDrop = caughtUp.catch(() => {});
      await caughtUp;
    }
    yield* exportFromStream({ read: (after) => this.cp.log.read(p.n, after), end, table: p.history }, projectId, from, to);
  }

  /** Tests: the history ids this node's table of the project's partition holds for it (committed). */
  async historyIdCount(projectId: string): Promise<number> {
    const h = this.partition(projectId).history;
    if (!h) return 0;
    await h.flushed();
    return h.count(projectId);
  }

  /**
   * CLUSTER.md §8: where this node folds the partition, the folded count of the month; elsewhere the count its owner
   * published. Plus what this node acknowledged that the count does not cover yet.
   */
  usedThisMonth(projectId: string, now: number): number {
    const p = this.partition(projectId);
    if (p.active && p.caughtUp) return storedThisMonth(p.fold.state, projectId, now) + (this.inflightCounts.get(projectId) ?? 0);
    const published = this.cp.usage.get(projectId, utcMonthOf(now));
    if (published) {
      for (const [id, b] of this.inflight) {
        if (b.projectId === projectId && b.seq > 0 && b.seq <= published.seq) {
          this.inflight.delete(id);
          this.release(b);
        }
      }
    }
    return (published?.count ?? 0) + (this.inflightCounts.get(projectId) ?? 0);
  }

  /** StreamFold: one message per batch, acknowledged after the PubAck; a follower folds it. */
  async commit(projectId: string, records: LogRecord[], ids: Set<string>, stored: number): Promise<number | false> {
    const batchId = this.cp.batchIdFor(projectId, records);
    const p = this.partition(projectId);
    const b: InFlight = { projectId, partition: p.n, ids: new Set(ids), stored, seq: 0, at: this.now() };
    let idMap = this.inflightIds.get(projectId);
    if (!idMap) this.inflightIds.set(projectId, (idMap = new Map()));
    for (const id of ids) idMap.set(id, (idMap.get(id) ?? 0) + 1);
    this.inflightCounts.set(projectId, (this.inflightCounts.get(projectId) ?? 0) + stored);
    try {
      const appended = await this.cp.log.append(p.n, records, batchId);
      this.storageOk = true;
      b.seq = appended.seq;
      // Folded already (a fast follower), a transport repeat, or the same batch twice in flight: count it once.
      if ((p.active && appended.seq <= p.fold.state.lastSeq) || appended.duplicate || this.inflight.has(batchId)) this.release(b);
      else this.inflight.set(batchId, b);
      // Admitted just before the project was deleted, stored after its erasure began: erase this batch too.
      if (!this.catalog.project(projectId)) void this.erasure.erase(projectId).catch((err: unknown) => this.log(`project ${projectId}: erasure of a late batch failed (the timer retries): ${String(err)}`));
      return records.length;
    } catch (err) {
      this.release(b);
      this.log(`publish failed: ${err instanceof Error ? err.message : String(err)}`);
      return false;
    }
  }

  // ------------------------------------------------------------ reads

  async read(q: ReadQuery): Promise<{ value: MetricsResponse | RealtimeResponse } | ReadRefusal> {
    const p = this.partition(q.projectId);
    if (this.fold === 'all' || (p.active && this.ownership?.serves(p.n) === true)) {
      const reached = await this.barrier(p);
      if (reached !== true) return reached;
      return { value: answerRead({ state: p.fold.state, sealed: this.sealedSource }, q) };
    }
    try {
      return { value: await this.cp.reads.request<MetricsResponse | RealtimeResponse, ReadQuery>(p.n, q) };
    } catch (err) {
      if (err instanceof ReadUnavailableError) return { unavailable: `no node serves partition ${p.n} right now (${err.reason}); retry in a moment` };
      if (err instanceof ReadFailedError && err.code === 'unavailable') return { unavailable: err.message };
      throw err;
    }
  }

  /** The owner's side of a forwarded read or question: the read barrier, then the answer. */
  private async answerOwned(p: Partition, q: ReadQuery | QuestionRead): Promise<unknown> {
    const question = isQuestionRead(q);
    if (question && q.v !== QUESTION_WIRE_VERSION) throw Object.assign(new Error(`this node answers question version ${QUESTION_WIRE_VERSION}, not ${String(q.v)}`), { code: 'unsupported_read' });
    const kind = (q as { kind?: unknown }).kind;
    if (!question && kind !== 'metrics' && kind !== 'realtime') throw Object.assign(new Error(`unknown read kind ${JSON.stringify(kind)}`), { code: 'unsupported_read' });
    if (!p.active || (question && !p.columns)) throw Object.assign(new Error(`partition ${p.n} is starting on its owner; retry in a moment`), { code: 'unavailable' });
    const reached = await this.barrier(p, READ_TIMEOUT_MS - FORWARD_REPLY_MARGIN_MS);
    if (reached !== true) throw Object.assign(new Error(reached.unavailable), { code: 'unavailable' });
    if (!question) return answerRead({ state: p.fold.state, sealed: this.sealedSource }, q);
    if (!p.columns) throw Object.assign(new Error(`partition ${p.n} has no columns on its owner now; retry in a moment`), { code: 'unavailable' });
    return answerQuestion(p.columns, q);
  }

  /**
   * POST /query and /query/funnel: answered like a read, from the columns of the partition (locally after the read
   * barrier where this node serves it, else by its owner over the read subject); a refusal is a QuestionsUnavailable (503).
   */
  readonly questions: QueryEngine = {
    query: async (projectId, timezone, goals, question) =>
      (await this.ask({ kind: 'query', v: QUESTION_WIRE_VERSION, projectId, timezone, goals: [...goals], question })) as QueryAnswer,
    funnel: async (projectId, timezone, question) => (await this.ask({ kind: 'funnel', v: QUESTION_WIRE_VERSION, projectId, timezone, question })) as FunnelStepAnswer[],
  };

  private async ask(q: QuestionRead): Promise<unknown> {
    const p = this.partition(q.projectId);
    if (this.fold === 'all' || (p.active && this.ownership?.serves(p.n) === true)) {
      if (!p.columns) throw new QuestionsUnavailable(`partition ${p.n} has no columns on this node; retry in a moment`);
      const reached = await this.barrier(p);
      if (reached !== true) throw new QuestionsUnavailable(reached.unavailable);
      return answerQuestion(p.columns, q);
    }
    try {
      return await this.cp.reads.request<unknown, QuestionRead>(p.n, q);
    } catch (err) {
      if (err instanceof ReadUnavailableError) throw new QuestionsUnavailable(`no node serves partition ${p.n} right now (${err.reason}); retry in a moment`);
      if (err instanceof ReadFailedError && err.code === 'unavailable') throw new QuestionsUnavailable(err.message);
      if (err instanceof ReadFailedError && unsupportedRead(err.code, err.message)) {
        throw new QuestionsUnavailable(`the owner of partition ${p.n} does not answer questions (${err.message}): it runs another version; retry once the nodes are upgraded`);
      }
      throw err;
    }
  }

  /**
   * Read barrier (CLUSTER.md §6): the partition's last stream sequence, asked after the read arrived, then wait
   * (≤ READ_BARRIER_MS) until the fold has reached it. Reads arriving while a lastSeq request is in flight share the
   * next one.
   */
  private async barrier(p: Partition, budgetMs = READ_BARRIER_MS): Promise<true | ReadRefusal> {
    const deadline = Date.now() + budgetMs;
    let target: number;
    try {
      target = await withTimeout(this.barrierSeq(p), budgetMs);
    } catch {
      return { unavailable: 'the event stream did not answer in time; retry in a moment' };
    }
    if (p.fold.state.lastSeq >= target) return true;
    p.follower?.behind?.(target);
    const reached = await new Promise<boolean>((resolve) => {
      const t = setTimeout(() => resolve(false), Math.max(1, deadline - Date.now()));
      p.waiters.push({
        seq: target,
        resolve: (ok) => {
          clearTimeout(t);
          resolve(ok);
        },
      });
    });
    return reached ? true : { unavailable: `partition ${p.n} is still folding (at ${p.fold.state.lastSeq} of ${target}); retry in a moment` };
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

  // ------------------------------------------------------------ lifecycle

  /** Erases a deleted project's events, state, snapshots and usage everywhere (cluster-erasure.ts); resolves when done. */
  /** An erase marker in the stream carries an interrupted deletion on; nothing waits here. */
  async finishInterruptedErasures(): Promise<void> {}

  async eraseProject(projectId: string): Promise<void> {
    for (const [id, b] of this.inflight) {
      if (b.projectId !== projectId) continue;
      this.inflight.delete(id);
      this.release(b);
    }
    await this.erasure.erase(projectId);
  }

  async bootstrapAdminKey(config: Readonly<Config>, now: number): Promise<void> {
    const key = config.adminKey;
    if (key === undefined) throw new Error('cluster mode needs ANALYTICS_ADMIN_KEY'); // config.ts refuses this earlier
    const created = await this.cp.catalog.ensureAdminKey(hashKey(key), { kind: 'admin', ownerId: 'o_admin', createdAt: now });
    this.log(`admin key: from ANALYTICS_ADMIN_KEY (${keyHint(key)})${created ? ', stored in the cluster catalog' : ''}`);
  }

  health(): { ready: boolean } {
    return { ready: this.cp.catalog.isMirrorReady && !this.crashed };
  }

  rateShare(): number {
    return Math.max(1, this.ownership?.liveMembers().length ?? 1);
  }

  startTimers(every: (ms: number, fn: () => void | Promise<void>) => void): void {
    every(this.config.snapshotIntervalMs, async () => {
      for (const p of this.parts) if (p.writer && p.active && p.caughtUp && p.fold.changed()) await p.fold.snapshotSoon();
    });
    every(COLUMN_FLUSH_MS, async () => {
      for (const p of this.parts) {
        if (!p.active) continue;
        p.history?.advance(p.fold.state.lastSeq); // the fold gave it every history id up to there
        await p.columns?.flush();
      }
    });
    every(PRUNE_EVERY_MS, () => {
      for (const p of this.parts) p.fold.prune(this.now());
    });
    every(REST_EVERY_MS, async () => {
      for (const p of this.parts) if (p.active) await p.fold.rest();
    });
    every(INFLIGHT_SWEEP_MS, () => {
      const old = this.now() - INFLIGHT_FORGET_MS;
      for (const [id, b] of this.inflight) {
        if (b.at < old) {
          this.inflight.delete(id);
          this.release(b);
        }
      }
    });
    if (this.fold === 'owner') every(USAGE_PUBLISH_MS, () => this.publishUsage());
    // Erasures a node left unfinished: all of them now (startup), then those that stopped moving.
    void this.erasure.finishPending(true).catch((err: unknown) => this.log(`pending erasures not checked (the timer retries): ${String(err)}`));
    every(ERASE_CHECK_MS, () => this.erasure.finishPending(false));
    every(TICK_CHECK_MS, () => this.tickIdle());
  }

  /**
   * The lease holder of a partition with state whose newest folded receive time is TICK_IDLE_MS behind the clock
   * appends a clock tick: every node folding the partition then seals the days that closed meanwhile, in log order.
   * Tests and benches call it after moving the clock.
   */
  async tickIdle(): Promise<void> {
    const now = this.now();
    for (const p of this.parts) {
      const state = p.fold.state;
      // a day held live for history whose import went quiet is due before the idle hour is up
      const sealDue = state.nextSealCheck <= now && state.nextSealCheck > state.maxRt;
      if (!p.writer || !p.active || !p.caughtUp || state.projects.size === 0 || (!sealDue && now - state.maxRt < TICK_IDLE_MS)) continue;
      if (this.fold === 'owner' && this.ownership?.serves(p.n) !== true) continue;
      await this.cp.log.append(p.n, [{ t: 'k', rt: now }], `k:${p.n}:${now}`).catch((err: unknown) => this.log(`partition ${p.n}: clock tick failed: ${err instanceof Error ? err.message : String(err)}`));
    }
  }

  /** Owners publish each project's monthly count when it changed, for projects with a quota (CLUSTER.md §8). */
  private async publishUsage(): Promise<void> {
    const now = this.now();
    const month = utcMonthOf(now);
    for (const p of this.parts) {
      if (!p.writer || !p.active || !p.caughtUp || this.ownership?.serves(p.n) !== true) continue;
      for (const id of p.fold.state.projects.keys()) {
        const quota = this.catalog.project(id)?.monthlyQuota ?? 0;
        if (quota <= 0) continue;
        const count = storedThisMonth(p.fold.state, id, now);
        if (p.published.get(id) === count) continue;
        p.published.set(id, count);
        await this.cp.usage.publish(id, month, { count, seq: p.fold.state.lastSeq }).catch((err: unknown) => {
          p.published.delete(id);
          this.log(`usage publish failed: ${err instanceof Error ? err.message : String(err)}`);
        });
      }
    }
  }

  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    if (this.crashed) return;
    // Release the leases first (SIGTERM: successors claim at once), then the last snapshots of what this node wrote.
    const writer = this.parts.map((p) => p.writer && p.active && p.caughtUp);
    await this.ownership?.stop({ release: true }).catch((err: unknown) => this.log(`releasing leases failed: ${String(err)}`));
    for (let n = 0; n < this.parts.length; n++) this.cp.reads.unserve(n);
    await Promise.all(this.parts.map((p) => p.follower?.stop()));
    for (const p of this.parts) for (const w of p.waiters) w.resolve(false);
    await this.sealingIdle();
    await Promise.all(this.parts.map(async (p, i) => (writer[i] && p.fold.changed() ? p.fold.snapshotSoon() : p.fold.snapshotIdle())));
    await Promise.all(this.parts.map((p) => p.columnsDrop));
    await Promise.all(this.parts.map((p) => p.columns?.close().catch((err: unknown) => this.log(`partition ${p.n}: closing its columns failed: ${String(err)}`))));
    for (const p of this.parts) if (p.active) p.history?.advance(p.fold.state.lastSeq);
    await Promise.all(this.parts.map((p) => p.history?.close().catch((err: unknown) => this.log(`partition ${p.n}: closing its history ids failed: ${String(err)}`))));
    await this.cp.log.close();
    await this.cp.snapshots.close();
    await this.cp.close();
  }

  /** Dies as a kill -9 would leave the cluster (ClusterBackendOptions.crashable: tests only). */
  private async crash(): Promise<void> {
    this.crashed = true;
    await this.ownership?.stop({ release: false });
    await Promise.all(this.parts.map((p) => p.follower?.stop()));
    await this.cp.close();
  }

  stats(): BackendStats {
    const counts = { liveDays: 0, awakeDays: 0 };
    for (const p of this.parts) dayCounts(p.fold.state, counts);
    return { ...counts, sealedDays: this.cp.sealed.dayCount(), columns: sumOpenStats(this.parts.flatMap((p) => (p.columns ? [p.columns.openStats()] : []))) };
  }

  async applyRetention(): Promise<number> {
    return 0; // the stream's max_age (ANALYTICS_RETENTION_DAYS) does it
  }

  async sealingIdle(): Promise<void> {
    await Promise.all(this.parts.map((p) => p.fold.sealer.idle()));
  }

  /** Tests and benches: a snapshot of every partition folded here now, whoever holds the lease. */
  async snapshotNow(): Promise<void> {
    await Promise.all(this.parts.filter((p) => p.active).map((p) => p.fold.snapshotSoon()));
  }

  /** Tests: which partitions this node answers reads for right now (fenced in). */
  serving(): number[] {
    return this.ownership?.owned() ?? [];
  }

  /** Tests: the partition of a project. */
  partitionOfProject(projectId: string): number {
    return this.cp.partitionOf(projectId);
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
