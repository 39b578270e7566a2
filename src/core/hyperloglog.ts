import { HLL_PRECISION } from './limits.ts';

const M = 1 << HLL_PRECISION;
const INDEX_MASK = M - 1;
const TWO_32 = 4294967296;
/** bias correction constant for m >= 128 (Flajolet et al.) */
const ALPHA = 0.7213 / (1 + 1.079 / M);

/**
 * HyperLogLog over the 53-bit hashes of hash53: the low bits pick a register, the next 32 bits give the rank.
 * Merging is a register-wise max, so a range's distinct users is a merge of daily sketches, never a scan.
 */
export class HyperLogLog {
  readonly registers: Uint8Array;

  constructor(registers?: Uint8Array) {
    this.registers = registers ?? new Uint8Array(M);
  }

  add(hash: number): void {
    const low = hash % TWO_32;
    const high = Math.floor(hash / TWO_32);
    const index = low & INDEX_MASK;
    // 21 high bits and the 11 top bits of the low word: 32 bits not used for the index.
    const w = ((high << 11) | (low >>> 21)) >>> 0;
    const rank = w === 0 ? 33 : Math.clz32(w) + 1;
    if (rank > this.registers[index]!) this.registers[index] = rank;
  }

  merge(other: HyperLogLog): void {
    const a = this.registers;
    const b = other.registers;
    for (let i = 0; i < M; i++) if (b[i]! > a[i]!) a[i] = b[i]!;
  }

  estimate(): number {
    let sum = 0;
    let zeros = 0;
    const r = this.registers;
    for (let i = 0; i < M; i++) {
      const v = r[i]!;
      sum += 1 / 2 ** v;
      if (v === 0) zeros++;
    }
    const raw = (ALPHA * M * M) / sum;
    // Linear counting is far more accurate while many registers are still empty.
    if (raw <= 2.5 * M && zeros > 0) return Math.round(M * Math.log(M / zeros));
    return Math.round(raw);
  }
}
