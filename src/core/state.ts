import { DayAggregate } from './day-aggregate.ts';
import { utcMidnight, utcMonthOf } from './dates.ts';
import { hash53 } from './hash.ts';
import { DEDUP_PRUNE_MARGIN_MS, DEDUP_WINDOW_MS, HISTORY_QUIET_MS, LATEST_DAY_END_MS, MAX_PAST_MS, MONTHLY_KEPT_MS, REALTIME_KEPT_MS, RECENT_RING_SIZE, SEAL_MARGIN_MS } from './limits.ts';
import { Realtime } from './realtime.ts';
import { RecentRing } from './recent-ring.ts';
import type { BotRecord, FoldRecord, StoredEvent } from './types.ts';

/**
 * Days listed as woken before the list gives way to one walk of every day: a second of new days on a busy node is a
 * few thousand; a walk of 300,000 live days is ~5 ms.
 */
const WOKEN_BOUND = 16_384;

/** Everything known about one project, all derivable from its log records. */
export class ProjectState {
  /** the live days: events may still arrive for them */
  readonly days = new Map<string, DayAggregate>();
  readonly recent = new RecentRing(RECENT_RING_SIZE);
  /** UTC 'YYYY-MM' -> events stored that month (the monthly allowance) */
  readonly monthly = new Map<string, number>();
  /** the last 30 minutes by event time (GET /metrics/realtime) */
  readonly realtime = new Realtime();
  /**
   * Cluster mode only (applyOnce): eventId -> receive time of the copy that counted, in fold order. Single-node mode
   * leaves it undefined: ingest refuses repeats there and the ids live in LMDB (RememberedIds).
   */
  eventIds: Map<string, number> | undefined;
}

/** A live day the reducer hands over to be sealed (written to the store, then dropped from the heap). */
export interface SealRequest {
  projectId: string;
  day: DayAggregate;
}

/** The whole in-memory state: one fold of the log up to `lastSeq`. */
export class AnalyticsState {
  readonly projects = new Map<string, ProjectState>();
  lastSeq = 0;
  /** newest receive time folded: the clock that seals days, read from the records so a replay seals the same days */
  maxRt = 0;
  /** maxRt at which the oldest live day that is not yet handed over becomes sealable */
  nextSealCheck = 0;
  /** days handed over for sealing, not yet taken by the engine */
  sealQueue: SealRequest[] = [];
  /** projects that may hold realtime minutes: pruned every REALTIME_KEPT_MS of receive time, dropped once empty */
  readonly realtimeHeld = new Set<ProjectState>();
  /** maxRt at which they are pruned next */
  nextRealtimePrune = 0;
  /**
   * Live days created or woken by a record since the rest watch last took them (core/day-rest.ts), so a pass looks at
   * the days awake, not at every live day. Past WOKEN_BOUND (a replay, or a fold nobody rests) it is emptied and
   * `wokenOverflow` set: the watch then walks every day once.
   */
  readonly woken = new Set<DayAggregate>();
  wokenOverflow = false;

  project(id: string): ProjectState {
    let p = this.projects.get(id);
    if (!p) {
      p = new ProjectState();
      this.projects.set(id, p);
    }
    return p;
  }

  /** The live day of a project, created when the first record for it is folded. */
  day(p: ProjectState, date: string, seq: number): DayAggregate {
    let d = p.days.get(date);
    if (!d) {
      d = new DayAggregate(date);
      d.firstSeq = seq;
      p.days.set(date, d);
      const at = sealAt(date);
      if (at < this.nextSealCheck) this.nextSealCheck = at;
      this.noteWoken(d);
    } else if (d.isAsleep) {
      this.noteWoken(d); // the record about to be applied wakes it
    }
    d.lastSeq = seq;
    return d;
  }

  private noteWoken(d: DayAggregate): void {
    if (this.woken.size >= WOKEN_BOUND) {
      this.woken.clear();
      this.wokenOverflow = true;
    }
    this.woken.add(d);
  }
}

