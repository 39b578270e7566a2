/**
 * Event properties of a segment, kept sparsely: one entry per (event, key) an event carries, never a column per key.
 * A page may send a new key in every event; a dense column per key cost keys × events (10,000 such events took the
 * service from 45 to 630 MiB), entries cost what is stored.
 *
 * Three shapes share the PropIndex interface: the open segment's entries in log order (grouped by key when asked),
 * a sealed segment's entries grouped by key with one value dictionary per key (codec.ts: a question parses only the
 * keys it names), and a merged day's. A question reads one key as a dense column (`denseProp`), built when asked.
 */

import { Interner, type Codes, type PropColumn } from './codes.ts';

/** A segment's properties, grouped by key. */
export interface PropIndex {
  /** the keys, by key code (0-based) */
  readonly keys: readonly string[];
  /** entries of key k are at[k] .. at[k+1]-1 (keys.length + 1 entries) */
  readonly at: Uint32Array;
  /** the event (index in the segment) of each entry */
  readonly rows: Codes;
  /** each entry's value: 1-based code into values(k) */
  readonly vals: Codes;
  /** true: values(k) is one dictionary shared by every key (an entry's key does not narrow it) */
  readonly shared: boolean;
  /** the value dictionary the entries of key k index */
  values(k: number): readonly string[];
  /** key code of `key`, or -1 */
  find(key: string): number;
}

/** Entries (and keys) of an index. */
export const entryCount = (ix: PropIndex): number => ix.at[ix.keys.length] ?? 0;

/** A PropIndex over arrays; `find` builds its map of keys on first use. */
export function propIndex(keys: readonly string[], at: Uint32Array, rows: Codes, vals: Codes, shared: boolean, values: (k: number) => readonly string[]): PropIndex {
  let byKey: Map<string, number> | undefined;
  return {
    keys,
    at,
    rows,
    vals,
    shared,
    values,
    find(key) {
      if (!byKey) {
        byKey = new Map();
        for (let k = 0; k < keys.length; k++) byKey.set(keys[k]!, k);
      }
      return byKey.get(key) ?? -1;
    },
  };
}

const NO_KEYS: PropIndex = propIndex([], new Uint32Array(1), new Uint32Array(0), new Uint32Array(0), true, () => []);

/** Entries in log order (an open segment's): event `row[j]` carries key `key[j]` (0-based) with value `val[j]` (1-based into `values`). */
export interface PropEntries {
  count: number;
  row: Uint32Array;
  key: Uint32Array;
  val: Uint32Array;
  keys: readonly string[];
  /** keys known when the entries were taken (later keys have no entry below `count`) */
  keyCount: number;
  values: readonly string[];
}

/** Groups entries in log order by key (a counting sort: events stay ascending within a key). */
export function groupByKey(e: PropEntries): PropIndex {
  if (e.count === 0) return NO_KEYS;
  const K = e.keyCount;
  const at = new Uint32Array(K + 1);
  for (let j = 0; j < e.count; j++) at[e.key[j]! + 1]!++;
  for (let k = 0; k < K; k++) at[k + 1]! += at[k]!;
  const cursor = at.slice(0, K);
  const rows = new Uint32Array(e.count);
  const vals = new Uint32Array(e.count);
  for (let j = 0; j < e.count; j++) {
    const c = cursor[e.key[j]!]!++;
    rows[c] = e.row[j]!;
    vals[c] = e.val[j]!;
  }
  const values = e.values;
  return propIndex(e.keys.slice(0, K), at, rows, vals, true, () => values);
}

/** One key of entries in log order as a dense column of `n` events, its dictionary holding only that key's values. */
export function scanProp(e: PropEntries, n: number, keyCode: number | undefined): PropColumn | undefined {
  if (keyCode === undefined || keyCode >= e.keyCount) return undefined;
  const codes = new Uint32Array(n);
  const local = new LocalDict(e.values);
  for (let j = 0; j < e.count; j++) if (e.key[j] === keyCode) codes[e.row[j]!] = local.code(e.val[j]!);
  return { codes, dict: local.dict };
}

/** A dictionary of one key's values, coded as they are met, over a dictionary shared by every key. */
class LocalDict {
  readonly dict: string[] = [];
  private readonly local = new Map<number, number>();
  constructor(private readonly shared: readonly string[]) {}
  /** local code (1-based) of shared code g */
  code(g: number): number {
    let c = this.local.get(g);
    if (c === undefined) {
      this.dict.push(this.shared[g - 1]!);
      c = this.dict.length;
      this.local.set(g, c);
    }
    return c;
  }
}

