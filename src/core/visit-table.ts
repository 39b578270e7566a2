/**
 * A day's visits (hash53(sessionId) -> the visit's visitor and the time of its first event), so the visitor a visit
 * counts for is the one its earliest event names (CONTRACT "GET /metrics": `users`), whatever order events arrive in.
 * Open addressing over typed arrays like number-table.ts: 24 bytes a visit at a load of at most 70 %. The key 0 (a
 * hash of probability 2^-53) is kept in fields beside the table, which probing never reaches.
 */

import { freeNow } from './free-now.ts';

/** Grow past this load: linear probing stays short below it (as in number-table.ts). */
const MAX_LOAD = 0.7;
/**
 * Smallest table: 8 slots (5 visits) make arrays of 64 bytes, which V8 keeps inside its heap; one slot more and each
 * array is a separate native allocation with its own bookkeeping (~0.3 KB for a day of one visit, times thousands of
 * small projects' live days).
 */
const MIN_CAPACITY = 8;
/** A restored table this small is copied into fresh arrays (kept in V8's heap) instead of viewing the snapshot's. */
const COPY_ON_RESTORE = MIN_CAPACITY;

/**
 * The table's snapshot form: its visits only (size entries, the key 0's among them when `hasZero`); snapshots written
 * before hold the table itself, capacity + 1 slots, 0 = empty, the key 0's visit in the last slot. Both restore.
 */
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
  private zeroVisitor = 0;
  private zeroFirst = 0;
  /** the arrays view a snapshot's (fromRaw) rather than being the table's own: growing must not free them */
  private borrowed = false;
  size = 0;

  constructor(capacity = MIN_CAPACITY) {
    this.keys = new Float64Array(capacity);
    this.visitors = new Float64Array(capacity);
    this.firsts = new Float64Array(capacity);
    this.mask = capacity - 1;
  }

  /** The slot of visit `k` (mask + 1 for the key 0), or -1 when the day has no such visit. */
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
    return slot > this.mask ? this.zeroVisitor : this.visitors[slot]!;
  }

  firstAt(slot: number): number {
    return slot > this.mask ? this.zeroFirst : this.firsts[slot]!;
  }

  /** A visit's visitor moves to an event earlier than its first one. */
  setAt(slot: number, visitor: number, first: number): void {
    if (slot > this.mask) {
      this.zeroVisitor = visitor;
      this.zeroFirst = first;
      return;
    }
    this.visitors[slot] = visitor;
    this.firsts[slot] = first;
  }

  /** Adds visit `k` (absent: see find). */
  add(k: number, visitor: number, first: number): void {
    if (k === 0) {
      this.hasZero = true;
      this.zeroVisitor = visitor;
      this.zeroFirst = first;
    } else {
      let i = (k >>> 0) & this.mask;
      while (this.keys[i] !== 0) i = (i + 1) & this.mask;
      this.keys[i] = k;
      this.visitors[i] = visitor;
      this.firsts[i] = first;
    }
    if (++this.size > (this.mask + 1) * MAX_LOAD) this.grow();
  }

  private grow(): void {
    const { keys, visitors, firsts } = this;
    const capacity = (this.mask + 1) * 2;
    this.keys = new Float64Array(capacity);
    this.visitors = new Float64Array(capacity);
    this.firsts = new Float64Array(capacity);
    this.mask = capacity - 1;
    this.size = this.hasZero ? 1 : 0;
    for (let j = 0; j < keys.length; j++) if (keys[j] !== 0) this.add(keys[j]!, visitors[j]!, firsts[j]!);
    if (!this.borrowed) {
      freeNow(keys.buffer);
      freeNow(visitors.buffer);
      freeNow(firsts.buffer);
    }
    this.borrowed = false;
  }

  /**
   * The table in its snapshot form: its visits without empty slots (the key 0's among them), so a snapshot, and a day
   * asleep in memory as its bytes, holds ~half of what the table does at its 35–70 % load.
   */
  raw(): RawVisitTable {
    const n = this.size;
    const keys = new Float64Array(n);
    const visitors = new Float64Array(n);
    const firsts = new Float64Array(n);
    let o = 0;
    if (this.hasZero) {
      visitors[o] = this.zeroVisitor;
      firsts[o++] = this.zeroFirst;
    }
    for (let j = 0; j < this.keys.length; j++) {
      if (this.keys[j] === 0) continue;
      keys[o] = this.keys[j]!;
      visitors[o] = this.visitors[j]!;
      firsts[o++] = this.firsts[j]!;
    }
    return { keys, visitors, firsts, hasZero: this.hasZero, size: n };
  }

  static fromRaw(r: RawVisitTable): VisitTable {
    // visits only (keys.length === size): a table with its slots is capacity + 1 long, always more than its size
    if (r.keys.length === r.size) {
      if (r.visitors.length !== r.size || r.firsts.length !== r.size) throw new Error('a visit table of an impossible shape');
      let capacity = MIN_CAPACITY;
      while (capacity * MAX_LOAD < r.size) capacity *= 2;
      // distinct visits (a snapshot's): placed straight into their slots
      const t = new VisitTable(capacity);
      const mask = capacity - 1;
      for (let j = 0; j < r.size; j++) {
        const k = r.keys[j]!;
        if (k === 0) {
          t.hasZero = true;
          t.zeroVisitor = r.visitors[j]!;
          t.zeroFirst = r.firsts[j]!;
          continue;
        }
        let i = (k >>> 0) & mask;
        while (t.keys[i] !== 0) i = (i + 1) & mask;
        t.keys[i] = k;
        t.visitors[i] = r.visitors[j]!;
        t.firsts[i] = r.firsts[j]!;
      }
      t.size = r.size;
      return t;
    }
    const capacity = r.keys.length - 1;
    if (capacity < 1 || (capacity & (capacity - 1)) !== 0 || r.visitors.length !== r.keys.length || r.firsts.length !== r.keys.length) {
      throw new Error('a visit table of an impossible shape');
    }
    const t = new VisitTable(0);
    // Small tables get arrays of their own (in V8's heap); large ones view the snapshot's arrays without the last slot.
    const take = (a: Float64Array): Float64Array => (capacity <= COPY_ON_RESTORE ? a.slice(0, capacity) : a.subarray(0, capacity));
    t.keys = take(r.keys);
    t.visitors = take(r.visitors);
    t.firsts = take(r.firsts);
    t.borrowed = capacity > COPY_ON_RESTORE;
    t.mask = capacity - 1;
    t.hasZero = r.hasZero;
    t.zeroVisitor = r.hasZero ? r.visitors[capacity]! : 0;
    t.zeroFirst = r.hasZero ? r.firsts[capacity]! : 0;
    t.size = r.size;
    return t;
  }
}