/**
 * The receive time from which no event can be accepted for `day` any more, whatever the project's timezone: its
 * last instant (≤ 36 h after its UTC midnight, at UTC-12) plus the 31-day timestamp window plus a margin for a server
 * clock that steps back. From then on the day is sealed.
 */
export function sealAt(day: string): number {
  return utcMidnight(day) + LATEST_DAY_END_MS + MAX_PAST_MS + SEAL_MARGIN_MS;
}

/**
 * The reducer: folds one log record into the state. Pure and deterministic: everything it needs is in the
 * record, so folding the log always gives the same state as the live path did. Days whose window closed (judged by
 * the records' receive times) are queued in `sealQueue`.
 */
/**
 * Parts of the fold a caller may leave out for a record (apply's `omit`), when it knows the final state cannot hold
 * what they would add: the growth bench's bulk build folds a year of traffic, and a project's ring keeps only its
 * newest RECENT_RING_SIZE events and realtime only the last REALTIME_KEPT_MS. The service never omits anything.
 */
export const OMIT_RECENT = 1;
export const OMIT_REALTIME = 2;

export function apply(state: AnalyticsState, seq: number, record: FoldRecord, omit = 0): void {
  if (record.t === 'x') {
    state.lastSeq = seq; // erased: nothing to fold
    return;
  }
  if (record.t === 'k') {
    if (record.rt > state.maxRt) state.maxRt = record.rt; // the clock moves: maybe days to seal, minutes to prune
  } else {
    foldRecord(state, seq, record, omit);
  }
  state.lastSeq = seq;
  if (state.maxRt >= state.nextSealCheck) collectSealable(state);
  if (state.maxRt >= state.nextRealtimePrune) pruneRealtime(state);
}

function foldRecord(state: AnalyticsState, seq: number, record: StoredEvent | BotRecord, omit: number): void {
  const p = state.project(record.p);
  if (record.rt > state.maxRt) state.maxRt = record.rt;
  switch (record.t) {
    case 'e':
      applyEvent(state, p, seq, record, omit);
      break;
    case 'b':
      state.day(p, record.day, seq).bots++;
      break;
    default: {
      const never: never = record;
      throw new Error(`unknown log record ${JSON.stringify(never)}`);
    }
  }
}

/**
 * Drops realtime minutes no read can show any more (Realtime.prune), so an idle project holds none. Runs once per
 * REALTIME_KEPT_MS of receive time over the projects that had events since; when it runs changes no answer.
 */
export function pruneRealtime(state: AnalyticsState): void {
  for (const p of state.realtimeHeld) if (p.realtime.prune(state.maxRt)) state.realtimeHeld.delete(p);
  state.nextRealtimePrune = nextRealtimePrune(state.maxRt);
}

/**
 * Prunes run on a fixed grid of receive time, so a state restored from a snapshot prunes at the same points as the
 * state that folded the whole log (the schedule is a function of maxRt, not of where the fold started).
 */
export function nextRealtimePrune(maxRt: number): number {
  return (Math.floor(maxRt / REALTIME_KEPT_MS) + 1) * REALTIME_KEPT_MS;
}

/**
 * Was `eventId` counted for the project within the de-duplication window of `rt`? Judged by the records' receive
 * times only, so every node folding the same log agrees, whichever node took each copy.
 */
export function isDuplicate(state: AnalyticsState, projectId: string, eventId: string, rt: number): boolean {
  return countedWithin(state.projects.get(projectId)?.eventIds, eventId, rt);
}

/** One project's counted eventIds (id -> receive time, in fold order): was `eventId` counted within 48 h of `rt`? */
export function countedWithin(ids: ReadonlyMap<string, number> | undefined, eventId: string, rt: number): boolean {
  const seen = ids?.get(eventId);
  return seen !== undefined && Math.abs(rt - seen) < DEDUP_WINDOW_MS;
}

/** Notes `eventId` counted at `rt`, at the end of the map: it stays in fold order, which pruneIds relies on. */
export function noteCounted(ids: Map<string, number>, eventId: string, rt: number): void {
  ids.delete(eventId);
  ids.set(eventId, rt);
}

