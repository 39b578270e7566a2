import { CappedCounter, sortedBreakdown } from './capped-counter.ts';
import {
  REALTIME_KEPT_MS,
  REALTIME_KEYS_PER_MINUTE,
  REALTIME_MINUTES,
  REALTIME_SESSIONS_PER_MINUTE,
  REALTIME_TOP,
  REALTIME_VISITOR_MINUTES,
  OTHER_KEY,
} from './limits.ts';
import { NumberCounts, NumberSet } from './number-table.ts';

const MINUTE_MS = 60_000;

/**
 * One minute of traffic (by event time): its page views by path, and the sessions seen in it with the source each
 * came with (its first event of the minute), so a read counts each visit once, by source, however many pages it views.
 */
class Minute {
  pageviews = 0;
  readonly pages = new CappedCounter(REALTIME_KEYS_PER_MINUTE);
  /** hash53(sessionId) -> index of its source in `names` */
  sessions = new NumberCounts();
  /** the minute's sources, at most REALTIME_KEYS_PER_MINUTE (the rest as OTHER_KEY) */
  names: string[] = [];
  /** new sessions past REALTIME_SESSIONS_PER_MINUTE, by source, counted without de-duplication */
  overflow = new CappedCounter(REALTIME_KEYS_PER_MINUTE);
  overflowCount = 0;
  constructor(readonly minute: number) {}

  sourceIndex(source: string): number {
    let i = this.names.indexOf(source);
    if (i >= 0) return i;
    if (this.names.length >= REALTIME_KEYS_PER_MINUTE - 1 && source !== OTHER_KEY) return this.sourceIndex(OTHER_KEY);
    i = this.names.length;
    this.names.push(source);
    return i;
  }
}

export interface RealtimeFigures {
  visitors: number;
  pageviews: number;
  perMinute: number[];
  pages: Record<string, number>;
  sources: Record<string, number>;
}

export interface RealtimeSnapshot {
  minutes: {
    minute: number;
    pageviews: number;
    pages: [string, number][];
    sessions: Float64Array;
    sources: Uint32Array;
    names: string[];
    overflow: [string, number][];
    overflowCount: number;
  }[];
}

/**
 * A project's last 30 minutes as a fixed ring of per-minute buckets indexed by minute number of the events' time
 * (timestamp, else receive time), so memory is bounded whatever the traffic: 30 buckets of ≤ REALTIME_KEYS_PER_MINUTE
 * pages and sources and ≤ REALTIME_SESSIONS_PER_MINUTE sessions. An event stamped before the window (a backfill, an
 * offline queue flushed late) is not live traffic and never shows; one stamped ahead of its receive time (a client
 * clock running fast) counts at its receive time, so it cannot take the slot of a minute still shown. Folded by the
 * reducer, so replay and snapshots restore it.
 */
export class Realtime {
  private readonly minutes: (Minute | undefined)[] = new Array<Minute | undefined>(REALTIME_MINUTES);

  /**
   * `ts`: the event's time; `rt`: its receive time; `path` counts only for a page view (`pageview` true). `newest`:
   * the newest receive time folded (any project's); a minute more than REALTIME_KEPT_MS before it is not counted, so
   * prune() may drop such buckets at any time without changing what a later fold does. True when it was counted.
   */
  add(ts: number, rt: number, session: number, pageview: boolean, path: string, source: string, newest = rt): boolean {
    const m = Math.floor(Math.min(ts, rt) / MINUTE_MS);
    if (m < keptFrom(newest)) return false;
    const b = this.bucket(m);
    if (!b) return false;
    if (b.sessions.get(session) < 0) {
      if (b.sessions.size < REALTIME_SESSIONS_PER_MINUTE) b.sessions.set(session, b.sourceIndex(source));
      else {
        b.overflow.add(source);
        b.overflowCount++;
      }
    }
    if (pageview) {
      b.pageviews++;
      b.pages.add(path);
    }
    return true;
  }

