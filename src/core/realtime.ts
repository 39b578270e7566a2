import { CappedCounter, sortedBreakdown } from './capped-counter.ts';
import {
  REALTIME_KEPT_MS,
  REALTIME_KEYS_PER_MINUTE,
  REALTIME_MINUTES,
  REALTIME_SESSIONS_PER_MINUTE,
  REALTIME_TOP,
  REALTIME_VISITOR_MINUTES,
} from './limits.ts';
import { NumberSet } from './number-table.ts';

const MINUTE_MS = 60_000;

/** One minute of page views (by receive time). */
class PageMinute {
  pageviews = 0;
  readonly pages = new CappedCounter(REALTIME_KEYS_PER_MINUTE);
  readonly sources = new CappedCounter(REALTIME_KEYS_PER_MINUTE);
  constructor(readonly minute: number) {}
}

/** One minute of distinct sessions (by receive time). */
class VisitorMinute {
  sessions = new NumberSet();
  /** new sessions past REALTIME_SESSIONS_PER_MINUTE, counted without de-duplication */
  overflow = 0;
  constructor(readonly minute: number) {}
}

export interface RealtimeFigures {
  visitors: number;
  pageviews: number;
  perMinute: number[];
  pages: Record<string, number>;
  sources: Record<string, number>;
}

export interface RealtimeSnapshot {
  minutes: { minute: number; pageviews: number; pages: [string, number][]; sources: [string, number][] }[];
  visitors: { minute: number; sessions: Float64Array; overflow: number }[];
}

/**
 * A project's last 30 minutes as two fixed rings of per-minute buckets indexed by minute number (receive time), so
 * memory is bounded whatever the traffic: 30 page buckets (≤ 2 × REALTIME_KEYS_PER_MINUTE keys each) and 5 session
 * buckets (≤ REALTIME_SESSIONS_PER_MINUTE hashes each). Folded by the reducer, so replay and snapshots restore it.
 */
export class Realtime {
  private readonly minutes: (PageMinute | undefined)[] = new Array<PageMinute | undefined>(REALTIME_MINUTES);
  private readonly visitors: (VisitorMinute | undefined)[] = new Array<VisitorMinute | undefined>(REALTIME_VISITOR_MINUTES);

  /**
   * `path` and `source` count only for a page view (`pageview` true). `newest`: the newest receive time folded (any
   * project's); a minute more than REALTIME_KEPT_MS before it is not counted, so prune() may drop such buckets at any
   * time without changing what a later fold does.
   */
  add(rt: number, session: number, pageview: boolean, path: string, source: string, newest = rt): void {
    const m = Math.floor(rt / MINUTE_MS);
    if (m < keptFrom(newest)) return;
    const v = this.bucket(this.visitors, m, (x) => new VisitorMinute(x));
    if (v) {
      if (v.sessions.size < REALTIME_SESSIONS_PER_MINUTE) v.sessions.add(session);
      else if (!v.sessions.has(session)) v.overflow++;
    }
    if (pageview) {
      const b = this.bucket(this.minutes, m, (x) => new PageMinute(x));
      if (b) {
        b.pageviews++;
        b.pages.add(path);
        b.sources.add(source);
      }
    }
  }

  /**
   * The bucket of minute `m`, reset when its slot holds an older minute; undefined when the slot already holds a
   * newer one (a receive time from before a clock step back by more than the ring: too old to show).
   */
  private bucket<B extends { minute: number }>(ring: (B | undefined)[], m: number, make: (m: number) => B): B | undefined {
    const slot = m % ring.length;
    const b = ring[slot];
    if (b !== undefined && b.minute === m) return b;
    if (b !== undefined && b.minute > m) return undefined;
    const fresh = make(m);
    ring[slot] = fresh;
    return fresh;
  }

  /** The figures as of `now` (the engine clock): buckets outside the window count nothing. */
  read(now: number): RealtimeFigures {
    const current = Math.floor(now / MINUTE_MS);
    const perMinute: number[] = [];
    const pages = new Map<string, number>();
    const sources = new Map<string, number>();
    let pageviews = 0;
    for (let m = current - REALTIME_MINUTES + 1; m <= current; m++) {
      const b = this.minutes[m % REALTIME_MINUTES];
      if (b === undefined || b.minute !== m) {
        perMinute.push(0);
        continue;
      }
      perMinute.push(b.pageviews);
      pageviews += b.pageviews;
      b.pages.sumInto(pages);
      b.sources.sumInto(sources);
    }
    const union = new NumberSet();
    let overflow = 0;
    for (let m = current - REALTIME_VISITOR_MINUTES + 1; m <= current; m++) {
      const v = this.visitors[m % REALTIME_VISITOR_MINUTES];
      if (v === undefined || v.minute !== m) continue;
      v.sessions.forEach((s) => void union.add(s));
      overflow += v.overflow;
    }
    return { visitors: union.size + overflow, pageviews, perMinute, pages: top(pages), sources: top(sources) };
  }

  /**
   * Drops the buckets of minutes more than REALTIME_KEPT_MS before `newest` (the newest receive time folded): an idle
   * project's last 30 minutes of traffic (~15 KB of counters) would otherwise stay in the heap and every snapshot.
   * Only a read with a clock stepped back by more than that could have shown them. True when nothing is left.
   */
  prune(newest: number): boolean {
    const from = keptFrom(newest);
    let left = 0;
    for (let i = 0; i < this.minutes.length; i++) {
      if (this.minutes[i] === undefined) continue;
      if (this.minutes[i]!.minute < from) this.minutes[i] = undefined;
      else left++;
    }
    for (let i = 0; i < this.visitors.length; i++) {
      if (this.visitors[i] === undefined) continue;
      if (this.visitors[i]!.minute < from) this.visitors[i] = undefined;
      else left++;
    }
    return left === 0;
  }

  toSnapshot(): RealtimeSnapshot {
    return {
      minutes: this.minutes
        .filter((b) => b !== undefined)
        .map((b) => ({ minute: b.minute, pageviews: b.pageviews, pages: b.pages.pairs(), sources: b.sources.pairs() })),
      visitors: this.visitors
        .filter((v) => v !== undefined)
        .map((v) => ({ minute: v.minute, sessions: v.sessions.toArray(), overflow: v.overflow })),
    };
  }

  restore(s: RealtimeSnapshot): void {
    for (const m of s.minutes) {
      const b = new PageMinute(m.minute);
      b.pageviews = m.pageviews;
      for (const [k, n] of m.pages) b.pages.set(k, n);
      for (const [k, n] of m.sources) b.sources.set(k, n);
      this.minutes[m.minute % REALTIME_MINUTES] = b;
    }
    for (const v of s.visitors) {
      const b = new VisitorMinute(v.minute);
      b.sessions = NumberSet.from(v.sessions);
      b.overflow = v.overflow;
      this.visitors[v.minute % REALTIME_VISITOR_MINUTES] = b;
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
