/**
 * A string -> small id index over one Uint32Array (a ring's string table, recent-ring.ts): what a Map<string, number>
 * does there, without a Map's per-entry objects. A ring keeps thousands of strings and replaces them as it turns, so
 * its Map churned (deleted entries, rehashed tables) and every full collection walked its entries; this table is
 * one typed array the collector never looks into, ~8 bytes a string at its load.
 *
 * Open addressing with linear probing; a slot holds `tag << 16 | (id + 1)` (0 = empty), where the tag is the low 16
 * bits of the string's hash: a slot's home is the tag's low bits (so a table can grow and shift without the strings),
 * and it spares most string comparisons. A table past 2^16 slots (a ring of over 4,096 entries) has its homes in
 * the first 2^16 and probes on from there: slower, still exact.
 * Deletion shifts the probe run back (no tombstones), so a table that turns for ever stays as short as its contents.
 * The strings themselves stay in the caller's array; the index is told each string's id and asks it back.
 */

import { hash53 } from './hash.ts';

/** Grow past this load: linear probes stay short below it. */
const MAX_LOAD = 0.5;
/** Smallest table: 16 slots (64 bytes, kept inside V8's heap), enough for a ring of two entries' distinct strings. */
const MIN_SLOTS = 16;
/** Ids fit the slot's low 16 bits as id + 1. */
export const MAX_INDEX_ID = 0xfffe;

/** A 32-bit hash of the whole string: the low 32 bits of hash53 (as fast as a one-lane hash here, ~115 ns a URL). */
export function stringHash(s: string): number {
  return hash53(s) >>> 0;
}

export class StringIndex {
  private slots = new Uint32Array(MIN_SLOTS);
  private mask = MIN_SLOTS - 1;
  size = 0;

  /** The id of the string equal to `s` (`h` its stringHash) among `strings`, or -1. */
  find(s: string, h: number, strings: ReadonlyArray<string | undefined>): number {
    const tag = h & 0xffff;
    const t = this.slots;
    for (let i = tag & this.mask; ; i = (i + 1) & this.mask) {
      const e = t[i]!;
      if (e === 0) return -1;
      if (e >>> 16 === tag && strings[(e & 0xffff) - 1] === s) return (e & 0xffff) - 1;
    }
  }

  /** Adds `id` (not in the index) for a string of hash `h`. */
  add(id: number, h: number): void {
    if (id < 0 || id > MAX_INDEX_ID) throw new Error(`string id ${id} does not fit the index`);
    if (++this.size > this.slots.length * MAX_LOAD) this.grow();
    this.place((((h & 0xffff) << 16) | (id + 1)) >>> 0);
  }

  /** Removes `id` (in the index, for a string of hash `h`). */
  remove(id: number, h: number): void {
    const t = this.slots;
    const mask = this.mask;
    let hole = h & 0xffff & mask;
    while ((t[hole]! & 0xffff) !== id + 1) {
      if (t[hole] === 0) throw new Error(`string id ${id} is not in the index`);
      hole = (hole + 1) & mask;
    }
    // Shift back every later entry of the run that may sit in the hole: one whose home is not after the hole
    // (cyclically), so each entry stays reachable from its home without a tombstone.
    for (let j = (hole + 1) & mask; t[j] !== 0; j = (j + 1) & mask) {
      const home = (t[j]! >>> 16) & mask;
      if (((j - home) & mask) >= ((j - hole) & mask)) {
        t[hole] = t[j]!;
        hole = j;
      }
    }
    t[hole] = 0;
    this.size--;
  }

  private place(e: number): void {
    const t = this.slots;
    let i = (e >>> 16) & this.mask;
    while (t[i] !== 0) i = (i + 1) & this.mask;
    t[i] = e;
  }

  private grow(): void {
    const old = this.slots;
    this.slots = new Uint32Array(old.length * 2);
    this.mask = this.slots.length - 1;
    for (let i = 0; i < old.length; i++) if (old[i] !== 0) this.place(old[i]!);
  }
}