/**
 * Forgets the ids counted before `cutoff`. Ids are in fold order, which is receive order up to clock skew, so the scan
 * stops at the first id younger than the cutoff plus DEDUP_PRUNE_MARGIN_MS.
 */
export function pruneIds(ids: Map<string, number>, cutoff: number): number {
  let removed = 0;
  for (const [id, rt] of ids) {
    if (rt >= cutoff + DEDUP_PRUNE_MARGIN_MS) break;
    if (rt < cutoff) {
      ids.delete(id);
      removed++;
    }
  }
  return removed;
}

/**
 * The reducer of cluster mode (CLUSTER.md §7): like `apply`, but a record whose eventId was counted for its project
 * within 48 h (by record receive time) is skipped, and so is a history record (h: 1) whose eventId an earlier history
 * record of the log carried (`historySeen`: the caller's table of them, a function of the log, kept off the heap).
 * `lastSeq` moves either way. Deterministic in log order, so replay, a new owner and every node reach the same state.
 * A skipped record changes nothing else (not even maxRt), so folding a log with repeats equals folding it with the
 * repeats removed.
 */
export function applyOnce(state: AnalyticsState, seq: number, record: FoldRecord, historySeen?: (projectId: string, eventId: string) => boolean): boolean {
  if (record.t !== 'e' || record.eventId === undefined) {
    apply(state, seq, record);
    return true;
  }
  const id = record.eventId;
  if (isDuplicate(state, record.p, id, record.rt) || (record.h === 1 && historySeen?.(record.p, id) === true)) {
    state.lastSeq = seq;
    return false;
  }
  apply(state, seq, record);
  const p = state.project(record.p);
  noteCounted((p.eventIds ??= new Map()), id, record.rt);
  return true;
}

/**
 * Forgets eventIds no later record can repeat: older than the window before min(now, maxRt), less a margin for
 * receive clocks of different nodes that disagree. `now` is the engine's clock (core reads none); maxRt keeps a replay
 * hours behind from forgetting an id a later record of the log still needs. Ids are in fold order, which is receive
 * order up to clock skew, so each project's scan stops at the first id younger than the cutoff plus the margin.
 */
export function pruneEventIds(state: AnalyticsState, now: number): number {
  const cutoff = Math.min(now, state.maxRt) - DEDUP_WINDOW_MS - DEDUP_PRUNE_MARGIN_MS;
  let removed = 0;
  for (const p of state.projects.values()) {
    const ids = p.eventIds;
    if (!ids) continue;
    removed += pruneIds(ids, cutoff);
    if (ids.size === 0) p.eventIds = undefined;
  }
  return removed;
}

/** Live days, and of them those awake (tables on the heap), added into `into`: operator figures. */
export function dayCounts(state: AnalyticsState, into = { liveDays: 0, awakeDays: 0 }): { liveDays: number; awakeDays: number } {
  for (const p of state.projects.values()) {
    into.liveDays += p.days.size;
    for (const d of p.days.values()) if (!d.isAsleep) into.awakeDays++;
  }
  return into;
}

/** eventIds held by applyOnce (cluster mode), for operator figures and tests. */
export function rememberedIdCount(state: AnalyticsState): number {
  let n = 0;
  for (const p of state.projects.values()) n += p.eventIds?.size ?? 0;
  return n;
}

