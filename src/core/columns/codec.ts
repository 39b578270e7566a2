/**
 * One sealed segment as one byte array: a header (magic, version, checksum, meta length), a JSON meta block (counts,
 * zone facts, where each block lies), then 8-byte aligned blocks: the time column (Int32), code columns at the
 * narrowest width their dictionary allows (1, 2 or 4 bytes), and each dictionary as a JSON array of strings (V8
 * parses JSON arrays of strings faster than any loop over length-prefixed bytes). A merged day (day-table.ts) also
 * carries its visit table. Decoding gives typed-array views over the bytes, without copying; a dictionary is parsed
 * the first time a question needs it. Properties (version 3) are entries grouped by key (props.ts) with one value
 * dictionary per key, each its own JSON text, so a question parses the keys' list and the values of the keys it names.
 * Versions 1 (no visit table, 4-byte alignment) and 2 (a dense column per property key) are still read.
 *
 * The checksum function is passed in (the store has a native CRC-32), so this file stays pure.
 */

import type { Codes, PropColumn } from './codes.ts';
import { VISIT_VALUE_COLUMNS, type DayTable, type VisitTable } from './day-table.ts';
import { denseProp, entryCount, fromDense, ownValues, propIndex, type PropIndex } from './props.ts';
import { VALUE_COLUMNS, type SegmentView, type ValueColumn } from './segment.ts';

const MAGIC = 0x4c4f4341; // 'ACOL'
export const SEGMENT_VERSION = 3;
/** versions this release reads: 1 has no visit table and aligns blocks to 4 bytes, 1 and 2 a dense column per property key */
const READABLE = [1, 2, 3];
/** magic, version, checksum, meta length: four u32 */
const HEADER_BYTES = 16;

type Crc = (bytes: Uint8Array) => number;

/** [offset, width] of a code column; [offset, length] of a dictionary block */
type Block = [number, number];

interface Meta {
  n: number;
  firstSeq: number;
  lastSeq: number;
  dayStart: number;
  minT: number;
  maxT: number;
  visitBase: number;
  userBase: number;
  time: number;
  /** absent in a merged day: its events are grouped by visit (the table's starts give each event's visit) */
  visit?: Block;
  /** absent in a merged day: every event of a visit stands for the visit's visitor (only the first event's counts) */
  user?: Block;
  visits: Block;
  users: Block;
  cols: Record<string, { codes: Block; dict: Block }>;
  /** versions 1 and 2: a dense column per key; 3: entries grouped by key */
  props: DenseProps | PropsMeta;
  table?: {
    V: number;
    U: number;
    start: number;
    firstT: number;
    lastT: number;
    userHash: number;
    pv: Block;
    entry: Block;
    exit: Block;
    user: Block;
    cols: Record<string, Block>;
  };
}

type DenseProps = Array<{ key: string; codes: Block; dict: Block }>;

/** Properties of version 3: K keys, P entries (props.ts's PropIndex, each key's values in a dictionary of its own). */
interface PropsMeta {
  K: number;
  P: number;
  /** the keys as a JSON array */
  keys: Block;
  /** u32 × (K + 1): entries of key k are at[k] .. at[k+1]-1 */
  at: number;
  /** per entry: the event, and the value's code in its key's dictionary */
  rows: Block;
  vals: Block;
  /** each key's dictionary as a JSON array, one after another; u32 × (K + 1) byte offsets of each in it */
  values: Block;
  valueAt: number;
}

const widthFor = (maxCode: number): 1 | 2 | 4 => (maxCode < 256 ? 1 : maxCode < 65_536 ? 2 : 4);
const align4 = (n: number): number => (n + 3) & ~3;
const align8 = (n: number): number => (n + 7) & ~7;

function maxOf(a: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) if (a[i]! > m) m = a[i]!;
  return m;
}

/** A block of the data area: code columns are copied at their width, the rest (time, dictionaries, table arrays) as bytes. */
type Part = { at: number; bytes: Uint8Array; codes?: undefined } | { at: number; codes: Codes; n: number; width: 1 | 2 | 4 };

