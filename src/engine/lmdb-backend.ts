// long because the single node's backend wires one fold to the LMDB log, snapshots, sealing, columns, remembered ids, erasure and the timers that drive them.
import { existsSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Config } from '../config.ts';
import type { SealedSource } from '../core/day-view.ts';
import { sealedSource } from '../core/sealed-source.ts';
import { collectSealable, dayCounts, sealAt, storedThisMonth, type AnalyticsState } from '../core/state.ts';
import type { LogRecord, MetricsResponse, RealtimeResponse, StoredEvent } from '../core/types.ts';
import { createEnricher, type Enricher } from '../enrich/index.ts';
import type { QueryEngine } from '../core/query/types.ts';
import { ColumnStore } from '../store/lmdb/column-store.ts';
import { LmdbCatalog } from '../store/lmdb/lmdb-catalog.ts';
import type { HistoryIds } from '../store/lmdb/history-ids.ts';
import { assertEnvironmentSoundAsync, assertWritable } from '../store/lmdb/lmdb-probe.ts';
import { LogStore, type StoreFaults } from '../store/lmdb/log-store.ts';
import type { KeyRecord } from '../store/records.ts';
import type { RememberedIds } from '../store/lmdb/remembered-ids.ts';
import type { SealedStore } from '../store/lmdb/sealed-store.ts';
import { SnapshotFiles } from '../store/files/snapshot-files.ts';
import type { Backend, BackendStats, ReadRefusal, ReadView } from './backend.ts';
import { exportEvents } from './history-export.ts';
import { COLUMN_FLUSH_MS, ColumnProjection } from './column-projection.ts';
import { generateKey, hashKey, keyHint } from './keys.ts';
import type { OperatorMetrics } from './operator-metrics.ts';
import { answerRead, type ReadQuery } from './read-query.ts';
import { recoverState } from './recovery.ts';
import { REST_EVERY_MS } from './day-rest.ts';
import { PartitionFold, PRUNE_EVERY_MS } from './partition-fold.ts';
import { Snapshotter } from './snapshotter.ts';

/** Records examined per retention slice before yielding to requests. */
const RETENTION_SLICE = 10_000;
const DAY_MS = 86_400_000;
/** Re-check that storage accepts writes this often while idle (health). */
const HEALTH_PROBE_EVERY_MS = 10_000;
/**
 * The fold's clock moves with the records it folds; when they stop (an import ended), days kept live for history
 * (HISTORY_QUIET_MS) would wait for the next event. This often the clock is moved to now, so they are sealed.
 */
const CLOCK_TICK_EVERY_MS = 2_000;

/**
 * Single-node mode (the default): a cluster of one partition whose fold runs inline. The LMDB log, InlineFold (append
 * → await the commit → fold in sequence order → ack) into one PartitionFold, eventIds remembered in LMDB with their
 * events (refused before the append, so the log holds no repeats), sealed days in LMDB, snapshot files beside it.
 */
export class LmdbBackend implements Backend {
  readonly catalog: LmdbCatalog;
  /** eventIds appended but not yet folded, so two concurrent requests cannot both store the same id */
  private readonly pendingIds = new Map<string, Set<string>>();
  /** events appended but not yet folded, per project (the quota must see them) */
  private readonly pendingCounts = new Map<string, number>();
  /** folds run in append (= sequence) order */
  private foldTail: Promise<void> = Promise.resolve();
  /** deleted projects being erased, one after the other (see eraseProject) */
  private erasing: Promise<void> = Promise.resolve();
  /** set by close: an erasure under way stops at its next slice and stays pending */
  private erasureStopped = false;
  storageOk = true;
  /** the one partition's fold: day state, sealer, snapshot schedule, and the projections it feeds */
  private readonly fold: PartitionFold;
  private readonly sealed: SealedSource;
  private readonly sealedStore: SealedStore;
  private readonly ids: RememberedIds;
  private readonly historyIds: HistoryIds;
  private readonly view: ReadView;
  /** the column store: answers POST /query and funnels */
  readonly questions: QueryEngine;

