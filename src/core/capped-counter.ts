import { intern } from './intern.ts';
import { MAX_BREAKDOWN_KEYS, OTHER_KEY } from './limits.ts';

/**
 * Keys a counter holds in one flat array before it takes a Map: most breakdowns of a small day have a handful of keys,
 * and a Map costs ~200 bytes empty (~500 with 8 keys) against ~50 + 16 a key for the array; 8 keys are found by a
 * scan as fast as by a hash.
 */
const SMALL_KEYS = 8;
/** The empty list every counter starts with (never written: a key replaces it with a new array). */
const NONE: ReadonlyArray<string | number> = Object.freeze([]);

/**
 * A breakdown for one project and day: at most `cap` keys (MAX_BREAKDOWN_KEYS), the rest counted under OTHER_KEY.
 * Keys keep their first-insertion order in both forms (snapshots and sealing list them in it).
 */
export class CappedCounter {
  /** [key, count, key, count, ...] while the counter has at most SMALL_KEYS keys */
  private small: ReadonlyArray<string | number> | undefined = NONE;
  private map: Map<string, number> | undefined;

  constructor(readonly cap = MAX_BREAKDOWN_KEYS) {}

  get size(): number {
    return this.map ? this.map.size : this.small!.length >> 1;
  }

  get(key: string): number | undefined {
    if (this.map) return this.map.get(key);
    const s = this.small!;
    for (let i = 0; i < s.length; i += 2) if (s[i] === key) return s[i + 1] as number;
    return undefined;
  }

  has(key: string): boolean {
    return this.get(key) !== undefined;
  }

  /** Sets the count of `key` (restoring a snapshot), adding the key at the end when absent. No cap is applied. */
  set(key: string, n: number): void {
    if (this.map) {
      this.map.set(key, n);
      return;
    }
    const s = this.small!;
    for (let i = 0; i < s.length; i += 2) {
      if (s[i] === key) {
        (s as Array<string | number>)[i + 1] = n;
        return;
      }
    }
    this.append(key, n);
  }

  /** Adds a key the small form does not hold. */
  private append(key: string, n: number): void {
    const s = this.small!;
    // A new array of exactly the new length: push and spread reserve ~17 slots (~140 bytes) for the first key, and a day has ~12 counters.
    if (s.length >> 1 < SMALL_KEYS) this.small = s.concat([key, n]);
    else this.counts.set(key, n);
  }

  /** Counts `n` more for `key`: one lookup when the key is there (the hot path: every event adds to several). */
  add(key: string, n = 1): void {
    const m = this.map;
    if (m !== undefined) {
      const c = m.get(key);
      if (c !== undefined) m.set(key, c + n);
      else if (m.size < this.cap || key === OTHER_KEY) m.set(intern(key), n); // a new key: one shared copy
      else m.set(OTHER_KEY, (m.get(OTHER_KEY) ?? 0) + n);
      return;
    }
    const s = this.small as Array<string | number>;
    for (let i = 0; i < s.length; i += 2) {
      if (s[i] === key) {
        s[i + 1] = (s[i + 1] as number) + n;
        return;
      }
    }
    if (s.length >> 1 < this.cap || key === OTHER_KEY) this.append(intern(key), n);
    else this.add(OTHER_KEY, n);
  }

  /** The counts as a Map (the counter keeps it from then on). */
  get counts(): Map<string, number> {
    if (!this.map) {
      const m = new Map<string, number>();
      const s = this.small!;
      for (let i = 0; i < s.length; i += 2) m.set(s[i] as string, s[i + 1] as number);
      this.map = m;
      this.small = undefined;
    }
    return this.map;
  }

  /** Every [key, count], in insertion order. */
  pairs(): Array<[string, number]> {
    if (this.map) return [...this.map];
    const s = this.small!;
    const out: Array<[string, number]> = [];
    for (let i = 0; i < s.length; i += 2) out.push([s[i] as string, s[i + 1] as number]);
    return out;
  }

  /** Adds this counter's counts into `into` (range reads sum days). */
  sumInto(into: Map<string, number>): void {
    if (this.map) {
      for (const [k, v] of this.map) into.set(k, (into.get(k) ?? 0) + v);
      return;
    }
    const s = this.small!;
    for (let i = 0; i < s.length; i += 2) {
      const k = s[i] as string;
      into.set(k, (into.get(k) ?? 0) + (s[i + 1] as number));
    }
  }
}

/** Highest count first, ties by key, as a plain object (the contract's breakdown shape). */
export function sortedBreakdown(counts: Map<string, number>): Record<string, number> {
  const entries = [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const out: Record<string, number> = {};
  for (const [k, v] of entries) {
    // Assigning "__proto__" on a plain object would set its prototype and drop the key; define it instead.
    if (k === '__proto__') Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
    else out[k] = v;
  }
  return out;
}
