/**
 * A small LZ77 codec with a preset dictionary, for log entries (log format 4). Byte-oriented like LZ4's block format,
 * no entropy coding, so both directions are a few hundred nanoseconds for a typical record and run on the main thread
 * without a native call per entry (node:zlib builds and tears down a stream per synchronous call: 10–60 µs, more
 * than a whole single-event request's share of the CPU). A single-event batch is one record of ~230 bytes, too short
 * to find repeats in itself; the dictionary (typical records of this log) is what makes it small: its field values,
 * URLs and the msgpack record layout are found there.
 *
 * Stream: sequences of [token][extra literal length][literals][u16 offset][extra match length]. Token: high nibble
 * literal count, low nibble match length − 4; 15 means "more follows" as 255-runs plus a last byte. The offset
 * reaches back into the output, and past its start into the dictionary's end. The last sequence has literals only.
 * The decoder checks every length and offset against its buffers (callers check a CRC first anyway).
 */

const MIN_MATCH = 4;
/** 2^12 slots: one table copy is cheap enough to skip, a 32 KiB dictionary still hashes with few collisions. */
const HASH_LOG = 12;
const HASH_SIZE = 1 << HASH_LOG;
/** Offsets are two bytes, so a match reaches back at most this far (the dictionary must fit in it). */
export const MAX_OFFSET = 65_535;
/** Largest dictionary: half the offset range, so a record can reach all of it and the output before it. */
export const MAX_DICTIONARY = 32_768;

const hash4 = (v: number): number => (Math.imul(v, 2654435761) >>> (32 - HASH_LOG)) & (HASH_SIZE - 1);
const read32 = (b: Uint8Array, i: number): number => b[i]! | (b[i + 1]! << 8) | (b[i + 2]! << 16) | (b[i + 3]! << 24);

/** A dictionary with its hash index built once (positions of every 4-byte sequence, the last one wins). */
export class Dictionary {
  readonly index = new Int32Array(HASH_SIZE).fill(-1);
  constructor(readonly bytes: Uint8Array) {
    if (bytes.length > MAX_DICTIONARY) throw new Error(`a dictionary holds at most ${MAX_DICTIONARY} bytes`);
    for (let i = 0; i + MIN_MATCH <= bytes.length; i++) this.index[hash4(read32(bytes, i))] = i;
  }
}

const EMPTY = new Dictionary(new Uint8Array(0));

/** Per-call scratch: positions of the input's own 4-byte sequences, valid when their stamp is this call's. */
const own = new Int32Array(HASH_SIZE);
const stamp = new Uint32Array(HASH_SIZE);
let generation = 0;

function writeLength(out: Uint8Array, o: number, n: number): number {
  while (n >= 255) {
    out[o++] = 255;
    n -= 255;
  }
  out[o++] = n;
  return o;
}

/**
 * Largest output the compressor keeps between calls: an entry of 256 records is a few tens of KB, so the buffer is
 * reused instead of allocated per entry (an import otherwise left ~100 bytes of array buffers an event as garbage).
 */
const KEPT_OUTPUT_BYTES = 1 << 20;
let kept = Buffer.allocUnsafeSlow(0);

/**
 * Compresses `src` against `dict`; the result is never longer than src.length + src.length / 255 + 16. It is a view of
 * a buffer the next call writes over: copy it before compressing again.
 */
