import { DayAggregate } from './day-aggregate.ts';
import { EXACT_USERS_PER_DAY } from './limits.ts';
import { NumberCounts, NumberSet, type RawNumberCounts, type RawNumberSet } from './number-table.ts';
import type { RealtimeSnapshot } from './realtime.ts';
import type { RecentRing } from './recent-ring.ts';
import { AnalyticsState } from './state.ts';

/**
 * The live state as plain data, for the store to serialize: only what is not durable elsewhere. Sealed days are in
 * the store, so a snapshot holds the live days (their hash tables copied as they are in memory: a memcpy each, no
 * per-key work on the main thread), the rings, the counters and the sealing clock. Sketches are left out: they
 * are rebuilt from the exact sets on restore. Every named breakdown of a day (DayAggregate.breakdowns: the base five,
 * the insight breakdowns, revenue and tracked props) is one entry of `breakdowns`; a project carries its realtime
 * minutes (small and bounded, so they are written whole each time).
 */
/** 3: the framed live-state format (issue 18) with the insight breakdowns (issue 13) and realtime minutes. */
export const SNAPSHOT_VERSION = 3;

type Pairs = [string, number][];

export interface DaySnapshot {
  day: string;
  firstSeq: number;
  lastSeq: number;
  pageviews: number;
  bounces: number;
  sessionsWithPageview: number;
  bots: number;
  sessions: RawNumberCounts;
  users: RawNumberSet;
  /** breakdown name -> pairs (see DayAggregate.breakdowns: insights, revenue and props included) */
  breakdowns: Record<string, Pairs>;
}

export interface ProjectSnapshot {
  id: string;
  /** each live day, or as the caller's encoder gave it (the store decodes encoded days before restoring) */
  days: Array<DaySnapshot | Encoded>;
  /** the ring, oldest first, 9 values per entry (RecentRing.packed), or as the caller's encoder gave it */
  recent: Array<string | number> | Uint8Array | Encoded;
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
}

/** How a snapshot holds a ring: packed values by default; the engine passes an encoder. */
export type RingEncoder = (projectId: string, ring: RecentRing) => Array<string | number> | Encoded;

/** How a snapshot holds a live day: as data by default; the engine passes an encoder that caches unchanged days. */
export type DayEncoder = (projectId: string, day: DayAggregate) => DaySnapshot | Encoded;

/** One live day as plain data (its hash tables copied as they are in memory). */
export function daySnapshot(d: DayAggregate): DaySnapshot {
  const breakdowns: Record<string, Pairs> = {};
  for (const [name, c] of d.breakdowns()) if (c.counts.size > 0) breakdowns[name] = [...c.counts];
  return {
    day: d.day,
    firstSeq: d.firstSeq,
    lastSeq: d.lastSeq,
    pageviews: d.pageviews,
    bounces: d.bounces,
    sessionsWithPageview: d.sessionsWithPageview,
    bots: d.bots,
    sessions: d.sessions.raw(),
    users: d.users.raw(),
    breakdowns,
  };
}

export function toSnapshot(
  state: AnalyticsState,
  encodeRing: RingEncoder = (_, r) => r.packed(),
  encodeDay: DayEncoder = (_, d) => daySnapshot(d),
): SnapshotData {
  const projects: ProjectSnapshot[] = [];
  for (const [id, p] of state.projects) {
    const days: Array<DaySnapshot | Encoded> = [];
    for (const d of p.days.values()) days.push(encodeDay(id, d));
    const ps: ProjectSnapshot = {
      id,
      days,
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
  if (data.version !== SNAPSHOT_VERSION) throw new Error(`unsupported snapshot version ${data.version}`);
  const state = new AnalyticsState();
  state.lastSeq = data.lastSeq;
  state.maxRt = data.maxRt;
  state.nextSealCheck = 0;
  for (const ps of data.projects) {
    const p = state.project(ps.id);
    for (const encoded of ps.days) {
      if ('key' in encoded) throw new Error('a day still encoded: the store decodes days before restoring');
      const ds = encoded;
      const d = new DayAggregate(ds.day);
      d.firstSeq = ds.firstSeq;
      d.lastSeq = ds.lastSeq;
      d.pageviews = ds.pageviews;
      d.bounces = ds.bounces;
      d.sessionsWithPageview = ds.sessionsWithPageview;
      d.bots = ds.bots;
      d.sessions = NumberCounts.fromRaw(ds.sessions);
      d.users = NumberSet.fromRaw(ds.users);
      // Same rule as the live path: a sketch exists once the day has passed the exact threshold.
      if (d.users.size > EXACT_USERS_PER_DAY) d.buildSketch();
      for (const [name, pairs] of Object.entries(ds.breakdowns)) {
        const c = d.breakdown(name);
        if (c) for (const [k, v] of pairs) c.counts.set(k, v);
      }
      p.days.set(ds.day, d);
    }
    if (!Array.isArray(ps.recent)) throw new Error('a ring still encoded: the store decodes rings before restoring');
    p.recent.pushPacked(ps.recent);
    for (const [k, v] of ps.monthly) p.monthly.set(k, v);
    p.realtime.restore(ps.realtime);
    if (ps.ids && ps.ids.length > 0) p.eventIds = new Map(ps.ids);
  }
  return state;
}
