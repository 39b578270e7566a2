// long because the fold, the flush with its bounds, the quiet-day merge and the question paths all share the open segments and the pending writes.
import { encodeSegment } from '../core/columns/codec.ts';
import { FunnelRun } from '../core/columns/evaluate.ts';
import { QuestionRuns } from '../core/columns/question-runs.ts';
import { mergeDaySteps, type DayTable } from '../core/columns/day-table.ts';
import { DayIds, SegmentBuilder, type SegmentView } from '../core/columns/segment.ts';
import { eachDay, recentFrom, utcMidnight } from '../core/dates.ts';
import type { FunnelQuestion, FunnelStepAnswer, Goal, Question, QueryAnswer, QueryEngine } from '../core/query/types.ts';
import type { FoldRecord, LogRecord } from '../core/types.ts';
import { crc, DamagedSegmentError, type ColumnStore, type StoredSegment } from '../store/lmdb/column-store.ts';
import { OPEN_BYTES_BOUND, PROJECT_OPEN_BYTES, type OpenColumnStats, type SealReason } from './open-columns.ts';

/**
 * The column store as a projection of the log: fed (seq, records) in log order from the same fold point as the day
 * aggregates (single-node: LmdbBackend.commit; a cluster consumer can feed it the same way). Only open segments live
 * on the heap; they are sealed into the ColumnStore when the open events reach a bound, on an interval and at close,
 * each flush one transaction with the marker. It answers questions (QueryEngine) from sealed segments, segments
 * whose write is under way, and open segments, yielding to the event loop between slices.
 */

/**
 * Open events across all project-days before a flush: bounds the open columns to ~30–50 MiB. An open event costs ~40 B
 * of a busy day's columns, ~110 B of typed arrays with the slack of columns that grow by doubling and hundreds of days
 * open at once (a history import over a year, heap snapshot at 600k open events).
 */
export const OPEN_EVENTS_BOUND = 250_000;
/**
 * Open events of history (POST /projects/{id}/history) before a flush: an import walks through old days one after
 * another, so sealing them sooner costs no extra segments but its own open columns: measured from outside, a 1M-event
 * import's anonymous RSS peak went from +239 MiB (sealed at 250,000) to +149 MiB (at 50,000).
 */
export const OPEN_HISTORY_BOUND = 50_000;
/**
 * Open project-days before a flush: an open segment costs ~9 KiB before its first hundred events (its columns,
 * dictionaries and visit numbering), so a replay over thousands of small projects seals at ~180 MiB, not at 1M events.
 */
export const OPEN_DAYS_BOUND = 20_000;
/** Open segments are sealed this often: a restart replays at most this much of the log. */
export const COLUMN_FLUSH_MS = 60_000;
/**
 * Flushes a day of the clock's two newest dates keeps its numbering while it takes no events (~5 min at
 * COLUMN_FLUSH_MS): those days take traffic all day, and rebuilding a busy day's numbering when its next event comes
 * reads its whole visit and visitor dictionaries (~50 ms for 100,000 visits, inside the fold, where requests wait).
 */
export const RECENT_KEEP_FLUSHES = 5;

/** A question yields to the event loop after this much work, so a request never waits behind it longer. */
const SLICE_MS = 20;
/**
 * The flush's encoding and a quiet day's merge yield after this much: they run beside an import's requests, and two
 * slices can share one loop turn (a yield from I/O resumes in that turn's check phase). At 20 ms, a flush during
 * bench/history.ts held the loop for one 23.5 ms turn of the import's longest few.
 */
const BACKGROUND_SLICE_MS = 8;
/**
 * Events of day tables merged on the heap for questions (days with several sealed segments, not yet merged in the
 * store), kept for the next question: ~60 B an event, so ~120 MiB.
 */
const MERGED_CACHE_EVENTS = 2_000_000;

interface DayState {
  projectId: string;
  day: string;
  ids: DayIds;
  open: SegmentBuilder | undefined;
  /** events appended since the last flush (an idle day's numbering is dropped at the next flush) */
  touched: boolean;
  /** flushes since its last event (a recent day keeps its numbering for RECENT_KEEP_FLUSHES of them) */
  idleFlushes: number;
}

interface Pending {
  projectId: string;
  day: string;
  segNo: number;
  view: SegmentView;
  bytes: Uint8Array;
}

const dayKey = (projectId: string, day: string): string => `${projectId}\u0000${day}`;

/** A sealed segment's bytes before flushNow has encoded them (questions read its view meanwhile). */
const NOT_ENCODED_YET = new Uint8Array(0);

/** Encodes sealed segments one step each (for sliced). */
function* encodeSteps(list: readonly Pending[]): Generator<void, void> {
  for (const p of list) {
    p.bytes = encodeSegment(p.view, crc);
    yield;
  }
}