export function compress(src: Uint8Array, dict: Dictionary = EMPTY): Buffer {
  const d = dict.bytes;
  const D = d.length;
  const n = src.length;
  const bound = n + ((n / 255) | 0) + 16;
  let out = kept;
  if (bound > out.length) {
    out = Buffer.allocUnsafeSlow(bound);
    if (bound <= KEPT_OUTPUT_BYTES) kept = out;
  }
  generation = (generation + 1) >>> 0;
  if (generation === 0) {
    stamp.fill(0);
    generation = 1;
  }
  const gen = generation;
  let o = 0;
  let anchor = 0;
  let i = 0;
  while (i + MIN_MATCH <= n) {
    const v = read32(src, i);
    const h = hash4(v);
    // Two candidates: the input's own last occurrence, and the dictionary's; keep the longer match.
    let bestLen = 0;
    let bestPos = 0; // virtual position: dictionary bytes are 0..D-1, src[k] is D + k
    if (stamp[h] === gen) {
      const c = own[h]!;
      if (i - c <= MAX_OFFSET && read32(src, c) === v) {
        let len = MIN_MATCH;
        while (i + len < n && src[c + len] === src[i + len]) len++;
        bestLen = len;
        bestPos = D + c;
      }
    }
    const dc = dict.index[h]!;
    if (dc >= 0 && D - dc + i <= MAX_OFFSET && dc + MIN_MATCH <= D && read32(d, dc) === v) {
      // a match in the dictionary may run on past its end into the start of the input
      let len = MIN_MATCH;
      while (i + len < n) {
        const p = dc + len;
        const b = p < D ? d[p]! : src[p - D]!;
        if (b !== src[i + len]) break;
        len++;
      }
      if (len > bestLen) {
        bestLen = len;
        bestPos = dc;
      }
    }
    own[h] = i;
    stamp[h] = gen;
    if (bestLen === 0) {
      i++;
      continue;
    }
    // emit [token][literals][offset][match length]
    const lit = i - anchor;
    const ml = bestLen - MIN_MATCH;
    out[o++] = ((lit < 15 ? lit : 15) << 4) | (ml < 15 ? ml : 15);
    if (lit >= 15) o = writeLength(out, o, lit - 15);
    for (let k = anchor; k < i; k++) out[o++] = src[k]!;
    const offset = D + i - bestPos;
    out[o++] = offset & 0xff;
    out[o++] = offset >>> 8;
    if (ml >= 15) o = writeLength(out, o, ml - 15);
    // index a few positions inside the match so the next records find them
    const end = i + bestLen;
    for (let k = i + 1; k + MIN_MATCH <= n && k < end; k += 2) {
      const hk = hash4(read32(src, k));
      own[hk] = k;
      stamp[hk] = gen;
    }
    i = end;
    anchor = i;
  }
  const lit = n - anchor;
  out[o++] = (lit < 15 ? lit : 15) << 4;
  if (lit >= 15) o = writeLength(out, o, lit - 15);
  for (let k = anchor; k < n; k++) out[o++] = src[k]!;
  return out.subarray(0, o);
}

export class CorruptStream extends Error {}

function fail(why: string): never {
  throw new CorruptStream(why);
}

/**
 * Decompresses `src` from `start` into exactly `size` bytes (a new buffer, or the first `size` bytes of `into`, which
 * is returned whole); throws CorruptStream on anything that does not fit.
 */
export function decompress(src: Uint8Array, size: number, dict: Dictionary = EMPTY, into?: Buffer, start = 0): Buffer {
  const d = dict.bytes;
  const D = d.length;
  const out = into && into.length >= size ? into : Buffer.allocUnsafe(size);
  const end = src.length;
  let i = start;
  let o = 0;
  while (i < end) {
    const token = src[i++]!;
    let lit = token >>> 4;
    if (lit === 15) {
      let b: number;
      do {
        if (i >= end) fail('literal length runs past the end');
        b = src[i++]!;
        lit += b;
      } while (b === 255);
    }
    if (i + lit > end || o + lit > size) fail('literals run past the end');
    if (lit > 24) {
      out.set(src.subarray(i, i + lit), o);
      i += lit;
      o += lit;
    } else for (const stop = i + lit; i < stop; ) out[o++] = src[i++]!;
    if (i === end) break; // the last sequence: literals only
    if (i + 2 > end) fail('offset runs past the end');
    const offset = src[i]! | (src[i + 1]! << 8);
    i += 2;
    let len = (token & 15) + MIN_MATCH;
    if ((token & 15) === 15) {
      let b: number;
      do {
        if (i >= end) fail('match length runs past the end');
        b = src[i++]!;
        len += b;
      } while (b === 255);
    }
    if (offset === 0 || offset > o + D) fail('offset before the dictionary');
    if (o + len > size) fail('match runs past the end');
    let from = o - offset; // negative: in the dictionary, at D + from
    if (from < 0) {
      const n = -from < len ? -from : len;
      if (n > 24) out.set(d.subarray(D + from, D + from + n), o);
      else for (let k = 0; k < n; k++) out[o + k] = d[D + from + k]!;
      o += n;
      from += n;
      len -= n;
    }
    if (len > 24 && o - from >= len) {
      out.copyWithin(o, from, from + len);
      o += len;
    } else for (const stop = o + len; o < stop; ) out[o++] = out[from++]!;
  }
  if (o !== size) fail(`decoded ${o} bytes where ${size} were stored`);
  return out;
}

/** CRC-32 (IEEE, the same as zlib's) of bytes start..end, without a subarray per call. */
const CRC_TABLE = (() => {
  const t = new Int32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c;
  }
  return t;
})();

export function crc32Of(b: Uint8Array, start: number, end: number): number {
  let c = -1;
  for (let i = start; i < end; i++) c = CRC_TABLE[(c ^ b[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ -1) >>> 0;
}
