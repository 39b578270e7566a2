/**
 * Open-addressing hash tables keyed by hash53 values, stored in typed arrays: 8 bytes a key (+4 for a counter) at a
 * load of at most 70 %, against ~80 bytes an entry for a Map<number, number> whose 53-bit keys are boxed heap numbers.
 * For 3M sessions that is ~60 MB instead of ~250 MB, nothing for the GC to trace, and a restore that inserts into
 * preallocated arrays instead of growing a Map (measured with bench/: see the commit that introduced this file).
 *
 * Keys are uniformly distributed hashes, so the low 32 bits pick the slot directly and linear probing stays short.
 * 0 marks an empty slot; the key 0 itself (probability 2^-53 per hash) is kept in a flag.
 *
 * Long because the set and the counter map are two tables with the same three forms each (list, table, snapshot
 * views) and their conversions side by side: one shared base would put a branch on the hot probe path.
 */

import { freeNow } from './free-now.ts';

/** Grow past this load: linear probing averages < 2.2 probes per miss below it. */
export const MAX_LOAD = 0.7;
const MIN_CAPACITY = 16;
/**
 * A table of at most this many keys is a plain array scanned linearly (a small day's sessions and users): its three
 * typed arrays would cost ~1 KB of buffers and bookkeeping for a few keys; a scan of 32 doubles is as fast as a probe.
 */
const SMALL_TABLE = 32;

/** The power-of-two capacity that holds `n` keys at MAX_LOAD at most (the fingerprint set sizes itself the same way). */
export function capacityFor(n: number): number {
  let c = MIN_CAPACITY;
  while (c * MAX_LOAD < n) c *= 2;
  return c;
}

/** Snapshot form: the table as in memory (power-of-two capacity, 0 = empty), or entries only (keys.length === size). */
export interface RawNumberSet {
  keys: Float64Array;
  hasZero: boolean;
  size: number;
}

export interface RawNumberCounts extends RawNumberSet {
  values: Uint32Array;
  zeroValue: number;
}

const NO_KEYS = new Float64Array(0);

/** A set of hash53 values. */
export class NumberSet {
  /** the keys while there are at most SMALL_TABLE (then `keys` is the table) */
  private list: number[] | undefined;
  private keys: Float64Array;
  private mask: number;
  private hasZero = false;
  /** `keys` views a snapshot's array (fromRaw) rather than one of its own: growing must not free it */
  private borrowed = false;
  size = 0;

  constructor(expected = 0) {
    if (expected <= SMALL_TABLE) {
      this.list = [];
      this.keys = NO_KEYS;
      this.mask = 0;
      return;
    }
    const c = capacityFor(expected);
    this.keys = new Float64Array(c);
    this.mask = c - 1;
  }

  /** Leaves the list form: the keys go into a typed table. */
  private promote(): void {
    const list = this.list!;
    this.list = undefined;
    const c = capacityFor(list.length + 1);
    this.keys = new Float64Array(c);
    this.mask = c - 1;
    this.size = 0;
    for (const k of list) this.add(k);
  }

  has(k: number): boolean {
    if (this.list !== undefined) return this.list.includes(k);
    if (k === 0) return this.hasZero;
    const keys = this.keys;
    for (let i = (k >>> 0) & this.mask; ; i = (i + 1) & this.mask) {
      const x = keys[i]!;
      if (x === k) return true;
      if (x === 0) return false;
    }
  }

  /** Adds `k`; true when it was not there yet. */
  add(k: number): boolean {
    const list = this.list;
    if (list !== undefined) {
      if (list.includes(k)) return false;
      if (list.length < SMALL_TABLE) {
        // Exactly one more slot: push and spread reserve ~17 for the first key, for each of a day's two tables.
        this.list = list.concat([k]);
        this.size++;
        return true;
      }
      this.promote();
    }
    if (k === 0) {
      if (this.hasZero) return false;
      this.hasZero = true;
      this.size++;
      return true;
    }
    const keys = this.keys;
    const mask = this.mask;
    let i = (k >>> 0) & mask;
    for (;;) {
      const x = keys[i]!;
      if (x === k) return false;
      if (x === 0) break;
      i = (i + 1) & mask;
    }
    keys[i] = k;
    if (++this.size > this.keys.length * MAX_LOAD) this.grow();
    return true;
  }

  private grow(): void {
    const old = this.keys;
    const keys = new Float64Array(old.length * 2);
    const mask = keys.length - 1;
    for (let j = 0; j < old.length; j++) {
      const k = old[j]!;
      if (k === 0) continue;
      let i = (k >>> 0) & mask;
      while (keys[i] !== 0) i = (i + 1) & mask;
      keys[i] = k;
    }
    if (!this.borrowed) freeNow(old.buffer);
    this.borrowed = false;
    this.keys = keys;
    this.mask = mask;
  }

