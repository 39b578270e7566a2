/**
 * A set of 32-bit fingerprints of hash53 values: an open-addressing table of Uint32 (4 bytes a slot, 0 = empty), for a
 * filter in front of a store that holds the exact keys. `has` is never wrong about a value added (no false negatives);
 * it may say yes for one never added (two values sharing their low 32 bits: with a table of 2^k slots, about n / 2^32
 * of lookups), so a yes must be confirmed where the keys are. A third of a hash53 -> Uint32 table (12 bytes a slot).
 * Sized and grown as the tables of number-table.ts are.
 */
import { freeNow } from './free-now.ts';
import { capacityFor, MAX_LOAD } from './number-table.ts';

/** The fingerprint of a hash53: its low 32 bits, with 0 (the empty slot) moved to 1. */
function fingerprint(h: number): number {
  return h >>> 0 || 1;
}

/** A slot for a fingerprint: a multiplicative mix, so fingerprints sharing low bits do not pile up together. */
function home(fp: number, mask: number): number {
  return (Math.imul(fp, 0x9e3779b1) >>> 0) & mask;
}

export class FingerprintSet {
  private slots: Uint32Array;
  private mask: number;
  /** distinct fingerprints held (values sharing their low 32 bits count once: ~n² / 2^33 of n values) */
  size = 0;

  /** `expected`: how many values will be added (sized once instead of doubling up to it). */
  constructor(expected = 0) {
    this.slots = new Uint32Array(capacityFor(expected));
    this.mask = this.slots.length - 1;
  }

  add(h: number): void {
    const fp = fingerprint(h);
    const slots = this.slots;
    let i = home(fp, this.mask);
    for (;;) {
      const s = slots[i]!;
      if (s === fp) return;
      if (s === 0) break;
      i = (i + 1) & this.mask;
    }
    slots[i] = fp;
    if (++this.size > this.slots.length * MAX_LOAD) this.grow();
  }

  /** True for every value added, and rarely for one that was not (see the class comment). */
  has(h: number): boolean {
    const fp = fingerprint(h);
    const slots = this.slots;
    for (let i = home(fp, this.mask); ; i = (i + 1) & this.mask) {
      const s = slots[i]!;
      if (s === fp) return true;
      if (s === 0) return false;
    }
  }

  /** Bytes of the table. */
  get byteLength(): number {
    return this.slots.byteLength;
  }

  private grow(): void {
    const old = this.slots;
    const slots = new Uint32Array(old.length * 2);
    const mask = slots.length - 1;
    for (let j = 0; j < old.length; j++) {
      const fp = old[j]!;
      if (fp === 0) continue;
      let i = home(fp, mask);
      while (slots[i] !== 0) i = (i + 1) & mask;
      slots[i] = fp;
    }
    freeNow(old.buffer);
    this.slots = slots;
    this.mask = mask;
  }
}
