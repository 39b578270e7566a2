import { AnalyticsState, apply, applyOnce, dropProject, pruneEventIds } from '../core/state.ts';
import type { FoldRecord } from '../core/types.ts';
import { DayRest } from './day-rest.ts';
import { Sealer, type SealedWriter } from './sealer.ts';

/**
 * The fold of one partition of the log, in log order, the same in both modes: a single node is a cluster of one
 * partition whose fold runs inline after the local commit; a cluster node holds one per partition it folds, fed by
 * that partition's follower. It owns the day state, the sealer that takes the state's closed days, the snapshot
 * schedule (every `snapshotEveryEvents` records folded, on the caller's interval, at close) and the pruning of
 * remembered eventIds, and feeds every applied record to the projections it serves (the column store, the single
 * node's remembered eventIds), and puts idle days to sleep. Where snapshots and sealed days are written is handed in; when to acknowledge is not
 * its business.
 */

/** Prune remembered eventIds this often; they expire after 48 h, so hourly keeps at most ~49 h of them. */
export const PRUNE_EVERY_MS = 3_600_000;

/** Another projection of the log fed from this fold: what the state applied, in log order. */
export interface Projection {
  /** `seq` is the log position of the first record (numbering 'record') or of the message holding them ('message') */
  fold(seq: number, applied: readonly FoldRecord[]): void;
  /** a deleted project's erase marker at `seq`, before anything later is fed */
  erase?(projectId: string, seq: number): void;
}

/** Writes a snapshot of the fold's state: captured synchronously when called, durable when it resolves. */
export type SnapshotWriter = (fold: PartitionFold, opts: SnapshotOptions) => Promise<unknown>;

export interface SnapshotOptions {
  /** every older snapshot goes once this one is written (state was dropped that they still hold) */
  replaceAll?: boolean;
}

export interface PartitionFoldOptions {
  /**
   * How the log numbers its records: 'record' (the LMDB log: one sequence per record) or 'message' (a JetStream
   * partition: one sequence per message, a batch of records).
   */
  numbering: 'record' | 'message';
  /**
   * The log may hold repeats of an eventId (a stream takes every batch published): the fold applies the 48 h
   * eventId rule itself (applyOnce). Without it the rule ran before the append and every record is applied.
   */
  repeatsInLog: boolean;
  sealed: SealedWriter;
  writeSnapshot: SnapshotWriter;
  /** records folded after which a snapshot is taken */
  snapshotEveryEvents: number;
  /** whether this node writes the partition's snapshots now (cluster: the lease holder) */
  writesSnapshots?: (() => boolean) | undefined;
  /** a deleted project's erase marker was folded (its state already dropped; `held`: the state had some of it) */
  erased?: ((projectId: string, seq: number, held: boolean) => void) | undefined;
  projections?: readonly Projection[] | undefined;
  /**
   * Cluster: the partition's table of history eventIds (store/lmdb/partition-history-ids.ts): a history record whose
   * id an earlier history record of the log carried is a repeat, at any distance. Fed every history id in log order.
   */
  historyIds?: HistoryIdLedger | undefined;
  log: (line: string) => void;
}

/** The eventIds of history records in the log: the first sequence carrying each, off the heap. */
export interface HistoryIdLedger {
  firstSeq(projectId: string, eventId: string): number | undefined;
  /** the history ids of the message at `seq` (all of them, counted or not) */
  note(seq: number, records: readonly FoldRecord[]): void;
  /** a deleted project's erase marker at `seq` */
  erase(projectId: string, seq: number): void;
}

/**
 * The history-repeat rule of the message at `seq`: was a history id carried by an earlier message (`firstSeq`: the
 * ledger; a replay of the same message finds its own sequence, not an earlier one) or earlier in this one? Numbering
 * 'message' only: every record of a message has its sequence. The fold and the cluster's export both judge by it.
 */
export function historyRepeats(firstSeq: (projectId: string, eventId: string) => number | undefined, seq: number): (projectId: string, eventId: string) => boolean {
  let inMessage: Set<string> | undefined;
  return (projectId, eventId) => {
    const first = firstSeq(projectId, eventId);
    if (first !== undefined && first < seq) return true;
    const k = `${projectId}\u0000${eventId}`;
    if (inMessage?.has(k)) return true;
    (inMessage ??= new Set()).add(k);
    return false;
  };
}

export class PartitionFold {
  state: AnalyticsState;
  /** writes this state's closed days (a new one with every new state) */
  sealer: Sealer;
  /** the batch id of the last message folded (cluster: a snapshot names it, so a resume can check its place) */
  lastBatchId: string | undefined;
  /** the sequence of the newest snapshot written (or started from) */
  snapshotSeq: number;
  /** records folded since the last snapshot was captured */
  private sinceSnapshot = 0;
  private snapshotting: Promise<void> | undefined;
  /** why the newest snapshot attempt failed; undefined once one succeeds (shutdown reports it) */
  failure: string | undefined;
  private readonly projections: Projection[];
  /** puts the days nobody writes to back to sleep (the caller's timer runs rest every REST_EVERY_MS) */
  private readonly resting = new DayRest(() => this.state);