/** Runs a stepped computation, yielding to the event loop whenever a slice of work has passed. */
async function sliced<T>(steps: Generator<void, T>, sliceMs = SLICE_MS): Promise<T> {
  let sliceStart = performance.now();
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
    if (performance.now() - sliceStart >= sliceMs) {
      await new Promise((resolve) => setImmediate(resolve));
      sliceStart = performance.now();
    }
  }
}

export class ColumnProjection implements QueryEngine {
  private readonly days = new Map<string, DayState>();
  /** sealed segments whose write has not committed yet (questions read them from here meanwhile) */
  private readonly pending = new Map<string, Pending[]>();
  private openEvents = 0;
  /** of openEvents, those of history records */
  private openHistory = 0;
  private openDays = 0;
  /** SegmentBuilder.bytes of the open segments, in all and by project (the budgets' measure) */
  private openBytes = 0;
  private readonly projectBytes = new Map<string, number>();
  private largestProjectBytes = 0;
  private readonly seals: Record<SealReason, number> = { events: 0, history: 0, days: 0, bytes: 0, project_bytes: 0 };
  private foldedSeq: number;
  /** the newest receive time folded: which dates are recent (RECENT_KEEP_FLUSHES) */
  private maxRt = 0;
  private flushing: Promise<void> | undefined;
  /** the flush a bound started (queued behind one under way), until it is done */
  private boundFlush: Promise<void> | undefined;
  /** heap-merged day tables of sealed days, by day key, with the segment numbers they merge (most recent last) */
  private readonly merged = new Map<string, { sig: string; dt: DayTable }>();
  /** project-days whose damaged segment was logged already */
  private readonly damaged = new Set<string>();
  private mergedEvents = 0;

  constructor(
    private readonly store: ColumnStore,
    private readonly log: (line: string) => void,
  ) {
    this.foldedSeq = store.marker();
  }

  /** Log sequence up to which every event is sealed. */
  marker(): number {
    return this.store.marker();
  }

  fold(firstSeq: number, records: readonly FoldRecord[]): void {
    for (let i = 0; i < records.length; i++) {
      const r = records[i]!;
      if (r.t !== 'e') continue;
      const seq = firstSeq + i;
      const d = this.dayState(r.p, r.day);
      if (seq <= d.ids.coveredSeq) continue; // already in a sealed segment (replay after a bound flush, rebuild)
      if (!d.open) {
        d.open = new SegmentBuilder(utcMidnight(r.day), d.ids);
        this.openDays++;
      }
      const before = d.open.bytes();
      d.open.append(seq, r);
      this.grew(r.p, d.open.bytes() - before);
      d.touched = true;
      if (r.rt > this.maxRt) this.maxRt = r.rt;
      this.openEvents++;
      if (r.h === 1) this.openHistory++;
    }
    if (records.length > 0) this.foldedSeq = Math.max(this.foldedSeq, firstSeq + records.length - 1);
    // a bound reached while a flush is under way queues the next one, so open segments cannot outgrow it meanwhile
    if (!this.boundFlush && this.full()) {
      this.boundFlush = this.flush()
        .catch((err: unknown) => this.log(`sealing column segments failed: ${String(err)}`))
        .finally(() => (this.boundFlush = undefined));
    }
  }

  /** Counts bytes an append added to a project's open segments. */
  private grew(projectId: string, delta: number): void {
    if (delta === 0) return;
    this.openBytes += delta;
    const b = (this.projectBytes.get(projectId) ?? 0) + delta;
    this.projectBytes.set(projectId, b);
    if (b > this.largestProjectBytes) this.largestProjectBytes = b;
  }

  /** A replay consumer (recovery.ts): folds one record, and seals the open segments when they reach their bound. */
  replayConsumer(): { after: number; fold(seq: number, record: LogRecord): Promise<void> | undefined } {
    const one: LogRecord[] = [];
    return {
      after: this.marker(),
      fold: (seq, record) => {
        one[0] = record;
        this.fold(seq, one);
        return this.full() ? this.flush() : undefined;
      },
    };
  }

  /** At start: the log after the marker, into open segments (flushed as they reach the bound). */
  async replay(records: Iterable<{ seq: number; record: LogRecord }>): Promise<number> {
    let n = 0;
    const one: LogRecord[] = [];
    for (const { seq, record } of records) {
      one[0] = record;
      this.fold(seq, one);
      n++;
      if (this.full()) await this.flush();
    }
    return n;
  }

