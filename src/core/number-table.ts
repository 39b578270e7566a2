/**
 * Open-addressing hash tables keyed by hash53 values, stored in typed arrays: 8 bytes a key (+4 for a counter) at a
 * load of at most 70 %, against ~80 bytes an entry for a Map<number, number> whose 53-bit keys are boxed heap numbers.
 * For 3M sessions that is ~60 MB instead of ~250 MB, nothing for the GC to trace, and a restore that inserts into
 * preallocated arrays instead of growing a Map (measured with bench/: see the commit that introduced this file).
 *
 * Keys are uniformly distributed hashes, so the low 32 bits pick the slot directly and linear probing stays short.
 * 0 marks an empty slot; the key 0 itself (probability 2^-53 per hash) is kept in a flag.
 */

/** Grow past this load: linear probing averages < 2.2 probes per miss below it. */
const MAX_LOAD = 0.7;
const MIN_CAPACITY = 16;

function capacityFor(n: number): number {
  let c = MIN_CAPACITY;
  while (c * MAX_LOAD < n) c *= 2;
  return c;
}

/** A table as it is in memory (power-of-two capacity, 0 = empty): the snapshot form, restored without rehashing. */
export interface RawNumberSet {
  keys: Float64Array;
  hasZero: boolean;
  size: number;
}

export interface RawNumberCounts extends RawNumberSet {
  values: Uint32Array;
  zeroValue: number;
}

/** A set of hash53 values. */
export class NumberSet {
  private keys: Float64Array;
  private mask: number;
  private hasZero = false;
  size = 0;

  constructor(expected = 0) {
    const c = capacityFor(expected);
    this.keys = new Float64Array(c);
    this.mask = c - 1;
  }

  has(k: number): boolean {
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
    this.keys = keys;
    this.mask = mask;
  }

  /** Calls `fn` for every key (in slot order, not insertion order). */
  forEach(fn: (k: number) => void): void {
    if (this.hasZero) fn(0);
    const keys = this.keys;
    for (let j = 0; j < keys.length; j++) if (keys[j] !== 0) fn(keys[j]!);
  }

  toArray(): Float64Array {
    const out = new Float64Array(this.size);
    let n = 0;
    if (this.hasZero) out[n++] = 0;
    const keys = this.keys;
    for (let j = 0; j < keys.length; j++) if (keys[j] !== 0) out[n++] = keys[j]!;
    return out;
  }

  /** A copy of the table itself (a memcpy, no per-key work): what a snapshot captures on the main thread. */
  raw(): RawNumberSet {
    return { keys: this.keys.slice(), hasZero: this.hasZero, size: this.size };
  }

  static fromRaw(r: RawNumberSet): NumberSet {
    const s = new NumberSet();
    s.keys = r.keys;
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

/** A map from hash53 values to small non-negative integer counters (< 2^32). */
export class NumberCounts {
  private keys: Float64Array;
  private values: Uint32Array;
  private mask: number;
  private hasZero = false;
  private zeroValue = 0;
  size = 0;

  constructor(expected = 0) {
    const c = capacityFor(expected);
    this.keys = new Float64Array(c);
    this.values = new Uint32Array(c);
    this.mask = c - 1;
  }

  /** The counter of `k`, or -1 when `k` is absent. */
  get(k: number): number {
    if (k === 0) return this.hasZero ? this.zeroValue : -1;
    const keys = this.keys;
    for (let i = (k >>> 0) & this.mask; ; i = (i + 1) & this.mask) {
      const x = keys[i]!;
      if (x === k) return this.values[i]!;
      if (x === 0) return -1;
    }
  }

  set(k: number, v: number): void {
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
    this.keys = keys;
    this.values = values;
    this.mask = mask;
  }

  /** Calls `fn` for every key and counter (slot order). */
  forEachEntry(fn: (k: number, v: number) => void): void {
    if (this.hasZero) fn(0, this.zeroValue);
    const keys = this.keys;
    for (let j = 0; j < keys.length; j++) if (keys[j] !== 0) fn(keys[j]!, this.values[j]!);
  }

  /** Keys and counters as two parallel arrays (the snapshot form). */
  toArrays(): { keys: Float64Array; values: Uint32Array } {
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

  /** A copy of the table itself (two memcpys): see NumberSet.raw. */
  raw(): RawNumberCounts {
    return { keys: this.keys.slice(), values: this.values.slice(), hasZero: this.hasZero, zeroValue: this.zeroValue, size: this.size };
  }

  static fromRaw(r: RawNumberCounts): NumberCounts {
    const m = new NumberCounts();
    m.keys = r.keys;
    m.values = r.values;
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

  static from(keys: ArrayLike<number>, values: ArrayLike<number>): NumberCounts {
    const m = new NumberCounts(keys.length);
    for (let i = 0; i < keys.length; i++) m.set(keys[i]!, values[i]!);
    return m;
  }
}