  private constructor(
    private readonly config: Readonly<Config>,
    private readonly store: LogStore,
    state: AnalyticsState,
    readonly enricher: Enricher,
    private readonly snapshotter: Snapshotter,
    private readonly now: () => number,
    private readonly log: (line: string) => void,
    private readonly ops: OperatorMetrics | undefined,
    private readonly columns: ColumnProjection,
  ) {
    this.questions = columns;
    this.catalog = new LmdbCatalog(store);
    // State of a project deleted before its erasure finished (a crash): drop it, and every snapshot still holding it.
    const known = new Set(store.projectIds());
    for (const id of [...state.projects.keys()]) {
      if (!known.has(id)) {
        state.projects.delete(id);
        snapshotter.purgePending = true;
      }
    }
    this.ids = store.openRememberedIds();
    this.historyIds = store.openHistoryIds();
    void this.ids.start(now(), log);
    this.sealedStore = store.openSealedStore();
    this.sealed = sealedSource(this.sealedStore);
    const ids = this.ids;
    this.fold = new PartitionFold(state, {
      numbering: 'record',
      repeatsInLog: false,
      sealed: this.sealedStore,
      writeSnapshot: (_fold, opts) => snapshotter.write(opts),
      snapshotEveryEvents: config.snapshotEveryEvents,
      projections: [
        // the eventIds this fold applied are remembered on the heap until the store's expiry (the append wrote them)
        {
          fold(_seq, records) {
            for (const r of records) if (r.t === 'e' && r.eventId !== undefined && r.h !== 1) ids.remember(r.p, r.eventId);
          },
        },
        columns,
      ],
      log,
    });
    this.view = { state, sealed: this.sealed };
    // Days whose window closed before the snapshot or during the replay are sealed now, in the background.
    collectSealable(state);
    this.fold.sealer.kick();
    void this.snapshotter.prewarm().catch((err: unknown) => log(`snapshot warm-up failed: ${err instanceof Error ? err.message : String(err)}`));
  }

  /** `faults`: tests of failing disks make the log's writes fail (StoreFaults); absent in service. */
  static async open(config: Readonly<Config>, now: () => number, log: (line: string) => void, ops: OperatorMetrics | undefined, faults?: StoreFaults): Promise<LmdbBackend> {
    // Before LMDB maps the file: a directory that cannot be written, or damaged pages, are refused with a message.
    assertWritable(config.dataDir);
    // The walk runs in a child process on another core while this one reads the newest snapshot file (both take a
    // few hundred ms at 500k events); LMDB is opened only once the walk has found it sound.
    const walking = assertEnvironmentSoundAsync(config.dataDir);
    const files = new SnapshotFiles(config.dataDir, { deltas: true });
    files.prefetchNewest();
    const walked = await walking;
    if (walked) log(`storage checked: ${walked.records} records of analytics.lmdb read in ${walked.ms} ms`);
    const store = LogStore.open(config.dataDir, config.durability, { log, faults });
    const columns = new ColumnProjection(ColumnStore.open(config.dataDir), log);
    const state = await recoverState(store, files, log, [columns.replayConsumer()]);
    const enricher = await createEnricher({
      geoDbPath: config.geoDbPath,
      salts: { load: async () => store.loadSalts(), save: (s) => store.saveSalts(s) },
      now: now(),
    });
    ops?.snapshotOnDisk(files.newestBytes());
    const snapshotter = new Snapshotter(state, files, ops ? (s, b) => ops.snapshot(s, b) : undefined);
    // The columns caught up in the same pass (from their own marker: at most a flush interval of events, or everything
    // when the columns file is new). Sealing them now is an optimisation: on a full disk the open segments wait in the
    // heap for the next flush, and the service starts anyway (health tells what a write gets).
    if (columns.openCount() > 0) {
      await columns.flush().catch((err: unknown) => log(`sealing column segments at start failed (retried on the next flush): ${err instanceof Error ? err.message : String(err)}`));
    }
    return new LmdbBackend(config, store, state, enricher, snapshotter, now, log, ops, columns);
  }

  /** Deletions interrupted by a crash: their projects and keys are gone, their events not yet; finished here. */
  async finishInterruptedErasures(): Promise<void> {
    for (const id of this.store.pendingErasures()) await this.eraseProject(id);
    await this.erasuresSettled();
  }

  settled(withIds = true): Promise<void> {
    // After a project deletion the store compacts and swaps its file; the eventId check may read LMDB. Until the
    // startup check of the remembered eventIds against the log is done, a damaged or lost id cannot be told from a new
    // one: a batch with ids waits for it (a resend must find its id back), a batch without goes on.
    const checking = withIds ? this.ids.settled() : undefined;
    return checking ? Promise.all([checking, this.store.settled()]).then(() => {}) : this.store.settled();
  }

  seen(projectId: string, eventId: string, now: number): boolean {
    return this.pendingIds.get(projectId)?.has(eventId) === true || this.ids.has(projectId, eventId, now);
  }

  /** The pre-check leaves the stored history ids to the append's transaction, which claims them (see commit). */
  seenForGood(projectId: string, eventId: string, now: number): boolean {
    return this.seen(projectId, eventId, now);
  }

  exportEvents(projectId: string, from: string, to: string): AsyncGenerator<StoredEvent[]> {
    return exportEvents(this.store, projectId, from, to);
  }

