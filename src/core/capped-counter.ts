import { MAX_BREAKDOWN_KEYS, OTHER_KEY } from './limits.ts';

/** A breakdown for one project and day: at most `cap` keys (MAX_BREAKDOWN_KEYS), the rest counted under OTHER_KEY. */
export class CappedCounter {
  readonly counts = new Map<string, number>();

  constructor(readonly cap = MAX_BREAKDOWN_KEYS) {}

  add(key: string, n = 1): void {
    const c = this.counts.get(key);
    if (c !== undefined) this.counts.set(key, c + n);
    else if (this.counts.size < this.cap || key === OTHER_KEY) this.counts.set(key, n);
    else this.counts.set(OTHER_KEY, (this.counts.get(OTHER_KEY) ?? 0) + n);
  }

  /** Adds this counter's counts into `into` (range reads sum days). */
  sumInto(into: Map<string, number>): void {
    for (const [k, v] of this.counts) into.set(k, (into.get(k) ?? 0) + v);
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