  /** Calls `fn` for every key (in slot order, not insertion order). */
  forEach(fn: (k: number) => void): void {
    if (this.list !== undefined) {
      for (const k of this.list) fn(k);
      return;
    }
    if (this.hasZero) fn(0);
    const keys = this.keys;
    for (let j = 0; j < keys.length; j++) if (keys[j] !== 0) fn(keys[j]!);
  }

  toArray(): Float64Array {
    if (this.list !== undefined) return Float64Array.from(this.list);
    const out = new Float64Array(this.size);
    let n = 0;
    if (this.hasZero) out[n++] = 0;
    const keys = this.keys;
    for (let j = 0; j < keys.length; j++) if (keys[j] !== 0) out[n++] = keys[j]!;
    return out;
  }

  /**
   * A copy of the table itself (a memcpy, no per-key work): what a snapshot captures on the main thread. The list
   * form is given as a table's worth of keys with no empty slots (fromRaw tells the two apart by `size`).
   */
  raw(): RawNumberSet {
    if (this.list !== undefined) return { keys: Float64Array.from(this.list), hasZero: false, size: this.list.length };
    return { keys: this.keys.slice(), hasZero: this.hasZero, size: this.size };
  }

  static fromRaw(r: RawNumberSet): NumberSet {
    if (r.size <= SMALL_TABLE) {
      // A small set comes back as a list whichever form it was captured in (a table always has empty slots).
      const small = new NumberSet();
      const listForm = r.keys.length === r.size;
      for (let j = 0; j < r.keys.length; j++) if (listForm || r.keys[j] !== 0) small.add(r.keys[j]!);
      if (!listForm && r.hasZero) small.add(0);
      return small;
    }
    const s = new NumberSet();
    s.list = undefined;
    s.keys = r.keys;
    s.borrowed = true;
    s.mask = r.keys.length - 1;
    s.hasZero = r.hasZero;
    s.size = r.size;
    return s;
  }

  static from(values: ArrayLike<number>): NumberSet {
    const s = new NumberSet(values.length);
    for (let i = 0; i < values.length; i++) s.add(values[i]!);
    return s;
  }
}

const NO_VALUES = new Uint32Array(0);

/** A map from hash53 values to small non-negative integer counters (< 2^32). */
export class NumberCounts {
  /** [key, counter, key, counter, ...] while there are at most SMALL_TABLE keys (then the typed table) */
  private list: number[] | undefined;
  private keys: Float64Array;
  private values: Uint32Array;
  private mask: number;
  private hasZero = false;
  private zeroValue = 0;
  /** `keys` and `values` view a snapshot's arrays (fromRaw) rather than their own: growing must not free them */
  private borrowed = false;
  size = 0;

  constructor(expected = 0) {
    if (expected <= SMALL_TABLE) {
      this.list = [];
      this.keys = NO_KEYS;
      this.values = NO_VALUES;
      this.mask = 0;
      return;
    }
    const c = capacityFor(expected);
    this.keys = new Float64Array(c);
    this.values = new Uint32Array(c);
    this.mask = c - 1;
  }

  private promote(): void {
    const list = this.list!;
    this.list = undefined;
    const c = capacityFor((list.length >> 1) + 1);
    this.keys = new Float64Array(c);
    this.values = new Uint32Array(c);
    this.mask = c - 1;
    this.size = 0;
    for (let i = 0; i < list.length; i += 2) this.set(list[i]!, list[i + 1]!);
  }

  /** The counter of `k`, or -1 when `k` is absent. */
  get(k: number): number {
    const list = this.list;
    if (list !== undefined) {
      for (let i = 0; i < list.length; i += 2) if (list[i] === k) return list[i + 1]!;
      return -1;
    }
    if (k === 0) return this.hasZero ? this.zeroValue : -1;
    const keys = this.keys;
    for (let i = (k >>> 0) & this.mask; ; i = (i + 1) & this.mask) {
      const x = keys[i]!;
      if (x === k) return this.values[i]!;
      if (x === 0) return -1;
    }
  }

  set(k: number, v: number): void {
    const list = this.list;
    if (list !== undefined) {
      for (let i = 0; i < list.length; i += 2) {
        if (list[i] === k) {
          list[i + 1] = v;
          return;
        }
      }
      if (list.length < 2 * SMALL_TABLE) {
        this.list = list.concat([k, v]);
        this.size++;
        return;
      }
      this.promote();
    }
    if (k === 0) {
      if (!this.hasZero) this.size++;
      this.hasZero = true;
      this.zeroValue = v;
      return;
    }
    const keys = this.keys;
    const mask = this.mask;
    let i = (k >>> 0) & mask;
    for (;;) {
      const x = keys[i]!;
      if (x === k) {
        this.values[i] = v;
        return;
      }
      if (x === 0) break;
      i = (i + 1) & mask;
    }
    keys[i] = k;
    this.values[i] = v;
    if (++this.size > keys.length * MAX_LOAD) this.grow();
  }