  constructor(
    state: AnalyticsState,
    private readonly opts: PartitionFoldOptions,
  ) {
    this.state = state;
    this.sealer = new Sealer(state, opts.sealed, opts.log);
    this.snapshotSeq = state.lastSeq;
    this.projections = [...(opts.projections ?? [])];
  }

  /** A new starting point (a snapshot restored, or nothing): its own sealer, the snapshot schedule from there. */
  restart(state: AnalyticsState, lastBatchId: string | undefined): void {
    this.state = state;
    this.sealer = new Sealer(state, this.opts.sealed, this.opts.log);
    this.lastBatchId = lastBatchId;
    this.snapshotSeq = state.lastSeq;
    this.sinceSnapshot = 0;
  }

  /** Stops holding state (the partition is folded elsewhere now); the sealer finishes what it was writing. */
  clear(): void {
    this.state = new AnalyticsState();
  }

  /**
   * Folds the records of one log position (numbering 'message') or the records at `seq`, `seq + 1`, ... ('record'),
   * feeds what was applied to the projections, hands closed days to the sealer and takes a snapshot when due.
   * `entry.erase`: a deleted project's erase marker (no records): its state goes, and the projections drop it.
   */
  fold(seq: number, records: readonly FoldRecord[], entry: { batchId?: string | undefined; erase?: string | undefined } = {}): void {
    const state = this.state;
    const perRecord = this.opts.numbering === 'record' ? 1 : 0;
    let applied: readonly FoldRecord[] = records;
    if (this.opts.repeatsInLog) {
      const kept: FoldRecord[] = [];
      const ledger = this.opts.historyIds;
      const seen = ledger ? historyRepeats((p, id) => ledger.firstSeq(p, id), seq) : undefined;
      for (let i = 0; i < records.length; i++) if (applyOnce(state, seq + i * perRecord, records[i]!, seen)) kept.push(records[i]!);
      applied = kept;
      this.opts.historyIds?.note(seq, records);
    } else {
      for (let i = 0; i < records.length; i++) apply(state, seq + i * perRecord, records[i]!);
    }
    if (!perRecord) state.lastSeq = seq; // a message without records (an erase marker) moves the fold too
    if (this.opts.numbering === 'message') this.lastBatchId = entry.batchId;
    if (entry.erase !== undefined) {
      const held = dropProject(state, entry.erase);
      this.opts.historyIds?.erase(entry.erase, seq);
      this.opts.erased?.(entry.erase, seq, held);
      for (const p of this.projections) p.erase?.(entry.erase, seq);
    }
    for (const p of this.projections) p.fold(seq, applied);
    this.sinceSnapshot += records.length;
    this.sealer.kick();
    if (this.sinceSnapshot >= this.opts.snapshotEveryEvents && !this.snapshotting && this.writesSnapshots()) void this.snapshotSoon();
  }

  /**
   * Moves the fold's clock to `now` when no record did for a while, so days held live for history get sealed. Only
   * for a fold that is its log's one reader: where several nodes fold a log, the clock moves by a record in it.
   */
  tick(now: number): void {
    const state = this.state;
    if (now <= state.maxRt || state.nextSealCheck > now) return;
    apply(state, state.lastSeq, { t: 'k', rt: now });
    this.sealer.kick();
  }

  /** Puts live days idle long enough to sleep (engine/day-rest.ts); how many. */
  rest(): Promise<number> {
    return this.resting.pass();
  }

  /** Live days put to sleep since the start. */
  get daysRested(): number {
    return this.resting.slept;
  }

  /** Forgets remembered eventIds no later record can repeat (PRUNE_EVERY_MS). */
  prune(now: number): number {
    return pruneEventIds(this.state, now);
  }

  private writesSnapshots(): boolean {
    return this.opts.writesSnapshots?.() ?? true;
  }

  /** Whether records were folded since the newest snapshot written. */
  changed(): boolean {
    return this.state.lastSeq !== this.snapshotSeq;
  }

  /** A snapshot now, after the one being written (if any): it holds everything folded before this call's turn. */
  async snapshot(opts: SnapshotOptions = {}): Promise<void> {
    while (this.snapshotting) await this.snapshotting;
    await this.snapshotSoon(opts);
  }

  /** The snapshot being written, or a new one. */
  snapshotSoon(opts: SnapshotOptions = {}): Promise<void> {
    if (this.snapshotting) return this.snapshotting;
    const seq = this.state.lastSeq;
    this.sinceSnapshot = 0;
    const run = this.opts
      .writeSnapshot(this, opts)
      .then(() => {
        this.snapshotSeq = seq;
        this.failure = undefined;
      })
      .catch((err: unknown) => {
        this.failure = err instanceof Error ? err.message : String(err);
        this.opts.log(`snapshot failed: ${this.failure}`);
      })
      .finally(() => {
        this.snapshotting = undefined;
      });
    this.snapshotting = run;
    return run;
  }

  async snapshotIfChanged(): Promise<void> {
    if (this.changed()) await this.snapshot();
  }

  /** Resolves once no snapshot is being written. */
  async snapshotIdle(): Promise<void> {
    while (this.snapshotting) await this.snapshotting;
  }
}
