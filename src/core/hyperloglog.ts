import { HLL_PRECISION } from './limits.ts';

const M = 1 << HLL_PRECISION;
const INDEX_MASK = M - 1;
const TWO_32 = 4294967296;
/** bias correction constant for m >= 128 (Flajolet et al.) */
const ALPHA = 0.7213 / (1 + 1.079 / M);
/** 2^-rank for every rank a register can hold (0..33): the estimate sums 65,536 of these, and Math.pow is slow. */
const INVERSE_POWERS = Float64Array.from({ length: 64 }, (_, v) => 2 ** -v);
/** High bit of every byte: registers hold at most 33, so bytes never reach it (the SWAR merge relies on that). */
const HIGH_BITS = 0x80808080;

function fmix32(x: number): number {
  let h = x | 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * HyperLogLog over the 53-bit hashes of hash53: the low bits pick a register, the next 32 bits give the rank.
 * Merging is a register-wise max, so a range's distinct users is a merge of daily sketches, never a scan.
 */
export class HyperLogLog {
  readonly registers: Uint8Array;
  /** the same bytes, four at a time (merge) */
  private readonly words: Uint32Array;

  constructor(registers?: Uint8Array) {
    this.registers = registers ?? new Uint8Array(M);
    this.words = new Uint32Array(this.registers.buffer, this.registers.byteOffset, M >> 2);
  }

  add(hash: number): void {
    const low = hash % TWO_32;
    const high = Math.floor(hash / TWO_32);
    // Re-mix both words (murmur3's finalizer): the register index and the rank must look independent and
    // uniform even when the input hashes come from sequential ids. Measured: without this, 1M "user-N" ids
    // were over-counted by 1.2 % (3 sigma); with it, errors match the 0.41 % standard error.
    const index = fmix32(low ^ Math.imul(high, 0x9e3779b1)) & INDEX_MASK;
    const w = fmix32(high ^ Math.imul(low, 0x85ebca6b) ^ 0x5bd1e995);
    const rank = w === 0 ? 33 : Math.clz32(w) + 1;
    if (rank > this.registers[index]!) this.registers[index] = rank;
  }

  /**
   * Register-wise max, four registers per 32-bit word (a 30-day range merges 30 × 64 KiB; byte by byte that was 60 %
   * of a /metrics read). Every byte is below 128, so (a | 0x80) - b never borrows across bytes and its high bit says
   * a >= b; that bit spread over its byte selects a's byte or b's.
   */
  merge(other: HyperLogLog): void {
    const a = this.words;
    const b = other.words;
    for (let i = 0; i < a.length; i++) {
      const x = a[i]!;
      const y = b[i]!;
      if (x === y) continue;
      const ge = (((x | HIGH_BITS) - y) & HIGH_BITS) >>> 7; // 1 in each byte where x >= y
      const keepX = Math.imul(ge, 0xff);
      a[i] = (x & keepX) | (y & ~keepX);
    }
  }

  estimate(): number {
    let sum = 0;
    let zeros = 0;
    const r = this.registers;
    for (let i = 0; i < M; i++) {
      const v = r[i]!;
      sum += INVERSE_POWERS[v]!;
      if (v === 0) zeros++;
    }
    const raw = (ALPHA * M * M) / sum;
    // Linear counting is far more accurate while many registers are still empty.
    if (raw <= 2.5 * M && zeros > 0) return Math.round(M * Math.log(M / zeros));
    return Math.round(raw);
  }
}