  private grow(): void {
    const oldKeys = this.keys;
    const oldValues = this.values;
    const keys = new Float64Array(oldKeys.length * 2);
    const values = new Uint32Array(keys.length);
    const mask = keys.length - 1;
    for (let j = 0; j < oldKeys.length; j++) {
      const k = oldKeys[j]!;
      if (k === 0) continue;
      let i = (k >>> 0) & mask;
      while (keys[i] !== 0) i = (i + 1) & mask;
      keys[i] = k;
      values[i] = oldValues[j]!;
    }
    if (!this.borrowed) {
      freeNow(oldKeys.buffer);
      freeNow(oldValues.buffer);
    }
    this.borrowed = false;
    this.keys = keys;
    this.values = values;
    this.mask = mask;
  }

  /** Calls `fn` for every key and counter (slot order). */
  forEachEntry(fn: (k: number, v: number) => void): void {
    if (this.list !== undefined) {
      for (let i = 0; i < this.list.length; i += 2) fn(this.list[i]!, this.list[i + 1]!);
      return;
    }
    if (this.hasZero) fn(0, this.zeroValue);
    const keys = this.keys;
    for (let j = 0; j < keys.length; j++) if (keys[j] !== 0) fn(keys[j]!, this.values[j]!);
  }

  /** Keys and counters as two parallel arrays (the snapshot form). */
  toArrays(): { keys: Float64Array; values: Uint32Array } {
    if (this.list !== undefined) {
      const n = this.list.length >> 1;
      const k = new Float64Array(n);
      const v = new Uint32Array(n);
      for (let i = 0; i < n; i++) {
        k[i] = this.list[2 * i]!;
        v[i] = this.list[2 * i + 1]!;
      }
      return { keys: k, values: v };
    }
    const outKeys = new Float64Array(this.size);
    const outValues = new Uint32Array(this.size);
    let n = 0;
    if (this.hasZero) {
      outKeys[n] = 0;
      outValues[n++] = this.zeroValue;
    }
    const keys = this.keys;
    for (let j = 0; j < keys.length; j++) {
      if (keys[j] === 0) continue;
      outKeys[n] = keys[j]!;
      outValues[n++] = this.values[j]!;
    }
    return { keys: outKeys, values: outValues };
  }

  /** The snapshot form: entries only (the key 0 among them), ~half of the table at its load; fromRaw reads both forms. */
  raw(): RawNumberCounts {
    return { ...this.toArrays(), hasZero: false, zeroValue: 0, size: this.size };
  }

  static fromRaw(r: RawNumberCounts): NumberCounts {
    // entries only (keys.length === size; a table with its slots is always longer than its size)
    if (r.keys.length === r.size && r.size > SMALL_TABLE) return NumberCounts.fromEntries(r.keys, r.values);
    if (r.size <= SMALL_TABLE) {
      const small = new NumberCounts();
      const listForm = r.keys.length === r.size;
      if (!listForm && r.hasZero) small.set(0, r.zeroValue);
      for (let j = 0; j < r.keys.length; j++) if (listForm || r.keys[j] !== 0) small.set(r.keys[j]!, r.values[j]!);
      return small;
    }
    const m = new NumberCounts();
    m.list = undefined;
    m.keys = r.keys;
    m.values = r.values;
    m.borrowed = true;
    m.mask = r.keys.length - 1;
    m.hasZero = r.hasZero;
    m.zeroValue = r.zeroValue;
    m.size = r.size;
    return m;
  }

  /** Bytes of typed arrays this table holds. */
  get byteLength(): number {
    return this.keys.byteLength + this.values.byteLength;
  }

  /** A table of distinct entries (a snapshot's): placed straight into its slots, none looked up first. */
  private static fromEntries(keys: Float64Array, values: Uint32Array): NumberCounts {
    const m = new NumberCounts(keys.length);
    const slots = m.keys;
    const counters = m.values;
    const mask = m.mask;
    for (let j = 0; j < keys.length; j++) {
      const k = keys[j]!;
      if (k === 0) {
        m.hasZero = true;
        m.zeroValue = values[j]!;
        continue;
      }
      let i = (k >>> 0) & mask;
      while (slots[i] !== 0) i = (i + 1) & mask;
      slots[i] = k;
      counters[i] = values[j]!;
    }
    m.size = keys.length;
    return m;
  }

  static from(keys: ArrayLike<number>, values: ArrayLike<number>): NumberCounts {
    const m = new NumberCounts(keys.length);
    for (let i = 0; i < keys.length; i++) m.set(keys[i]!, values[i]!);
    return m;
  }
}