/**
 * Encodes a segment; with a visit table when given one (a merged day). Laid out first (offsets, widths, the
 * dictionaries' bytes), then written once into the output: a segment of a few dozen events is ~30 blocks, and
 * copying each into a buffer of its own before the output was most of its cost.
 */
export function encodeSegment(s: SegmentView, crc: Crc, table?: VisitTable): Uint8Array {
  const enc = new TextEncoder();
  const parts: Part[] = [];
  let at = 0;
  const add = (bytes: Uint8Array): number => {
    at = align8(at);
    const off = at;
    parts.push({ at: off, bytes });
    at += bytes.byteLength;
    return off;
  };
  const codes = (a: Codes, n: number): Block => {
    let max = 0;
    for (let i = 0; i < n; i++) if (a[i]! > max) max = a[i]!;
    const width = widthFor(max);
    at = align8(at);
    const off = at;
    parts.push({ at: off, codes: a, n, width });
    at += n * width;
    return [off, width];
  };
  const dict = (values: readonly string[]): Block => {
    const bytes = enc.encode(JSON.stringify(values));
    return [add(bytes), bytes.byteLength];
  };
  const bytesOf = (a: Int32Array | Uint32Array | Float64Array, n = a.length): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, n * a.BYTES_PER_ELEMENT);
  const n = s.n;
  const time = add(bytesOf(s.time, n));
  const visit = table ? undefined : codes(s.visit, n);
  const user = table ? undefined : codes(s.user, n);
  const visits = dict(s.visitDict());
  const users = dict(s.userDict());
  const cols: Meta['cols'] = {};
  for (const c of VALUE_COLUMNS) cols[c] = { codes: codes(s.column(c), n), dict: dict(s.dict(c)) };
  const props = encodeProps(s.props(), enc, { add, codes, dict, bytesOf });
  const tableMeta: Meta['table'] = table && {
    V: table.V,
    U: table.U,
    start: add(bytesOf(table.start)),
    firstT: add(bytesOf(table.firstT)),
    lastT: add(bytesOf(table.lastT)),
    userHash: add(bytesOf(table.userHash)),
    pv: codes(table.pv, table.V),
    entry: codes(table.entry, table.V),
    exit: codes(table.exit, table.V),
    user: codes(table.user, table.V),
    cols: Object.fromEntries(VISIT_VALUE_COLUMNS.map((c) => [c, codes(table.col(c), table.V)])),
  };
  const meta: Meta = {
    n,
    firstSeq: s.firstSeq,
    lastSeq: s.lastSeq,
    dayStart: s.dayStart,
    minT: s.minT,
    maxT: s.maxT,
    visitBase: s.visitBase,
    userBase: s.userBase,
    time,
    visit,
    user,
    visits,
    users,
    cols,
    props,
    table: tableMeta,
  };
  const metaBytes = enc.encode(JSON.stringify(meta));
  const dataStart = align8(HEADER_BYTES + metaBytes.byteLength);
  const out = new Uint8Array(dataStart + at);
  const head = new DataView(out.buffer);
  head.setUint32(0, MAGIC, true);
  head.setUint32(4, SEGMENT_VERSION, true);
  head.setUint32(12, metaBytes.byteLength, true);
  out.set(metaBytes, HEADER_BYTES);
  for (const p of parts) {
    if (p.codes === undefined) {
      out.set(p.bytes, dataStart + p.at);
      continue;
    }
    // the block starts 8-byte aligned in `out` (dataStart and p.at both are), so a view of its width fits
    const to = p.width === 1 ? new Uint8Array(out.buffer, dataStart + p.at, p.n) : p.width === 2 ? new Uint16Array(out.buffer, dataStart + p.at, p.n) : new Uint32Array(out.buffer, dataStart + p.at, p.n);
    const from = p.codes;
    if (p.n < COPY_BY_LOOP) for (let i = 0; i < p.n; i++) to[i] = from[i]!;
    else to.set(from.subarray(0, p.n));
  }
  head.setUint32(8, crc(out.subarray(12)), true);
  return out;
}