  historyDaysLive(): number {
    let n = 0;
    // recent days stay live anyway (events may still arrive for them): only days past their seal time count
    const state = this.fold.state;
    for (const p of state.projects.values()) for (const d of p.days.values()) if (d.heldUntil > 0 && sealAt(d.day) <= state.maxRt) n++;
    return n;
  }

  usedThisMonth(projectId: string, now: number): number {
    return storedThisMonth(this.fold.state, projectId, now) + (this.pendingCounts.get(projectId) ?? 0);
  }

  /**
   * InlineFold: append (await the commit), fold in sequence order, then the caller acknowledges. History events whose
   * id the append's transaction finds stored already are dropped there (HistoryIds.claim) and not counted.
   */
  async commit(projectId: string, records: LogRecord[], ids: Set<string>, stored: number): Promise<number | false> {
    let pending = this.pendingIds.get(projectId);
    if (!pending) this.pendingIds.set(projectId, (pending = new Set()));
    for (const id of ids) pending.add(id);
    this.pendingCounts.set(projectId, (this.pendingCounts.get(projectId) ?? 0) + stored);

    const appendStarted = performance.now();
    let kept: readonly LogRecord[] = records;
    // The ids are written in the append's own transaction: durable exactly when their events are.
    const appended = this.store.append(
      records,
      () => this.ids.writeWith(kept),
      (given) => (kept = this.historyIds.claim(given)),
    );
    let ok = false;
    const folded = this.foldTail.then(async () => {
      try {
        const first = await appended;
        if (this.ops) this.ops.commitSeconds((performance.now() - appendStarted) / 1000);
        if (kept.length > 0) this.fold.fold(first, kept);
        this.writeSucceeded();
        ok = true;
      } catch (err) {
        this.writeFailed(err);
      } finally {
        for (const id of ids) pending.delete(id);
        this.pendingCounts.set(projectId, (this.pendingCounts.get(projectId) ?? 0) - stored);
      }
    });
    this.foldTail = folded;
    await folded;
    return ok ? kept.length : false;
  }

  async read(q: ReadQuery): Promise<{ value: MetricsResponse | RealtimeResponse } | ReadRefusal> {
    if (!this.store.readable()) return { unavailable: 'storage is swapping in its compacted file after a project deletion; retry in a moment' };
    return { value: answerRead(this.view, q) };
  }

  /**
   * Starts erasing a deleted project's events from the log, its state, the columns and every snapshot file, after
   * the erasures already queued, and returns at once: the project is already gone for every request (the catalog
   * and its keys went first), and its pending-erasure entry resumes the work after a crash. A snapshot asked for
   * (snapshotNow) waits for the queue, so "by the next snapshot" holds; erasuresSettled() waits for it too.
   */
  eraseProject(projectId: string): Promise<void> {
    this.erasing = this.erasing
      .then(() => (this.erasureStopped ? undefined : this.erase(projectId)))
      .catch((err: unknown) => this.log(`erasing project ${projectId} failed (resumed at the next start): ${err instanceof Error ? err.message : String(err)}`));
    return Promise.resolve();
  }

  /** Resolves once every queued erasure has finished (or stopped for shutdown). */
  async erasuresSettled(): Promise<void> {
    await this.erasing;
  }

  private async erase(projectId: string): Promise<void> {
    const started = performance.now();
    await this.foldTail; // batches appended before the delete are folded (and so erased below)
    // Its live state goes first, and no day of it is left queued or being written by the sealer, so nothing of it
    // is sealed again after the store has erased its sealed days, month rollups and remembered eventIds.
    const state = this.fold.state;
    state.projects.delete(projectId);
    state.sealQueue = state.sealQueue.filter((r) => r.projectId !== projectId);
    await this.fold.sealer.idle();
    const n = await this.store.eraseProjectEvents(projectId, { stopped: () => this.erasureStopped });
    if (this.erasureStopped) return; // shutdown: the project is still pending, the next start finishes it
    await this.columns.erase(projectId);
    state.projects.delete(projectId);
    this.pendingIds.delete(projectId);
    this.pendingCounts.delete(projectId);
    // The snapshots on disk still hold the project's aggregates: replace them all with one without it.
    await this.fold.snapshot({ replaceAll: true });
    await this.store.erasureDone(projectId);
    this.log(`project ${projectId} deleted; ${n} log records erased from every file in ${Math.round(performance.now() - started)} ms`);
  }

