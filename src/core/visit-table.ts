/**
 * A day's visits (hash53(sessionId) -> the visit's visitor and the time of its first event), so the visitor a visit
 * counts for is the one its earliest event names (CONTRACT "GET /metrics": `users`), whatever order events arrive in.
 * Open addressing over typed arrays like number-table.ts: 24 bytes a visit at a load of at most 70 %. The key 0 (a
 * hash of probability 2^-53) lives in one extra slot past the table, which probing never reaches.
 */

/** Grow past this load: linear probing stays short below it (as in number-table.ts). */
const MAX_LOAD = 0.7;
/** Smallest table: a day with one visit costs 17 slots, ~400 bytes. */
const MIN_CAPACITY = 16;

/** The table as it is in memory (capacity + 1 slots, 0 = empty): the snapshot form, restored without rehashing. */
export interface RawVisitTable {
  keys: Float64Array;
  visitors: Float64Array;
  firsts: Float64Array;
  hasZero: boolean;
  size: number;
}

export class VisitTable {
  private keys: Float64Array;
  private visitors: Float64Array;
  private firsts: Float64Array;
  private mask: number;
  private hasZero = false;
  size = 0;

  constructor(capacity = MIN_CAPACITY) {
    this.keys = new Float64Array(capacity + 1);
    this.visitors = new Float64Array(capacity + 1);
    this.firsts = new Float64Array(capacity + 1);
    this.mask = capacity - 1;
  }

  /** The slot of visit `k`, or -1 when the day has no such visit. */
  find(k: number): number {
    if (k === 0) return this.hasZero ? this.mask + 1 : -1;
    const keys = this.keys;
    for (let i = (k >>> 0) & this.mask; ; i = (i + 1) & this.mask) {
      const x = keys[i]!;
      if (x === k) return i;
      if (x === 0) return -1;
    }
  }

  visitorAt(slot: number): number {
    return this.visitors[slot]!;
  }

  firstAt(slot: number): number {
    return this.firsts[slot]!;
  }

  /** A visit's visitor moves to an event earlier than its first one. */
  setAt(slot: number, visitor: number, first: number): void {
    this.visitors[slot] = visitor;
    this.firsts[slot] = first;
  }

  /** Adds visit `k` (absent: see find). */
  add(k: number, visitor: number, first: number): void {
    let i: number;
    if (k === 0) {
      this.hasZero = true;
      i = this.mask + 1;
    } else {
      i = (k >>> 0) & this.mask;
      while (this.keys[i] !== 0) i = (i + 1) & this.mask;
      this.keys[i] = k;
    }
    this.visitors[i] = visitor;
    this.firsts[i] = first;
    if (++this.size > (this.mask + 1) * MAX_LOAD) this.grow();
  }

  private grow(): void {
    const { keys, visitors, firsts, hasZero } = this;
    const zero = this.mask + 1;
    const capacity = (this.mask + 1) * 2;
    this.keys = new Float64Array(capacity + 1);
    this.visitors = new Float64Array(capacity + 1);
    this.firsts = new Float64Array(capacity + 1);
    this.mask = capacity - 1;
    this.size = 0;
    this.hasZero = false;
    for (let j = 0; j < zero; j++) if (keys[j] !== 0) this.add(keys[j]!, visitors[j]!, firsts[j]!);
    if (hasZero) this.add(0, visitors[zero]!, firsts[zero]!);
  }

  /** A copy of the table itself (three memcpys, no per-key work). */
  raw(): RawVisitTable {
    return { keys: this.keys.slice(), visitors: this.visitors.slice(), firsts: this.firsts.slice(), hasZero: this.hasZero, size: this.size };
  }

  static fromRaw(r: RawVisitTable): VisitTable {
    const capacity = r.keys.length - 1;
    if (capacity < MIN_CAPACITY || (capacity & (capacity - 1)) !== 0 || r.visitors.length !== r.keys.length || r.firsts.length !== r.keys.length) {
      throw new Error('a visit table of an impossible shape');
    }
    const t = new VisitTable(0);
    t.keys = r.keys;
    t.visitors = r.visitors;
    t.firsts = r.firsts;
    t.mask = capacity - 1;
    t.hasZero = r.hasZero;
    t.size = r.size;
    return t;
  }
}
