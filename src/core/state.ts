import { DayAggregate } from './day-aggregate.ts';
import { hash53 } from './hash.ts';
import { Realtime } from './realtime.ts';
import { utcMonthOf } from './dates.ts';
import { DEDUP_PRUNE_MARGIN_MS, DEDUP_PRUNE_MIN_SIZE, DEDUP_WINDOW_MS, RECENT_RING_SIZE } from './limits.ts';
import { RecentRing } from './recent-ring.ts';
import type { LogRecord, StoredEvent } from './types.ts';

/** Everything known about one project, all derivable from its log records. */
export class ProjectState {
  readonly days = new Map<string, DayAggregate>();
  readonly recent = new RecentRing(RECENT_RING_SIZE);
  /** day -> bot hits (acknowledged, not counted as traffic) */
  readonly bots = new Map<string, number>();
  /** eventId -> receive time; entries older than DEDUP_WINDOW_MS are pruned */
  readonly seenEventIds = new Map<string, number>();
  /** size of seenEventIds at which the reducer next prunes it */
  nextEventIdPrune = DEDUP_PRUNE_MIN_SIZE;
  /** UTC 'YYYY-MM' -> events stored that month (the monthly allowance) */
  readonly monthly = new Map<string, number>();
  /** the last 30 minutes by receive time (GET /metrics/realtime) */
  readonly realtime = new Realtime();

  day(day: string): DayAggregate {
    let d = this.days.get(day);
    if (!d) {
      d = new DayAggregate(day);
      this.days.set(day, d);
    }
    return d;
  }
}

/** The whole in-memory state: one fold of the log up to `lastSeq`. */
export class AnalyticsState {
  readonly projects = new Map<string, ProjectState>();
  lastSeq = 0;

  project(id: string): ProjectState {
    let p = this.projects.get(id);
    if (!p) {
      p = new ProjectState();
      this.projects.set(id, p);
    }
    return p;
  }
}

/**
 * The reducer: folds one log record into the state. Pure and deterministic: everything it needs is in the
 * record, so folding the log always gives the same state as the live path did.
 */
export function apply(state: AnalyticsState, seq: number, record: LogRecord): void {
  if (record.t === 'x') {
    state.lastSeq = seq; // erased: nothing to fold
    return;
  }
  const p = state.project(record.p);
  switch (record.t) {
    case 'e':
      applyEvent(p, record);
      break;
    case 'b':
      p.bots.set(record.day, (p.bots.get(record.day) ?? 0) + 1);
      break;
    default: {
      const never: never = record;
      throw new Error(`unknown log record ${JSON.stringify(never)}`);
    }
  }
  state.lastSeq = seq;
}

function applyEvent(p: ProjectState, e: StoredEvent): void {
  const session = hash53(e.sessionId);
  p.day(e.day).apply(e, session);
  p.recent.push({
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
  if (e.eventId !== undefined) {
    p.seenEventIds.set(e.eventId, e.rt);
    if (p.seenEventIds.size >= p.nextEventIdPrune) pruneProject(p, e.rt - DEDUP_PRUNE_MARGIN_MS);
  }
  p.realtime.add(e.rt, session, e.event === 'page_view', e.path || '/', e.source);
  const month = utcMonthOf(e.rt);
  p.monthly.set(month, (p.monthly.get(month) ?? 0) + 1);
}

/** Was `eventId` already stored for the project within the de-duplication window? */
export function isDuplicate(state: AnalyticsState, projectId: string, eventId: string, now: number): boolean {
  const seen = state.projects.get(projectId)?.seenEventIds.get(eventId);
  return seen !== undefined && now - seen < DEDUP_WINDOW_MS;
}

/** Forgets eventIds older than the window (keeps memory bounded by 48 h of ids). */
export function pruneSeenEventIds(state: AnalyticsState, now: number): number {
  let removed = 0;
  for (const p of state.projects.values()) removed += pruneProject(p, now);
  return removed;
}

/**
 * Drops the project's eventIds that are expired at `now`. Only ids that can never be a duplicate again go, so what
 * isDuplicate answers does not depend on when this ran; a snapshot and a full replay differ at most in dead entries.
 */
function pruneProject(p: ProjectState, now: number): number {
  let removed = 0;
  for (const [id, rt] of p.seenEventIds) {
    if (now - rt >= DEDUP_WINDOW_MS) {
      p.seenEventIds.delete(id);
      removed++;
    }
  }
  p.nextEventIdPrune = Math.max(DEDUP_PRUNE_MIN_SIZE, p.seenEventIds.size * 2);
  return removed;
}

/** Events stored for the project in the UTC month of `now`. */
export function storedThisMonth(state: AnalyticsState, projectId: string, now: number): number {
  return state.projects.get(projectId)?.monthly.get(utcMonthOf(now)) ?? 0;
}