interface Writers {
  add(bytes: Uint8Array): number;
  codes(a: Codes, n: number): Block;
  dict(values: readonly string[]): Block;
  bytesOf(a: Uint32Array): Uint8Array;
}

/** The properties' blocks: entries grouped by key, each key's values coded into a dictionary of its own. */
function encodeProps(ix: PropIndex, enc: TextEncoder, w: Writers): PropsMeta {
  const K = ix.keys.length;
  const P = entryCount(ix);
  const own = new Uint32Array(P);
  const pieces: Uint8Array[] = [];
  const valueAt = new Uint32Array(K + 1);
  let len = 0;
  for (let k = 0; k < K; k++) {
    const b = enc.encode(JSON.stringify(ownValues(ix, k, own)));
    pieces.push(b);
    len += b.byteLength;
    valueAt[k + 1] = len;
  }
  const blob = new Uint8Array(len);
  let at = 0;
  for (const b of pieces) {
    blob.set(b, at);
    at += b.byteLength;
  }
  return {
    K,
    P,
    keys: w.dict(ix.keys),
    at: w.add(w.bytesOf(ix.at)),
    rows: w.codes(ix.rows, P),
    vals: w.codes(own, P),
    values: [w.add(blob), len],
    valueAt: w.add(w.bytesOf(valueAt)),
  };
}

/** Code blocks shorter than this are copied in a loop (a subarray for set() costs more than a few dozen moves). */
const COPY_BY_LOOP = 64;

/** Why bytes are not a segment this version reads, or undefined when the checksum and header hold. */
export function verifySegment(bytes: Uint8Array, crc: Crc): string | undefined {
  if (bytes.byteLength < HEADER_BYTES) return 'too short for a segment header';
  const head = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (head.getUint32(0, true) !== MAGIC) return 'not a column segment (bad magic)';
  if (!READABLE.includes(head.getUint32(4, true))) return `segment version ${head.getUint32(4, true)}, this release reads ${READABLE.join(' and ')}`;
  if (head.getUint32(8, true) !== crc(bytes.subarray(12))) return 'checksum mismatch';
  return undefined;
}

/** A decoded segment, with its visit table when it is a merged day. */
export interface DecodedSegment {
  view: SegmentView;
  table: VisitTable | undefined;
}

/**
 * A view over an encoded segment. The bytes must start at an 8-byte aligned offset (typed arrays need it); when they
 * do not, they are copied once into aligned memory.
 */
export function decodeSegment(input: Uint8Array): SegmentView {
  return decodeDay(input).view;
}

