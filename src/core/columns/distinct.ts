/**
 * Distinct visitors without a JS Set per visit. Inside a day, visitors have day-local codes, so a row's visitors of
 * the day are deduplicated by (row, visitor code) in a reused open-addressing table (PairSet). Across days a row
 * keeps the visitor hashes it saw, one per day and visitor: counted by sorting (or by their number when one day
 * contributed), and past EXACT_LIMIT folded into a HyperLogLog sketch (the contract allows 1 % for a range). Across
 * days the low 32 bits of a visitor's hash53 stand for it: sorting 32-bit integers is much faster than doubles, and
 * n visitors collide about n² / 2^33 times (≈ 0.001 % of 100k), far inside the 1 % a range allows; one day stays
 * exact (its count is the number of day-local visitors).
 */

/**
 * Hashes a row keeps (over several days) before it switches to a sketch: sorting costs more per hash than the
 * sketch, whose error this far below its register count is a few hundredths of a percent.
 */
const EXACT_LIMIT = 4_096;
/** Hashes a sketch collects before writing them into its registers. */
const SKETCH_BATCH = 2_048;
/** Sketch registers: 2^17 gives a standard error of 1.04 / √2^17 ≈ 0.29 %, well inside the 1 % allowed. */
const HLL_BITS = 17;
const HLL_M = 2 ** HLL_BITS;
const TWO_32 = 4_294_967_296;

/** Adds a 32-bit hash to a sketch: the top 17 bits pick the register, the low 15 give the rank (≤ 16). */
function hllAdd(regs: Uint8Array, h: number): void {
  const idx = h >>> (32 - HLL_BITS);
  const rank = Math.clz32((h << HLL_BITS) | (1 << (HLL_BITS - 1))) + 1;
  if (rank > regs[idx]!) regs[idx] = rank;
}

/** Largest register value: 15 rank bits and a sentinel. */
const HLL_Q = 32 - HLL_BITS;

/**
 * Ertl's improved estimator ("New cardinality estimation algorithms for HyperLogLog sketches", 2017): one formula
 * over the register histogram, without the raw estimator's bias between small and large cardinalities.
 */
function hllEstimate(regs: Uint8Array): number {
  const m = regs.length;
  const c = new Float64Array(HLL_Q + 2);
  for (let i = 0; i < m; i++) c[regs[i]!]!++;
  let z = m * tau(1 - c[HLL_Q + 1]! / m);
  for (let k = HLL_Q; k >= 1; k--) z = 0.5 * (z + c[k]!);
  z += m * sigma(c[0]! / m);
  return Math.round((0.5 / Math.LN2) * m * m / z);
}

function sigma(x: number): number {
  if (x === 1) return Infinity;
  let y = 1;
  let z = x;
  let prev: number;
  do {
    x *= x;
    prev = z;
    z += x * y;
    y += y;
  } while (prev !== z);
  return z;
}

function tau(x: number): number {
  if (x === 0 || x === 1) return 0;
  let y = 1;
  let z = 1 - x;
  let prev: number;
  do {
    x = Math.sqrt(x);
    prev = z;
    y *= 0.5;
    z -= (1 - x) ** 2 * y;
  } while (prev !== z);
  return z / 3;
}

/** The distinct visitors of one row over the days of a question. */
export class Distinct {
  private list = new Uint32Array(8);
  private len = 0;
  private regs: Uint8Array | undefined;
  private lastDay = -1;
  private days = 0;

  /** A visitor's hash53, at most once per day (the caller deduplicates inside a day). */
  add(hash: number, day: number): void {
    const h = hash >>> 0;
    if (day !== this.lastDay) {
      this.lastDay = day;
      this.days++;
    }
    if (this.regs) {
      // batched: a row's registers are then written while they are in cache, not between other rows' writes
      this.list[this.len++] = h;
      if (this.len === SKETCH_BATCH) this.drain();
      return;
    }
    if (this.len === this.list.length) {
      // one day's visitors stay exact however many (their number is the count)
      if (this.len >= EXACT_LIMIT && this.days > 1) {
        // repeats across days take room: drop them, and go to the sketch only when distinct hashes fill half
        this.len = uniqueSorted(this.list.subarray(0, this.len).sort());
        if (this.len > EXACT_LIMIT / 2) {
          this.toSketch();
          this.list[this.len++] = h;
          return;
        }
      } else {
        const l = new Uint32Array(this.len * 2);
        l.set(this.list);
        this.list = l;
      }
    }
    this.list[this.len++] = h;
  }

  private toSketch(): void {
    const regs = new Uint8Array(HLL_M);
    for (let i = 0; i < this.len; i++) hllAdd(regs, this.list[i]!);
    this.regs = regs;
    this.list = new Uint32Array(SKETCH_BATCH);
    this.len = 0;
  }

  private drain(): void {
    const regs = this.regs!;
    for (let i = 0; i < this.len; i++) hllAdd(regs, this.list[i]!);
    this.len = 0;
  }

  count(): number {
    if (this.regs) {
      this.drain();
      return hllEstimate(this.regs);
    }
    if (this.days <= 1) return this.len;
    this.len = uniqueSorted(this.list.subarray(0, this.len).sort());
    return this.len;
  }
}

/** Drops repeats from a sorted array in place; returns how many distinct values lead it. */
function uniqueSorted(a: Uint32Array): number {
  let n = 0;
  for (let i = 0; i < a.length; i++) if (i === 0 || a[i] !== a[n - 1]) a[n++] = a[i]!;
  return n;
}

/** First capacity of a PairSet; it doubles when half full. */
const PAIRS_INITIAL = 4_096;

/** A set of non-negative integer keys (< 2^53) cleared in O(1): entries of an older generation count as empty. */
export class PairSet {
  private keys = new Float64Array(PAIRS_INITIAL);
  private gen = new Int32Array(PAIRS_INITIAL);
  private cur = 1;
  private size = 0;

  clear(): void {
    this.cur++;
    this.size = 0;
  }

  /** true when the key was not in the set */
  add(key: number): boolean {
    if (this.size * 2 >= this.keys.length) this.grow();
    const mask = this.keys.length - 1;
    let i = slot(key) & mask;
    const gen = this.gen;
    const cur = this.cur;
    while (gen[i] === cur) {
      if (this.keys[i] === key) return false;
      i = (i + 1) & mask;
    }
    gen[i] = cur;
    this.keys[i] = key;
    this.size++;
    return true;
  }

  private grow(): void {
    const oldKeys = this.keys;
    const oldGen = this.gen;
    const cur = this.cur;
    this.keys = new Float64Array(oldKeys.length * 2);
    this.gen = new Int32Array(oldKeys.length * 2);
    this.cur = 1;
    const mask = this.keys.length - 1;
    for (let j = 0; j < oldKeys.length; j++) {
      if (oldGen[j] !== cur) continue;
      let i = slot(oldKeys[j]!) & mask;
      while (this.gen[i] === 1) i = (i + 1) & mask;
      this.gen[i] = 1;
      this.keys[i] = oldKeys[j]!;
    }
  }
}

function slot(key: number): number {
  const lo = key >>> 0;
  const hi = Math.floor(key / TWO_32) | 0;
  let h = Math.imul(lo ^ Math.imul(hi, 0x27d4eb2f), 0x9e3779b1);
  h ^= h >>> 15;
  return Math.imul(h, 0x85ebca6b) ^ (h >>> 13);
}
