import path from 'node:path';
import { statSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { mergeDay } from '../../src/core/columns/day-table.ts';
import { encodeSegment } from '../../src/core/columns/codec.ts';
import { DayIds, SegmentBuilder } from '../../src/core/columns/segment.ts';
import { addDays, utcMidnight } from '../../src/core/dates.ts';
import { rollupMonth, sealDay, type SealedDay, type SealedMonth } from '../../src/core/sealed-day.ts';
import { monthEnd } from '../../src/core/sealed-source.ts';
import { toSnapshot } from '../../src/core/snapshot.ts';
import { DEDUP_WINDOW_MS, RECENT_RING_SIZE, REALTIME_KEPT_MS } from '../../src/core/limits.ts';
import { AnalyticsState, apply, dropSealed, OMIT_REALTIME, OMIT_RECENT, sealAt, takeSealQueue } from '../../src/core/state.ts';
import type { StoredEvent } from '../../src/core/types.ts';
import { SnapshotFiles } from '../../src/store/files/snapshot-files.ts';
import { ColumnStore, crc } from '../../src/store/lmdb/column-store.ts';
import { LmdbEnv } from '../../src/store/lmdb/log-env.ts';
import { LogStore } from '../../src/store/lmdb/log-store.ts';
import { SealedStore } from '../../src/store/lmdb/sealed-store.ts';
import { BenchChild } from '../lib/child.ts';
import { APPEND_BATCH, dirBytes, projectIds, putProjects, type BuildArgs, type BuildResult } from './build-common.ts';
import { traffic, zipfShares } from './traffic.ts';

/**
 * The growth build in bulk: the same directory the replay build (build-replay.ts) writes, event for event, in large
 * transactions and on both cores. Three processes walk the same deterministic traffic:
 * - this one writes the log: LogStore.append in the replay build's 20k batches (so entries and dictionaries are the
 *   same), many batches per commit, and the eventIds of the last 48 h only (the replay build writes all of them and
 *   then expires the rest, as a year-old service would have);
 * - a child (`bulkState`) folds every record with the real reducer (apply, leaving out the ring pushes and realtime
 *   the final state cannot hold: RING_SAFETY, REALTIME_MARGIN_MS), takes the days it hands over for sealing
 *   at the end of each 20k batch as the Sealer would, seals them with sealDay and rolls months up with rollupMonth
 *   exactly when the Sealer would have (see SealPlan), writes them through SealedStore in large transactions, and
 *   writes the snapshot of the live state;
 * - a child (`bulkColumns`) builds each project-day's column segment once (SegmentBuilder, mergeDay, encodeSegment:
 *   the merged form the projection leaves a finished day in) and writes them through ColumnStore.
 * Checked against the replay build by test/growth-bulk-build.test.ts (the service answers the same on both).
 */

/** Appended batches per commit: lmdb-js runs the transactions queued in one turn as one, so one flush per 200k records. */
const APPENDS_PER_COMMIT = 10;
/** eventIds written reach this far before the 48-hour window of the build's start: the final expiry trims them exactly. */
const ID_MARGIN_MS = 3_600_000;
/** Sealed days per transaction of the state child: a few tens of MB. */
const SEALED_PER_WRITE = 20_000;
/** Column segments per transaction of the columns child: tens of MB for small days, one busy day is a few MB. */
const SEGMENTS_PER_WRITE = 5_000;

/**
 * The state child leaves out of the fold what the final state cannot hold (apply's `omit`): a project's ring keeps its
 * newest RECENT_RING_SIZE events, so its events before the last RING_SAFETY ring-fulls expected at its Zipf share are
 * not pushed (a Poisson count of 1,500 expected falls under 1,000 with a probability below 1e-40, by Chernoff's
 * bound; checked at the end, and the build fails if a ring could differ). At the full (b) shape the fold then pushes
 * 14.3M events instead of all 100M (21.4M at a safety of 3): the pushes were the largest part of the child's time
 * (cache misses over 10,000 rings).
 */
const RING_SAFETY = 1.5;
/**
 * Realtime keeps REALTIME_KEPT_MS before the newest record and is pruned on an hourly grid: a record received this
 * long before the last one adds nothing that is left at the end (checked at the end against the last record).
 */
const REALTIME_MARGIN_MS = 3 * REALTIME_KEPT_MS;
const DAY_MS = 86_400_000;

/**
 * The children allocate hundreds of short-lived objects per event: a larger young generation scavenges less often.
 * Three processes share two cores, so V8's parallel and concurrent collector threads only take cores from the other
 * processes and add their own synchronisation: one collector thread each (at 10M events / 40 days, both children side
 * by side, two rounds: 158 / 165 CPU-seconds with helper threads, 146 / 150 without).
 */
const CHILD_ARGS = ['--max-old-space-size=8192', '--max-semi-space-size=64', '--single-threaded-gc'];
const CHILD = path.join(path.dirname(new URL(import.meta.url).pathname), 'growth-worker.ts');

export async function buildBulk(a: BuildArgs): Promise<BuildResult> {
  const started = performance.now();
  const store = LogStore.open(a.dir, 'commit');
  if (store.lastSeq() !== 0) throw new Error(`bulk build needs an empty data directory: ${a.dir} holds a log`);
  const ids = projectIds(a.projects);
  const { adminKey, secretKey } = await putProjects(store, a, ids);
  const stateChild = new BenchChild(CHILD, { nodeArgs: CHILD_ARGS });
  const columnsChild = new BenchChild(CHILD, { nodeArgs: CHILD_ARGS });
  try {
    const stateDone = stateChild.call<StateResult>('bulkState', { ...a, mode: 'bulk' });
    const columnsDone = columnsChild.call<{ lastSeq: number; seconds: number }>('bulkColumns', { ...a, mode: 'bulk' });
    // Awaited after the log is written; a child that fails meanwhile is reported there, not as an unhandled rejection.
    const children = Promise.all([stateDone, columnsDone]);
    children.catch(() => {});
    const every = a.appendBatch ?? APPEND_BATCH;
    const rememberedIds = store.openRememberedIds();
    const idsFrom = Date.now() - DEDUP_WINDOW_MS - ID_MARGIN_MS;
    let inFlight: Array<Promise<number>> = [];
    const append = (records: StoredEvent[]) => {
      const recent = records.filter((r) => r.rt >= idsFrom);
      inFlight.push(store.append(records, recent.length > 0 ? () => rememberedIds.writeWith(recent) : undefined));
    };
    let batch: StoredEvent[] = [];
    for (const e of traffic(a, ids)) {
      batch.push(e);
      if (batch.length < every) continue;
      append(batch);
      batch = [];
      if (inFlight.length >= APPENDS_PER_COMMIT) {
        await Promise.all(inFlight);
        inFlight = [];
      }
    }
    if (batch.length > 0) append(batch);
    await Promise.all(inFlight);
    // The same expiry the replay build ends with: what is left is what a service running all along would hold.
    await rememberedIds.expire(Date.now());
    const logSeq = store.lastSeq();
    const logSeconds = (performance.now() - started) / 1000;
    const [st, cols] = await children;
    if (st.lastSeq !== logSeq || cols.lastSeq !== logSeq) throw new Error(`bulk build: the log ends at ${logSeq}, the state at ${st.lastSeq}, the columns at ${cols.lastSeq}`);
    await store.close();
    return {
      seconds: (performance.now() - started) / 1000,
      events: a.events,
      projects: a.projects,
      liveDays: st.liveDays,
      sealedDays: st.sealedDays,
      logBytesPerEvent: statSync(path.join(a.dir, 'analytics.lmdb')).size / a.events,
      dataBytes: dirBytes(a.dir),
      snapshotBytes: st.snapshotBytes,
      projectId: ids[0]!,
      secretKey,
      adminKey,
      mode: 'bulk',
      parts: { logSeconds, stateSeconds: st.seconds, columnsSeconds: cols.seconds },
    };
  } finally {
    await Promise.all([stateChild.stop(), columnsChild.stop()]);
  }
}

export interface StateResult {
  lastSeq: number;
  liveDays: number;
  sealedDays: number;
  snapshotBytes: number;
  seconds: number;
}

/**
 * Which month rollups the Sealer writes. After each batch it seals the days handed over and, for every project-month
 * among them whose last day is sealable by then, writes the rollup of every day of that month sealed so far (a later
 * write of the same month replaces it). Days are handed over in date order and a month whose end is sealable has
 * all its days handed over, so: a project-month gets a rollup iff one of its days is sealed at a batch end where the
 * month's end is sealable, and the rollup is of all its days in date order. A project-month sealed only before its
 * end was sealable (no event on its last days) gets none, as in the service.
 */
class SealPlan {
  /** project\0month -> its days sealed so far, in date order, until no rollup can come any more */
  private readonly held = new Map<string, { projectId: string; month: string; days: SealedDay[] }>();
  /** the newest month whose end is sealable at the last batch end */
  private sealableMonth = '';

  /** The days sealed at one batch end (in the Sealer's order) and maxRt then: the rollups the Sealer writes now. */
  batchEnd(days: ReadonlyArray<{ projectId: string; day: SealedDay }>, maxRt: number): Array<{ projectId: string; month: SealedMonth }> {
    const touched = new Set<string>();
    for (const { projectId, day } of days) {
      const month = day.date.slice(0, 7);
      const k = `${projectId}\u0000${month}`;
      let h = this.held.get(k);
      if (!h) this.held.set(k, (h = { projectId, month, days: [] }));
      h.days.push(day);
      touched.add(k);
    }
    const months: Array<{ projectId: string; month: SealedMonth }> = [];
    for (const k of touched) {
      const h = this.held.get(k)!;
      if (sealAt(monthEnd(h.month)) > maxRt) continue;
      months.push({ projectId: h.projectId, month: rollupMonth(h.month, h.days) });
      this.held.delete(k);
    }
    // Months now over and not touched at this batch end get no rollup: forget their days.
    const firstOpen = this.firstUnsealableMonth(maxRt);
    if (firstOpen !== this.sealableMonth) {
      this.sealableMonth = firstOpen;
      for (const [k, h] of this.held) if (h.month < firstOpen) this.held.delete(k);
    }
    return months;
  }

  private firstUnsealableMonth(maxRt: number): string {
    // Months end in order: step from the held months' oldest until one's end is not sealable yet.
    let m = this.sealableMonth || new Date(maxRt - 400 * 86_400_000).toISOString().slice(0, 7);
    while (sealAt(monthEnd(m)) <= maxRt) m = addDays(monthEnd(m), 1).slice(0, 7);
    return m;
  }
}

/** The state child: reducer, sealing, month rollups and the snapshot (see buildBulk). */
export async function bulkState(a: BuildArgs): Promise<StateResult> {
  const started = performance.now();
  const ids = projectIds(a.projects);
  // The log store's environment, without its hold on the directory (the parent holds it and writes the log meanwhile).
  const env = new LmdbEnv(path.join(a.dir, 'analytics.lmdb'), false);
  const sealedStore = new SealedStore(env.root);
  const state = new AnalyticsState();
  const plan = new SealPlan();
  let sealedDays = 0;
  let days: Array<{ projectId: string; day: SealedDay }> = [];
  let months: Array<{ projectId: string; month: SealedMonth }> = [];
  let writing: Promise<void> = Promise.resolve();
  const write = async () => {
    const w = { days, months };
    days = [];
    months = [];
    await writing;
    writing = w.days.length + w.months.length > 0 ? sealedStore.write(w) : Promise.resolve();
  };
  const batchEnd = async () => {
    const queue = takeSealQueue(state);
    const sealed = queue.map((r) => ({ projectId: r.projectId, day: sealDay(r.day) }));
    for (let i = 0; i < queue.length; i++) dropSealed(state, queue[i]!.projectId, queue[i]!.day, sealed[i]!.day.lastSeq);
    sealedDays += sealed.length;
    days.push(...sealed);
    months.push(...plan.batchEnd(sealed, state.maxRt));
    if (days.length >= SEALED_PER_WRITE) await write();
  };
  const every = a.appendBatch ?? APPEND_BATCH;
  // What the fold may leave out (RING_SAFETY, REALTIME_MARGIN_MS): per project, a prefix of its events for the ring
  // (until its first event at or past its threshold, every one after it is pushed); for realtime, records before
  // the last day's end less the margin.
  const endRt = Date.parse(`${a.lastDay}T00:00:00Z`) + DAY_MS;
  const shares = zipfShares(ids.length);
  const rank = new Map(ids.map((id, i) => [id, i]));
  const ringFrom = ids.map((_, i) => endRt - Math.ceil((RING_SAFETY * RECENT_RING_SIZE) / ((shares[i]! * a.events) / a.days)) * DAY_MS);
  const pushing = new Uint8Array(ids.length);
  const total = new Float64Array(ids.length);
  const pushed = new Float64Array(ids.length);
  const realtimeFrom = endRt - DAY_MS - REALTIME_MARGIN_MS;
  let seq = 0;
  let inBatch = 0;
  for (const r of traffic(a, ids)) {
    const i = rank.get(r.p)!;
    total[i]!++;
    if (pushing[i] === 0 && r.rt >= ringFrom[i]!) pushing[i] = 1;
    pushed[i]! += pushing[i]!;
    apply(state, ++seq, r, (pushing[i] === 1 ? 0 : OMIT_RECENT) | (r.rt < realtimeFrom ? OMIT_REALTIME : 0));
    if (++inBatch === every) {
      inBatch = 0;
      await batchEnd();
    }
  }
  if (inBatch > 0) await batchEnd();
  for (let i = 0; i < ids.length; i++) {
    if (pushed[i]! < Math.min(RECENT_RING_SIZE, total[i]!)) throw new Error(`bulk build: ${ids[i]}'s ring took ${pushed[i]} of its ${total[i]} events, fewer than it keeps (raise RING_SAFETY)`);
  }
  if (realtimeFrom > state.maxRt - REALTIME_MARGIN_MS + REALTIME_KEPT_MS) throw new Error('bulk build: the last record is too early for the records realtime left out (raise REALTIME_MARGIN_MS)');
  await write();
  await writing;
  let liveDays = 0;
  for (const p of state.projects.values()) liveDays += p.days.size;
  const files = new SnapshotFiles(a.dir);
  const { file } = await files.write(toSnapshot(state));
  await files.close();
  await env.root.close();
  return { lastSeq: state.lastSeq, liveDays, sealedDays, snapshotBytes: statSync(file).size, seconds: (performance.now() - started) / 1000 };
}

/**
 * The columns child: each project-day's events into one SegmentBuilder, sealed once the traffic has moved past the
 * day, merged (mergeDay: the form the projection leaves an idle day in) and encoded, written through ColumnStore with
 * the marker at the log's end (see buildBulk).
 */
export async function bulkColumns(a: BuildArgs): Promise<{ lastSeq: number; segments: number; seconds: number }> {
  const started = performance.now();
  const ids = projectIds(a.projects);
  const columns = ColumnStore.open(a.dir);
  const open = new Map<string, { projectId: string; day: string; b: SegmentBuilder }>();
  let segments: Array<{ projectId: string; day: string; segNo: number; bytes: Uint8Array }> = [];
  let written = 0;
  let writing: Promise<void> = Promise.resolve();
  const write = async (marker: number) => {
    const s = segments;
    segments = [];
    written += s.length;
    await writing;
    writing = columns.write(s, marker);
  };
  /** Seals the column segments of the days before `before` (no event of theirs can come any more). */
  const closeDays = (before: string) => {
    for (const [k, o] of open) {
      if (o.day >= before) continue;
      open.delete(k);
      const dt = mergeDay([o.b]);
      segments.push({ projectId: o.projectId, day: o.day, segNo: 0, bytes: encodeSegment(dt.view, crc, dt.table) });
    }
  };
  let seq = 0;
  let day = '';
  for (const r of traffic(a, ids)) {
    ++seq;
    if (r.day !== day) {
      // A record of day D comes from the traffic of day D or D - 1 (a session over midnight): days before D - 1 are whole.
      if (r.day > day) {
        closeDays(addDays(r.day, -1));
        if (segments.length >= SEGMENTS_PER_WRITE) await write(0);
      }
      day = r.day;
    }
    const k = `${r.p}\u0000${r.day}`;
    let o = open.get(k);
    if (!o) open.set(k, (o = { projectId: r.p, day: r.day, b: new SegmentBuilder(utcMidnight(r.day), new DayIds()) }));
    o.b.append(seq, r);
  }
  closeDays('\uffff');
  await write(seq);
  await writing;
  await columns.close();
  return { lastSeq: seq, segments: written, seconds: (performance.now() - started) / 1000 };
}