  /**
   * The bucket of minute `m`, reset when its slot holds an older minute; undefined when the slot already holds a
   * newer one (a time from before a clock step back by more than the ring: too old to show).
   */
  private bucket(m: number): Minute | undefined {
    const slot = m % REALTIME_MINUTES;
    const b = this.minutes[slot];
    if (b !== undefined && b.minute === m) return b;
    if (b !== undefined && b.minute > m) return undefined;
    const fresh = new Minute(m);
    this.minutes[slot] = fresh;
    return fresh;
  }

  /**
   * The figures as of `now` (the engine clock): buckets outside the window count nothing. A visit counts once in
   * `sources`, under the source of its earliest minute in the window.
   */
  read(now: number): RealtimeFigures {
    const current = Math.floor(now / MINUTE_MS);
    const perMinute: number[] = [];
    const pages = new Map<string, number>();
    const sources = new Map<string, number>();
    const seen = new NumberSet();
    const recent = new NumberSet();
    let pageviews = 0;
    let overflow = 0;
    for (let m = current - REALTIME_MINUTES + 1; m <= current; m++) {
      const b = this.minutes[m % REALTIME_MINUTES];
      if (b === undefined || b.minute !== m) {
        perMinute.push(0);
        continue;
      }
      perMinute.push(b.pageviews);
      pageviews += b.pageviews;
      b.pages.sumInto(pages);
      const names = b.names;
      b.sessions.forEachEntry((s, i) => {
        if (seen.add(s)) sources.set(names[i]!, (sources.get(names[i]!) ?? 0) + 1);
      });
      b.overflow.sumInto(sources);
      if (m > current - REALTIME_VISITOR_MINUTES) {
        b.sessions.forEachEntry((s) => void recent.add(s));
        overflow += b.overflowCount;
      }
    }
    return { visitors: recent.size + overflow, pageviews, perMinute, pages: top(pages), sources: top(sources) };
  }

  /**
   * Drops the buckets of minutes more than REALTIME_KEPT_MS before `newest` (the newest receive time folded): an idle
   * project's last 30 minutes of traffic would otherwise stay in the heap and every snapshot. Only a read with a
   * clock stepped back by more than that could have shown them. True when nothing is left.
   */
  prune(newest: number): boolean {
    const from = keptFrom(newest);
    let left = 0;
    for (let i = 0; i < this.minutes.length; i++) {
      if (this.minutes[i] === undefined) continue;
      if (this.minutes[i]!.minute < from) this.minutes[i] = undefined;
      else left++;
    }
    return left === 0;
  }

  toSnapshot(): RealtimeSnapshot {
    return {
      minutes: this.minutes
        .filter((b) => b !== undefined)
        .map((b) => {
          const { keys, values } = b.sessions.toArrays();
          return {
            minute: b.minute,
            pageviews: b.pageviews,
            pages: b.pages.pairs(),
            sessions: keys,
            sources: values,
            names: [...b.names],
            overflow: b.overflow.pairs(),
            overflowCount: b.overflowCount,
          };
        }),
    };
  }

  restore(s: RealtimeSnapshot): void {
    for (const m of s.minutes) {
      const b = new Minute(m.minute);
      b.pageviews = m.pageviews;
      for (const [k, n] of m.pages) b.pages.set(k, n);
      b.sessions = NumberCounts.from(m.sessions, m.sources);
      b.names = [...m.names];
      for (const [k, n] of m.overflow) b.overflow.set(k, n);
      b.overflowCount = m.overflowCount;
      this.minutes[m.minute % REALTIME_MINUTES] = b;
    }
  }
}

/** The first minute counted when `newest` is the newest receive time folded. */
function keptFrom(newest: number): number {
  return Math.floor((newest - REALTIME_KEPT_MS) / MINUTE_MS);
}

function top(counts: Map<string, number>): Record<string, number> {
  const all = sortedBreakdown(counts);
  const keys = Object.keys(all);
  if (keys.length <= REALTIME_TOP) return all;
  const out: Record<string, number> = {};
  for (const k of keys.slice(0, REALTIME_TOP)) Object.defineProperty(out, k, { value: all[k], enumerable: true, writable: true, configurable: true });
  return out;
}