export function decodeDay(input: Uint8Array): DecodedSegment {
  const bytes = input.byteOffset % 8 === 0 ? input : input.slice();
  const head = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (head.getUint32(0, true) !== MAGIC) throw new Error('not a column segment (bad magic)');
  const version = head.getUint32(4, true);
  if (!READABLE.includes(version)) throw new Error(`segment version ${version} is not readable here`);
  const metaLen = head.getUint32(12, true);
  const dec = new TextDecoder();
  const meta = JSON.parse(dec.decode(bytes.subarray(HEADER_BYTES, HEADER_BYTES + metaLen))) as Meta;
  const base = bytes.byteOffset + (version === 1 ? align4 : align8)(HEADER_BYTES + metaLen);
  const n = meta.n;
  const viewOf = ([off, width]: Block, len: number): Codes =>
    width === 1 ? new Uint8Array(bytes.buffer, base + off, len) : width === 2 ? new Uint16Array(bytes.buffer, base + off, len) : new Uint32Array(bytes.buffer, base + off, len);
  const view = (b: Block): Codes => viewOf(b, n);
  const parsed = new Map<number, readonly string[]>();
  const dict = ([off, len]: Block): readonly string[] => {
    let d = parsed.get(off);
    if (!d) parsed.set(off, (d = JSON.parse(dec.decode(new Uint8Array(bytes.buffer, base + off, len))) as string[]));
    return d;
  };
  const cols = new Map<ValueColumn, Codes>();
  for (const c of VALUE_COLUMNS) cols.set(c, view(meta.cols[c]!.codes));
  // properties: a dense column per key (versions 1, 2), else entries grouped by key; a key's column is built when asked
  const dense = Array.isArray(meta.props) ? new Map(meta.props.map((p) => [p.key, p])) : undefined;
  const propCols = new Map<string, PropColumn | undefined>();
  let index: PropIndex | undefined;
  const denseColumn = (m: DenseProps[number]): PropColumn => ({
    codes: view(m.codes),
    get dict() {
      return dict(m.dict);
    },
  });
  const props = (): PropIndex => {
    if (index) return index;
    if (dense) return (index = fromDense(n, [...dense.keys()], (key) => denseColumn(dense.get(key)!)));
    const pm = meta.props as PropsMeta;
    const valueAt = new Uint32Array(bytes.buffer, base + pm.valueAt, pm.K + 1);
    const values = (k: number): readonly string[] =>
      JSON.parse(dec.decode(new Uint8Array(bytes.buffer, base + pm.values[0] + valueAt[k]!, valueAt[k + 1]! - valueAt[k]!))) as string[];
    return (index = propIndex(dict(pm.keys), new Uint32Array(bytes.buffer, base + pm.at, pm.K + 1), viewOf(pm.rows, pm.P), viewOf(pm.vals, pm.P), false, values));
  };
  let visitCodes: Codes | undefined;
  let userCodes: Codes | undefined;
  let table: VisitTable | undefined;
  const segment: SegmentView = {
    n,
    firstSeq: meta.firstSeq,
    lastSeq: meta.lastSeq,
    dayStart: meta.dayStart,
    minT: meta.minT,
    maxT: meta.maxT,
    visitBase: meta.visitBase,
    userBase: meta.userBase,
    time: new Int32Array(bytes.buffer, base + meta.time, n),
    get visit() {
      return (visitCodes ??= meta.visit ? view(meta.visit) : perEvent(table!, table!.start, null));
    },
    get user() {
      return (userCodes ??= meta.user ? view(meta.user) : perEvent(table!, table!.start, table!.user));
    },
    column: (c) => cols.get(c)!,
    dict: (c) => dict(meta.cols[c]!.dict),
    visitDict: () => dict(meta.visits),
    userDict: () => dict(meta.users),
    props,
    prop(key) {
      if (!propCols.has(key)) {
        const m = dense?.get(key);
        propCols.set(key, dense ? m && denseColumn(m) : denseProp(props(), key, n));
      }
      return propCols.get(key);
    },
  };
  const t = meta.table;
  if (t) {
    const vcols = new Map(Object.entries(t.cols).map(([c, b]) => [c, viewOf(b, t.V)]));
    table = {
      V: t.V,
      U: t.U,
      start: new Int32Array(bytes.buffer, base + t.start, t.V + 1),
      firstT: new Int32Array(bytes.buffer, base + t.firstT, t.V),
      lastT: new Int32Array(bytes.buffer, base + t.lastT, t.V),
      userHash: new Float64Array(bytes.buffer, base + t.userHash, t.U),
      pv: viewOf(t.pv, t.V),
      entry: viewOf(t.entry, t.V),
      exit: viewOf(t.exit, t.V),
      user: viewOf(t.user, t.V),
      col: (c) => vcols.get(c)!,
    };
  }
  return { view: segment, table };
}

/** Per event of a merged day: its visit code (values null) or its visit's value. */
function perEvent(t: VisitTable, start: Int32Array, values: Codes | null): Uint32Array {
  const out = new Uint32Array(start[t.V]!);
  for (let v = 0; v < t.V; v++) out.fill(values ? values[v]! : v, start[v]!, start[v + 1]!);
  return out;
}

/** The day table of a decoded merged segment (undefined for a segment without a visit table). */
export function dayTableOf(d: DecodedSegment): DayTable | undefined {
  return d.table && { view: d.view, table: d.table };
}
