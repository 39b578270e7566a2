import { DayAggregate } from './day-aggregate.ts';
import { EXACT_USERS_PER_DAY } from './limits.ts';
import type { RealtimeSnapshot } from './realtime.ts';
import { NumberCounts, NumberSet } from './number-table.ts';
import type { RingEntry } from './recent-ring.ts';
import { AnalyticsState } from './state.ts';

/**
 * The state as plain data (typed arrays for the large distinct sets), for the store to serialize. Sketches are
 * left out: they are rebuilt from the exact sets on restore.
 */
/** 2: days carry the insight breakdowns, revenue and props; projects their realtime minutes. */
export const SNAPSHOT_VERSION = 2;

type Pairs = [string, number][];

export interface DaySnapshot {
  day: string;
  pageviews: number;
  bounces: number;
  sessionsWithPageview: number;
  sessionKeys: Float64Array;
  sessionPageviews: Uint32Array;
  users: Float64Array;
  sources: Pairs;
  countries: Pairs;
  devices: Pairs;
  pages: Pairs;
  events: Pairs;
  /** the day's insight counters by name (DayAggregate.namedInsights: breakdowns, revenue, props) */
  insights: Record<string, Pairs>;
}

export interface ProjectSnapshot {
  id: string;
  days: DaySnapshot[];
  recent: RingEntry[];
  bots: Pairs;
  seenEventIds: Pairs;
  monthly: Pairs;
  realtime: RealtimeSnapshot;
}

export interface SnapshotData {
  version: number;
  lastSeq: number;
  projects: ProjectSnapshot[];
}

export function toSnapshot(state: AnalyticsState): SnapshotData {
  const projects: ProjectSnapshot[] = [];
  for (const [id, p] of state.projects) {
    const days: DaySnapshot[] = [];
    for (const d of p.days.values()) {
      const { keys: sessionKeys, values: sessionPageviews } = d.sessions.toArrays();
      days.push({
        day: d.day,
        pageviews: d.pageviews,
        bounces: d.bounces,
        sessionsWithPageview: d.sessionsWithPageview,
        sessionKeys,
        sessionPageviews,
        users: d.users.toArray(),
        sources: [...d.sources.counts],
        countries: [...d.countries.counts],
        devices: [...d.devices.counts],
        pages: [...d.pages.counts],
        events: [...d.events.counts],
        insights: Object.fromEntries(d.namedInsights().map(([name, c]) => [name, [...c.counts]])),
      });
    }
    projects.push({
      id,
      days,
      recent: p.recent.oldestFirst(),
      bots: [...p.bots],
      seenEventIds: [...p.seenEventIds],
      monthly: [...p.monthly],
      realtime: p.realtime.toSnapshot(),
    });
  }
  return { version: SNAPSHOT_VERSION, lastSeq: state.lastSeq, projects };
}

export function fromSnapshot(data: SnapshotData): AnalyticsState {
  if (data.version !== SNAPSHOT_VERSION) throw new Error(`unsupported snapshot version ${data.version}`);
  const state = new AnalyticsState();
  state.lastSeq = data.lastSeq;
  for (const ps of data.projects) {
    const p = state.project(ps.id);
    for (const ds of ps.days) {
      const d = new DayAggregate(ds.day);
      d.pageviews = ds.pageviews;
      d.bounces = ds.bounces;
      d.sessionsWithPageview = ds.sessionsWithPageview;
      d.sessions = NumberCounts.from(ds.sessionKeys, ds.sessionPageviews);
      d.users = NumberSet.from(ds.users);
      // Same rule as the live path: a sketch exists once the day has passed the exact threshold.
      if (d.users.size > EXACT_USERS_PER_DAY) d.buildSketch();
      for (const [k, v] of ds.sources) d.sources.counts.set(k, v);
      for (const [k, v] of ds.countries) d.countries.counts.set(k, v);
      for (const [k, v] of ds.devices) d.devices.counts.set(k, v);
      for (const [k, v] of ds.pages) d.pages.counts.set(k, v);
      for (const [k, v] of ds.events) d.events.counts.set(k, v);
      for (const [name, pairs] of Object.entries(ds.insights)) {
        const c = d.namedInsight(name);
        if (c) for (const [k, v] of pairs) c.counts.set(k, v);
      }
      p.days.set(ds.day, d);
    }
    for (const e of ps.recent) p.recent.push(e);
    for (const [k, v] of ps.bots) p.bots.set(k, v);
    for (const [k, v] of ps.seenEventIds) p.seenEventIds.set(k, v);
    for (const [k, v] of ps.monthly) p.monthly.set(k, v);
    p.realtime.restore(ps.realtime);
  }
  return state;
}
