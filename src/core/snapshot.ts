import { DayAggregate, type StoredDay } from './day-aggregate.ts';
export type { DaySnapshot } from './day-snapshot.ts';
import { intern } from './intern.ts';
import { EXACT_USERS_PER_DAY } from './limits.ts';
import type { DaySnapshot } from './day-snapshot.ts';
import type { RealtimeSnapshot } from './realtime.ts';
import type { PackedRing, RecentRing, StoredRing } from './recent-ring.ts';
import { AnalyticsState, nextRealtimePrune } from './state.ts';

/**
 * The live state as plain data, for the store to serialize: only what is not durable elsewhere. Sealed days are in
 * the store, so a snapshot holds the live days (their hash tables copied as they are in memory: a memcpy each, no
 * per-key work on the main thread), the rings, the counters and the sealing clock. Sketches are left out: they
 * are rebuilt from the exact sets on restore. Every named breakdown of a day (DayAggregate.breakdowns: the base five,
 * the insight breakdowns, revenue and tracked props) is one entry of `breakdowns`; a project carries its realtime
 * minutes (small and bounded, so they are written whole each time).
 */
/**
 * 3: the framed live-state format with the insight breakdowns and realtime minutes. 4: rings as
 * columns and a string table (PackedRing), small live days in their compact form. 5: each live day's visits (visitor and
 * first event time) and its visitors' visit counts, so a visit counts for the visitor of its earliest event. Older
 * files hold no visits, so they do not load: startup replays the log instead (recovery.ts). 6: a day's sessions and
 * visitors are rebuilt from its visits (DaySnapshot.visitPageviews); version 5 files, with both tables, still load.
 */
export const SNAPSHOT_VERSION = 6;
const LOADABLE_VERSIONS: readonly number[] = [5, 6];

type Pairs = [string, number][];


export interface ProjectSnapshot {
  id: string;
  /**
   * each live day: as data, as the stored bytes of a day still asleep (daySnapshot), or as the caller's encoder gave it;
   * read back as data or, lazily, as StoredDays (the store decodes the rest before restoring)
   */
  days: Array<DaySnapshot | Uint8Array | Encoded | StoredDay>;
  /** [date, firstSeq, lastSeq] of each live day, in `days` order: lets a reader keep days asleep (absent before version 4) */
  index?: Array<[string, number, number]>;
  /**
   * the ring (RecentRing.packed), or as the caller's encoder gave it; in version 3 files a flat array, oldest first,
   * 9 values per entry; read back lazily as a StoredRing
   */
  recent: PackedRing | Array<string | number> | Uint8Array | Encoded | StoredRing;
  monthly: Pairs;
  realtime: RealtimeSnapshot;
  /** cluster mode: the eventIds applyOnce remembers, [id, receive time] in fold order (absent when none) */
  ids?: Array<[string, number]>;
}

export interface SnapshotData {
  version: number;
  lastSeq: number;
  maxRt: number;
  projects: ProjectSnapshot[];
}

/**
 * A day or ring the engine serialized itself: `bytes` when it changed since the last snapshot, else only its key (the
 * snapshot writer keeps the bytes it was last given under that key), so unchanged state is neither walked nor copied.
 */
export interface Encoded {
  key: string;
  bytes?: Uint8Array;
  /** instead of bytes: where they are in a snapshot file (the writer reads them there) */
  at?: number;
  length?: number;
  file?: string;
  /** their CRC-32 when known (the writer then need not read them to reference them) */
  crc?: number;
}

/** How a snapshot holds a ring: packed values by default; the engine passes an encoder. */
export type RingEncoder = (projectId: string, ring: RecentRing) => PackedRing | Uint8Array | Encoded;

/** How a snapshot holds a live day: as data by default; the engine passes an encoder that caches unchanged days. */
export type DayEncoder = (projectId: string, day: DayAggregate) => DaySnapshot | Uint8Array | Encoded;