/**
 * Key k's entries with each value coded in a dictionary of that key alone (`put(j, code)` for entry j): a question
 * reads, and a sealed segment stores, only that key's values. Returns the dictionary.
 */
function localValues(ix: PropIndex, k: number, put: (j: number, code: number) => void): readonly string[] {
  const from = ix.at[k]!;
  const to = ix.at[k + 1]!;
  const all = ix.values(k);
  if (!ix.shared) {
    for (let j = from; j < to; j++) put(j, ix.vals[j]!);
    return all;
  }
  const local = new LocalDict(all);
  for (let j = from; j < to; j++) put(j, local.code(ix.vals[j]!));
  return local.dict;
}

/** Key `key` of an index as a dense column of `n` events (0: the event does not carry it). */
export function denseProp(ix: PropIndex, key: string, n: number): PropColumn | undefined {
  const k = ix.find(key);
  if (k < 0) return undefined;
  const codes = new Uint32Array(n);
  const rows = ix.rows;
  const dict = localValues(ix, k, (j, c) => (codes[rows[j]!] = c));
  return { codes, dict };
}

/** Key k's entries' codes in a dictionary of that key alone, written into `out` at the entries' positions (for storing). */
export function ownValues(ix: PropIndex, k: number, out: Uint32Array): readonly string[] {
  return localValues(ix, k, (j, c) => (out[j] = c));
}

/**
 * The properties of dense columns (segments stored before version 3): each key's non-zero codes become entries. Time
 * keys × events (as those segments' bytes were), memory the entries.
 */
export function fromDense(n: number, keys: readonly string[], column: (key: string) => PropColumn): PropIndex {
  const at = new Uint32Array(keys.length + 1);
  const cols = keys.map((key) => column(key));
  for (let k = 0; k < keys.length; k++) {
    const codes = cols[k]!.codes;
    let count = 0;
    for (let i = 0; i < n; i++) if (codes[i] !== 0) count++;
    at[k + 1] = at[k]! + count;
  }
  const P = at[keys.length]!;
  const rows = new Uint32Array(P);
  const vals = new Uint32Array(P);
  for (let k = 0; k < keys.length; k++) {
    const codes = cols[k]!.codes;
    let j = at[k]!;
    for (let i = 0; i < n; i++) {
      if (codes[i] === 0) continue;
      rows[j] = i;
      vals[j++] = codes[i]!;
    }
  }
  return propIndex(keys, at, rows, vals, false, (k) => cols[k]!.dict);
}

/**
 * The properties of segments merged into one day (day-table.ts): entry events moved to their merged position
 * (`srcSeg`/`srcIdx`: where merged event k came from; `sizes`: each segment's events), keys and values coded day-wide (one shared dictionary).
 */
export function mergeProps(ixs: readonly PropIndex[], sizes: readonly number[], srcSeg: Int32Array, srcIdx: Int32Array): PropIndex {
  let P = 0;
  for (const ix of ixs) P += entryCount(ix);
  if (P === 0) return NO_KEYS;
  const pos = sizes.map((n) => new Uint32Array(n));
  for (let k = 0; k < srcSeg.length; k++) pos[srcSeg[k]!]![srcIdx[k]!] = k;
  const keys = new Interner();
  const keyMaps = ixs.map((ix) => Uint32Array.from(ix.keys, (key) => keys.code(key) - 1));
  const K = keys.values.length;
  const at = new Uint32Array(K + 1);
  ixs.forEach((ix, si) => {
    for (let k = 0; k < ix.keys.length; k++) at[keyMaps[si]![k]! + 1]! += ix.at[k + 1]! - ix.at[k]!;
  });
  for (let k = 0; k < K; k++) at[k + 1]! += at[k]!;
  const cursor = at.slice(0, K);
  const rows = new Uint32Array(P);
  const vals = new Uint32Array(P);
  const values = new Interner();
  ixs.forEach((ix, si) => {
    const p = pos[si]!;
    for (let k = 0; k < ix.keys.length; k++) {
      const mk = keyMaps[si]![k]!;
      const vs = ix.values(k);
      for (let j = ix.at[k]!; j < ix.at[k + 1]!; j++) {
        const c = cursor[mk]!++;
        rows[c] = p[ix.rows[j]!]!;
        vals[c] = values.code(vs[ix.vals[j]! - 1]!);
      }
    }
  });
  const dict = values.values;
  return propIndex(keys.values, at, rows, vals, true, () => dict);
}