  async bootstrapAdminKey(config: Readonly<Config>, now: number): Promise<void> {
    const configured = config.adminKey;
    const record: KeyRecord = { kind: 'admin', ownerId: 'o_admin', createdAt: now };
    if (configured !== undefined) {
      // A configured key is the only admin key: a generated or earlier configured one stops working (rotation).
      await this.store.replaceAdminKeys(hashKey(configured), this.store.getKey(hashKey(configured)) ?? record);
      this.log(`admin key: from ANALYTICS_ADMIN_KEY (${keyHint(configured)}); any other admin key is revoked`);
      // A generated key left in its file would now answer 401: remove it rather than let someone try it.
      const file = path.join(config.dataDir, 'admin.key');
      if (existsSync(file) && readFileSync(file, 'utf8').trim() !== configured) {
        unlinkSync(file);
        this.log(`removed ${file}: its key is revoked`);
      }
      return;
    }
    if (this.store.hasAdminKey()) return;
    const key = generateKey('admin');
    const file = path.join(config.dataDir, 'admin.key');
    writeFileSync(file, `${key}\n`, { mode: 0o600 });
    await this.store.putKey(hashKey(key), record);
    await this.store.putMeta('admin_key_created', true);
    // Never the key itself: logs are read by more people than the data directory.
    this.log(`admin key generated and written to ${file} (${keyHint(key)})`);
  }

  health(startedAt: number): { ready: boolean; log: { lastSeq: number; verifiedRecords: number; verifiedAt: string; ok: boolean } } {
    return {
      ready: true,
      log: { lastSeq: this.store.lastSeq(), verifiedRecords: this.store.verified, verifiedAt: new Date(startedAt).toISOString(), ok: true },
    };
  }

  rateShare(): number {
    return 1;
  }

  startTimers(every: (ms: number, fn: () => void | Promise<void>) => void): void {
    every(this.config.snapshotIntervalMs, () => this.fold.snapshotIfChanged());
    every(COLUMN_FLUSH_MS, () => this.columns.flush());
    every(REST_EVERY_MS, async () => void (await this.fold.rest()));
    every(PRUNE_EVERY_MS, async () => {
      await this.ids.expire(this.now());
      this.fold.prune(this.now());
      await this.applyRetention();
    });
    every(CLOCK_TICK_EVERY_MS, async () => {
      await this.foldTail; // never between an append and its fold
      this.fold.tick(this.now());
    });
    every(HEALTH_PROBE_EVERY_MS, async () => {
      try {
        await this.store.probeWrite(this.now());
        this.store.probeSpace();
        this.writeSucceeded();
      } catch (err) {
        this.writeFailed(err);
      }
    });
  }

  /** Storage refuses writes: one line when it starts (not one per refused batch), health 503 until a write succeeds. */
  private writeFailed(err: unknown): void {
    const was = this.storageOk;
    this.storageOk = false;
    if (was) this.log(`storage write failed: ${this.store.describeWriteFailure(err)}; writes answer 503 until storage accepts them again`);
  }

  private writeSucceeded(): void {
    if (!this.storageOk) this.log('storage accepts writes again');
    this.storageOk = true;
  }

  async close(): Promise<void> {
    this.erasureStopped = true; // an erasure under way stops at its next slice; the next start resumes it
    await this.erasing;
    await this.foldTail;
    await this.fold.sealer.idle();
    await this.fold.snapshotIfChanged();
    const failed = this.fold.failure;
    await this.snapshotter.close();
    await this.columns.close();
    await this.ids.stop();
    await this.store.close();
    // Nothing acknowledged is lost (the log has it), but the operator must know the directory refuses writes.
    if (failed !== undefined) throw new Error(`the final snapshot could not be written in ${path.join(this.config.dataDir, 'snapshots')}: ${failed}; the next start replays the log instead`);
  }

  stats(): BackendStats {
    return { ...dayCounts(this.fold.state), sealedDays: this.sealedStore.dayCount(), columns: this.columns.openStats() };
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
    // never past the columns' marker either (a restart replays the columns from it): seal them first
    await this.columns.flush();
    const limit = Math.min(this.snapshotter.oldestKeptSeq(), this.columns.marker());
    const state = this.fold.state;
    let keepFrom = this.store.logStart();
    for (;;) {
      let n = 0;
      let stopped = false;
      for (const { seq, record } of this.store.readAfter(keepFrom - 1)) {
        // An erased entry (its project was deleted) holds nothing: it goes with the prefix it is in.
        const kept =
          seq > limit ||
          (record.t !== 'x' &&
            (record.rt >= cutoff || state.projects.get(record.p)?.days.get(record.day) !== undefined || sealAt(record.day) > state.maxRt));
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

  async sealingIdle(): Promise<void> {
    await this.fold.sealer.idle();
  }

  async snapshotNow(): Promise<void> {
    await this.erasing;
    await this.fold.snapshot();
  }
}