function applyEvent(state: AnalyticsState, p: ProjectState, seq: number, e: StoredEvent, omit: number): void {
  const session = hash53(e.sessionId);
  const day = state.day(p, e.day, seq);
  day.apply(e, session);
  const recent = (omit & OMIT_RECENT) === 0;
  if (e.h === 1) {
    // History: counted in its day (the recent ring keeps it by its day: reads filter the ring by the range asked),
    // but it is not live traffic and not against the allowance.
    day.heldUntil = e.rt + HISTORY_QUIET_MS;
    if (day.heldUntil < state.nextSealCheck) state.nextSealCheck = day.heldUntil;
    if (recent) p.recent.push({ day: e.day, ts: e.ts, event: e.event, url: e.url, referrer: e.referrer, source: e.source, country: e.country, device: e.device, sessionId: e.sessionId });
    return;
  }
  if (recent) p.recent.push({
    day: e.day,
    ts: e.ts,
    event: e.event,
    url: e.url,
    referrer: e.referrer,
    source: e.source,
    country: e.country,
    device: e.device,
    sessionId: e.sessionId,
  });
  if ((omit & OMIT_REALTIME) === 0 && p.realtime.add(e.ts, e.rt, session, e.event === 'page_view', e.path || '/', e.source, state.maxRt)) state.realtimeHeld.add(p);
  const month = utcMonthOf(e.rt);
  p.monthly.set(month, (p.monthly.get(month) ?? 0) + 1);
}

/**
 * Queues every live day whose window has closed at `state.maxRt` and works out when the next one closes. Runs about
 * once per day of receive time (and after a restore), so scanning every project's live days is cheap. Monthly
 * counters of months long past are dropped here too.
 */
export function collectSealable(state: AnalyticsState): void {
  const now = state.maxRt;
  let next = Number.POSITIVE_INFINITY;
  const oldestMonth = utcMonthOf(now - MONTHLY_KEPT_MS);
  // Live days share a few dates: each date's seal time is worked out once a pass (10,000 projects hold ~100k live days).
  const sealAtOf = new Map<string, number>();
  for (const [projectId, p] of state.projects) {
    for (const d of p.days.values()) {
      if (d.sealing) continue;
      // A day that took history is sealed once the import has left it alone for HISTORY_QUIET_MS (heldUntil): within
      // seconds, whole, not batch by batch.
      let dateAt = sealAtOf.get(d.day);
      if (dateAt === undefined) sealAtOf.set(d.day, (dateAt = sealAt(d.day)));
      const at = d.heldUntil > dateAt ? d.heldUntil : dateAt;
      if (at <= now) {
        d.sealing = true;
        state.sealQueue.push({ projectId, day: d });
      } else if (at < next) next = at;
    }
    for (const m of p.monthly.keys()) if (m < oldestMonth) p.monthly.delete(m);
  }
  state.nextSealCheck = next;
}

/** The engine takes the queued days to write them. */
export function takeSealQueue(state: AnalyticsState): SealRequest[] {
  const q = state.sealQueue;
  state.sealQueue = [];
  return q;
}

/**
 * Called once a day's sealed form is durable: drops the live instance from the heap. If a record reached it after it
 * was sealed (its lastSeq moved), it stays live and is handed over again, and its next sealing overwrites the segment.
 */
export function dropSealed(state: AnalyticsState, projectId: string, day: DayAggregate, sealedLastSeq: number): boolean {
  const p = state.projects.get(projectId);
  if (!p || p.days.get(day.day) !== day) return false;
  if (day.lastSeq !== sealedLastSeq) {
    day.sealing = false;
    state.nextSealCheck = 0;
    return false;
  }
  p.days.delete(day.day);
  return true;
}

/** Events stored for the project in the UTC month of `now`. */
export function storedThisMonth(state: AnalyticsState, projectId: string, now: number): number {
  return state.projects.get(projectId)?.monthly.get(utcMonthOf(now)) ?? 0;
}

/**
 * A deleted project's erase marker, folded in log order (cluster mode): everything the state holds of the project
 * goes (live days, recent ring, realtime minutes, monthly counts, remembered eventIds, queued seal requests), so a
 * record of it folded later starts from nothing, as for a new project. Pure: every node folding the partition drops
 * the same at the same sequence. Returns whether the state held anything of it.
 */
export function dropProject(state: AnalyticsState, projectId: string): boolean {
  const p = state.projects.get(projectId);
  const queued = state.sealQueue.length;
  state.sealQueue = state.sealQueue.filter((r) => r.projectId !== projectId);
  if (!p) return state.sealQueue.length !== queued;
  state.projects.delete(projectId);
  state.realtimeHeld.delete(p);
  return true;
}