/**
 * One live day as plain data (its hash tables as their entries), or a copy of its stored bytes while it
 * sleeps (written as they are: nothing is decoded to snapshot a day nobody touched).
 */
export function daySnapshot(d: DayAggregate): DaySnapshot | Uint8Array {
  const stored = d.storedBytes();
  if (stored) return new Uint8Array(stored); // a copy of its own (Buffer#slice is a view): the writer may take it
  const breakdowns: Record<string, Pairs> = {};
  for (const [name, c] of d.breakdowns()) if (c.size > 0) breakdowns[name] = c.pairs();
  const visits = d.visits.raw();
  return {
    day: d.day,
    firstSeq: d.firstSeq,
    lastSeq: d.lastSeq,
    pageviews: d.pageviews,
    bounces: d.bounces,
    sessionsWithPageview: d.sessionsWithPageview,
    bots: d.bots,
    visits,
    visitPageviews: visitPageviews(d, visits),
    breakdowns,
    userCount: d.userCount,
    ...d.heldSketch(),
  };
}

/** Each visit's page views, in the order of `visits` (its sessions table has exactly the visits' keys). */
function visitPageviews(d: DayAggregate, visits: { keys: Float64Array }): Uint32Array {
  const out = new Uint32Array(visits.keys.length);
  const sessions = d.sessions;
  for (let i = 0; i < out.length; i++) out[i] = Math.max(0, sessions.get(visits.keys[i]!));
  return out;
}

export function toSnapshot(
  state: AnalyticsState,
  encodeRing: RingEncoder = (_, r) => r.packed(),
  encodeDay: DayEncoder = (_, d) => daySnapshot(d),
): SnapshotData {
  const projects: ProjectSnapshot[] = [];
  for (const [id, p] of state.projects) {
    const days: Array<DaySnapshot | Uint8Array | Encoded> = [];
    const index: Array<[string, number, number]> = [];
    for (const d of p.days.values()) {
      days.push(encodeDay(id, d));
      index.push([d.day, d.firstSeq, d.lastSeq]);
    }
    const ps: ProjectSnapshot = {
      id,
      days,
      index,
      recent: encodeRing(id, p.recent),
      monthly: [...p.monthly],
      realtime: p.realtime.toSnapshot(),
    };
    if (p.eventIds && p.eventIds.size > 0) ps.ids = [...p.eventIds];
    projects.push(ps);
  }
  return { version: SNAPSHOT_VERSION, lastSeq: state.lastSeq, maxRt: state.maxRt, projects };
}

/** The state a snapshot describes; days due for sealing are handed over again on the next record (or collectSealable). */
export function fromSnapshot(data: SnapshotData): AnalyticsState {
  if (!LOADABLE_VERSIONS.includes(data.version)) throw new Error(`unsupported snapshot version ${data.version}`);
  const state = new AnalyticsState();
  state.lastSeq = data.lastSeq;
  state.maxRt = data.maxRt;
  if (state.maxRt > 0) state.nextRealtimePrune = nextRealtimePrune(state.maxRt);
  state.nextSealCheck = 0;
  for (const ps of data.projects) {
    const p = state.project(ps.id);
    for (const d of ps.days) {
      if (d instanceof Uint8Array || 'key' in d) throw new Error('a day still encoded: the store decodes days before restoring');
      p.days.set(d.day, 'load' in d ? DayAggregate.asleep(d) : DayAggregate.restore(d));
    }
    const recent = ps.recent;
    if (Array.isArray(recent)) p.recent.pushFlat(recent);
    else if (recent instanceof Uint8Array || 'key' in recent) throw new Error('a ring still encoded: the store decodes rings before restoring');
    else if ('load' in recent) p.recent.sleep(recent);
    else p.recent.restorePacked(recent);
    for (const [k, v] of ps.monthly) p.monthly.set(k, v);
    p.realtime.restore(ps.realtime);
    state.realtimeHeld.add(p);
    if (ps.ids && ps.ids.length > 0) p.eventIds = new Map(ps.ids);
  }
  return state;
}