  private dayState(projectId: string, day: string): DayState {
    const k = dayKey(projectId, day);
    let d = this.days.get(k);
    if (!d) {
      const ids = new DayIds();
      for (const s of this.sealedOrNone(projectId, day)) ids.absorb(s.view, s.segNo);
      for (const p of this.pending.get(k) ?? []) ids.absorb(p.view, p.segNo);
      d = { projectId, day, ids, open: undefined, touched: false, idleFlushes: 0 };
      this.days.set(k, d);
    }
    return d;
  }

  /** Seals every open segment and moves the marker, in one transaction; idle days' numbering leaves the heap. */
  async flush(): Promise<void> {
    while (this.flushing) await this.flushing;
    const run = this.flushNow();
    this.flushing = run;
    try {
      await run;
    } finally {
      this.flushing = undefined;
    }
  }

  private async flushNow(): Promise<void> {
    const writes: Pending[] = [];
    const idle: DayState[] = [];
    const sealing: Pending[] = [];
    const recent = recentFrom(this.maxRt);
    for (const [k, d] of this.days) {
      d.idleFlushes = d.touched ? 0 : d.idleFlushes + 1;
      if (d.open && d.open.n > 0) {
        const view = d.open;
        const p: Pending = { projectId: d.projectId, day: d.day, segNo: d.ids.nextSegNo++, view, bytes: NOT_ENCODED_YET };
        sealing.push(p);
        d.ids.coveredSeq = view.lastSeq;
        d.open = undefined;
        const list = this.pending.get(k) ?? [];
        list.push(p);
        this.pending.set(k, list);
      } else if (!d.touched && !d.open && (d.day < recent || d.idleFlushes > RECENT_KEEP_FLUSHES)) {
        this.days.delete(k);
        idle.push(d);
      }
      d.touched = false;
    }
    this.openEvents = 0;
    this.openHistory = 0;
    this.openDays = 0;
    this.openBytes = 0;
    this.projectBytes.clear();
    this.largestProjectBytes = 0;
    // Taken before any yield: every event folded up to here is in a segment of `sealing`, later ones in new open ones.
    const marker = this.foldedSeq;
    // Encoding is most of a flush (a year's history import seals 250,000 events of hundreds of days at once, ~0.1 s
    // and more): in slices, so requests are answered meanwhile. The segments are in `pending` already, where
    // questions read their views, and new events go to new open segments.
    await sliced(encodeSteps(sealing), BACKGROUND_SLICE_MS);
    for (const list of this.pending.values()) writes.push(...list);
    if (writes.length > 0 || marker > this.store.marker()) {
      await this.store.write(writes, marker);
      for (const w of writes) {
        const k = dayKey(w.projectId, w.day);
        const list = this.pending.get(k)?.filter((p) => p !== w);
        if (list && list.length > 0) this.pending.set(k, list);
        else this.pending.delete(k);
      }
    }
    for (const d of idle) {
      await new Promise((resolve) => setImmediate(resolve));
      await this.mergeStored(d.projectId, d.day);
    }
  }

  /**
   * A day that took no events for a flush interval: its sealed segments become one segment grouped by visit, with
   * its visit table, so questions read it as is.
   */
  private async mergeStored(projectId: string, day: string): Promise<void> {
    const k = dayKey(projectId, day);
    if (this.pending.has(k)) return;
    const stored = this.sealedOrNone(projectId, day);
    if (stored.length === 0 || (stored.length === 1 && stored[0]!.table)) return;
    const dt = await sliced(mergeDaySteps(stored.map((s) => s.view)), BACKGROUND_SLICE_MS);
    if (this.sealedOrNone(projectId, day).length !== stored.length) return; // the day changed meanwhile: merged next time
    await this.store.replaceDay(
      projectId,
      day,
      stored.map((s) => s.segNo),
      encodeSegment(dt.view, crc, dt.table),
    );
    this.dropMerged(k);
  }

  /**
   * A day's sealed segments where the fold and the quiet-day merge read them: a damaged one is logged (once) and the
   * day taken as it is, so ingestion goes on; questions over it are refused (dayTable reads the store itself).
   */
  private sealedOrNone(projectId: string, day: string): StoredSegment[] {
    try {
      return this.store.day(projectId, day);
    } catch (err) {
      if (!(err instanceof DamagedSegmentError)) throw err;
      const k = dayKey(projectId, day);
      if (!this.damaged.has(k)) {
        this.damaged.add(k);
        this.log(err.message);
      }
      return [];
    }
  }

  private dropMerged(k: string): void {
    const m = this.merged.get(k);
    if (!m) return;
    this.merged.delete(k);
    this.mergedEvents -= m.dt.view.n;
  }

