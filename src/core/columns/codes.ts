/** Dictionary codes: what every column of a segment holds, and the interner that hands them out. */

export type Codes = Uint8Array | Uint16Array | Uint32Array;

/** A column of codes with its dictionary: code 0 is no value, code k is `dict[k - 1]`. */
export interface PropColumn {
  codes: Codes;
  dict: readonly string[];
}

/**
 * Heap bytes a dictionary entry costs besides its characters: the string's header, its Map entry and array slot
 * (an estimate for budgets, measured as ~60–70 B with short strings).
 */
export const DICT_ENTRY_BYTES = 64;

/** Dictionary codes of one column: 1-based in first-seen order (0 is no value). */
export class Interner {
  readonly map = new Map<string, number>();
  readonly values: string[] = [];
  /** about what the dictionary holds on the heap (DICT_ENTRY_BYTES and the characters of each value) */
  bytes = 0;
  /** the last value coded and its code: a visit's events mostly repeat the one before (its country, device, source) */
  private last: string | undefined;
  private lastCode = 0;
  /** code of `s` (1-based; 0 is no value) */
  code(s: string): number {
    if (s === this.last) return this.lastCode;
    let c = this.map.get(s);
    if (c === undefined) {
      this.values.push(s);
      c = this.values.length;
      this.map.set(s, c);
      this.bytes += DICT_ENTRY_BYTES + s.length;
    }
    this.last = s;
    this.lastCode = c;
    return c;
  }
}

/** Remaps a segment's dictionary into `into`: out[code] is the code in `into` (out[0] = 0). */
export function remapDict(dict: readonly string[] | undefined, into: Interner): Int32Array {
  const out = new Int32Array((dict?.length ?? 0) + 1);
  if (dict) for (let i = 0; i < dict.length; i++) out[i + 1] = into.code(dict[i]!);
  return out;
}