  /** Erasure: the project's open and sealed segments go (the columns file is compacted). */
  async erase(projectId: string): Promise<number> {
    while (this.flushing) await this.flushing;
    for (const [k, d] of this.days) {
      if (d.projectId !== projectId) continue;
      this.openEvents -= d.open?.n ?? 0;
      if (d.open) this.openDays--;
      this.days.delete(k);
    }
    this.openHistory = Math.min(this.openHistory, this.openEvents);
    this.openBytes -= this.projectBytes.get(projectId) ?? 0;
    this.projectBytes.delete(projectId);
    for (const k of [...this.pending.keys()]) if (k.startsWith(`${projectId}\u0000`)) this.pending.delete(k);
    for (const k of [...this.merged.keys()]) if (k.startsWith(`${projectId}\u0000`)) this.dropMerged(k);
    return this.store.eraseProject(projectId);
  }

  /**
   * The day table of one project-day: a merged segment as stored, else its segments (sealed, then written but
   * uncommitted, then the open one) merged on the heap, and kept for the next question when all are sealed.
   */
  private async dayTable(projectId: string, day: string): Promise<DayTable | undefined> {
    const k = dayKey(projectId, day);
    const stored = this.store.day(projectId, day);
    const pending = this.pending.get(k) ?? [];
    const open = this.days.get(k)?.open;
    const hasOpen = open !== undefined && open.n > 0;
    if (stored.length === 1 && stored[0]!.table && pending.length === 0 && !hasOpen) return { view: stored[0]!.view, table: stored[0]!.table };
    const seen = new Set(stored.map((s) => s.segNo));
    const segs: SegmentView[] = stored.map((s) => s.view);
    const nos = stored.map((s) => s.segNo);
    for (const p of pending) {
      if (seen.has(p.segNo)) continue;
      segs.push(p.view);
      nos.push(p.segNo);
    }
    if (segs.length === 0 && !hasOpen) return undefined;
    if (hasOpen) return sliced(mergeDaySteps([...segs, open.freeze()]));
    const sig = nos.join(',');
    const hit = this.merged.get(k);
    if (hit?.sig === sig) {
      this.merged.delete(k); // most recent last
      this.merged.set(k, hit);
      return hit.dt;
    }
    this.dropMerged(k);
    const dt = await sliced(mergeDaySteps(segs));
    this.dropMerged(k);
    this.merged.set(k, { sig, dt });
    this.mergedEvents += dt.view.n;
    for (const [key, m] of this.merged) {
      if (this.mergedEvents <= MERGED_CACHE_EVENTS) break;
      this.dropMerged(key);
      void m;
    }
    return dt;
  }

  private async eachDay(projectId: string, from: string, to: string, visit: (day: string, dt: DayTable | undefined) => void): Promise<void> {
    let sliceStart = performance.now();
    for (const day of eachDay(from, to)) {
      if (performance.now() - sliceStart >= SLICE_MS) {
        await new Promise((resolve) => setImmediate(resolve));
        sliceStart = performance.now();
      }
      await this.store.settled();
      visit(day, await this.dayTable(projectId, day));
    }
  }

  async query(projectId: string, timezone: string, goals: readonly Goal[], q: Question): Promise<QueryAnswer> {
    const runs = new QuestionRuns(timezone, goals, q);
    await this.eachDay(projectId, q.from, q.to, (day, dt) => runs.addDay(day, dt));
    return runs.finish();
  }

  async funnel(projectId: string, timezone: string, q: FunnelQuestion): Promise<FunnelStepAnswer[]> {
    const run = new FunnelRun(timezone, q);
    await this.eachDay(projectId, q.from, q.to, (day, dt) => run.addDay(day, dt));
    return run.finish();
  }

  /** The open segments reached a bound: seal them (counted by the bound that was reached). */
  private full(): boolean {
    const reason = this.reached();
    if (reason !== undefined) this.seals[reason]++;
    return reason !== undefined;
  }

  private reached(): SealReason | undefined {
    if (this.openEvents >= OPEN_EVENTS_BOUND) return 'events';
    if (this.openHistory >= OPEN_HISTORY_BOUND) return 'history';
    if (this.openDays >= OPEN_DAYS_BOUND) return 'days';
    if (this.openBytes >= OPEN_BYTES_BOUND) return 'bytes';
    if (this.largestProjectBytes >= PROJECT_OPEN_BYTES) return 'project_bytes';
    return undefined;
  }

  /** Open events now (operator view, tests). */
  openCount(): number {
    return this.openEvents;
  }

  /** The open columns and the flushes their bounds caused (operator metrics). */
  openStats(): OpenColumnStats {
    return { events: this.openEvents, bytes: this.openBytes, largestProjectBytes: this.largestProjectBytes, seals: { ...this.seals } };
  }

  async close(): Promise<void> {
    await this.flush();
    await this.store.close();
  }
}
