import { crc32 } from 'node:zlib';
import { compress, crc32Of, type Dictionary } from './dict-lz.ts';

/**
 * The log's on-disk format: one LMDB entry per appended batch, keyed by the batch's first sequence. The first byte
 * is the entry's kind, which is also its format version, so entries of every format can follow each other in one log:
 *   kind 4 (format 4, written now): [u8 4][u32 count][u32 crc32 of the rest][varint dictionary id][varint raw length]
 *     [the msgpack array of the records, compressed by dict-lz against the log dictionary with that id (0: none)]
 *     (varint: 7 bits a byte, low first, high bit set on all but the last)
 *   kind 2 (format 2, read): [u8 2][u32 count][u32 crc32 of payload][payload: msgpack array of the records]
 *   kind 3 (tombstone): [u8 3][u32 count][u32 crc32 of the empty payload]
 * Format 2 entries were stored through the msgpack encoder (a msgpack bin around those bytes); format 4 entries and
 * tombstones written now are stored as they are, read through a binary handle on the same database. Below the
 * recorded 'logFormat2From' sequence, entries may be plain msgpack records of the first format (one record each, no
 * checksum).
 * The count makes the sequence continuous (an entry must start where the previous one ended), the checksum (over the
 * bytes as stored, so damage is caught before anything is decompressed) catches changed bytes. A tombstone keeps the
 * count and drops the records: erasing a deleted project's events replaces each of its entries (one request = one
 * project = one entry) with a tombstone of the same count, so continuity and checksums still hold; readers see its
 * sequences as ERASED markers.
 */

/** Meta entry: the first sequence of the log written in format 2 or later (entries below may be first-format records). */
export const FORMAT2_FROM_KEY = 'logFormat2From';
export const KIND_RECORDS = 2;
export const KIND_TOMBSTONE = 3;
export const KIND_PACKED = 4;
const HEADER_BYTES = 9;
/** Longest varint header tail of a kind 4 entry: two varints of up to 5 bytes. */
const MAX_VARINTS = 10;
/** A decompressed entry larger than this is damage, not data (a batch is at most a few MB of records). */
const MAX_RAW_ENTRY = 256 * 2 ** 20;

/** The log cannot be trusted from `seq` on. */
export class LogDamage extends Error {
  constructor(
    readonly seq: number,
    readonly reason: string,
  ) {
    super(`the event log is damaged at sequence ${seq}: ${reason}`);
  }
}

export function tombstone(count: number): Buffer {
  const out = Buffer.alloc(HEADER_BYTES);
  out[0] = KIND_TOMBSTONE;
  out.writeUInt32BE(count, 1);
  out.writeUInt32BE(crc32(out.subarray(HEADER_BYTES)), 5);
  return out;
}

/** A format 2 entry (kept for tests that write a log in format 2). */
export function encodeFormat2(payload: Buffer, count: number): Buffer {
  const out = Buffer.allocUnsafe(HEADER_BYTES + payload.length);
  out[0] = KIND_RECORDS;
  out.writeUInt32BE(count, 1);
  out.writeUInt32BE(crc32(payload), 5);
  payload.copy(out, HEADER_BYTES);
  return out;
}

function writeVarint(out: Buffer, o: number, v: number): number {
  while (v >= 0x80) {
    out[o++] = (v & 0x7f) | 0x80;
    v >>>= 7;
  }
  out[o++] = v;
  return o;
}

export function encodePacked(raw: Uint8Array, count: number, dictId: number, dict: Dictionary | undefined): Buffer {
  const packed = compress(raw, dict);
  const out = Buffer.allocUnsafe(HEADER_BYTES + MAX_VARINTS + packed.length);
  out[0] = KIND_PACKED;
  out.writeUInt32BE(count, 1);
  let o = writeVarint(out, HEADER_BYTES, dictId);
  o = writeVarint(out, o, raw.length);
  o += packed.copy(out, o);
  out.writeUInt32BE(crc32(out.subarray(HEADER_BYTES, o)), 5);
  return out.subarray(0, o);
}

/**
 * The entry bytes of a stored value read through the binary handle: as they are for entries stored raw (kinds 2–4),
 * without msgpack's bin header for format 2 entries stored through the encoder, undefined for a first-format record.
 */
export function unwrap(raw: Buffer): Buffer | undefined {
  const k = raw[0];
  if (k === KIND_RECORDS || k === KIND_TOMBSTONE || k === KIND_PACKED) return raw;
  if (k === 0xc4 && raw.length >= 2) return raw.subarray(2, 2 + raw[1]!);
  if (k === 0xc5 && raw.length >= 3) return raw.subarray(3, 3 + raw.readUInt16BE(1));
  if (k === 0xc6 && raw.length >= 5) return raw.subarray(5, 5 + raw.readUInt32BE(1));
  return undefined;
}

/** How many sequences a stored value covers (a record of a log written before format 2 covers one). */
export function entryCount(raw: Buffer): number {
  const e = unwrap(raw);
  return e && e.length >= HEADER_BYTES ? e.readUInt32BE(1) : 1;
}

export interface CheckedEntry {
  count: number;
  kind: number;
  /** the entry's bytes; its payload starts at `at` (kind 2: the msgpack array; kind 4: the compressed bytes) */
  bytes: Buffer;
  at: number;
  dictId: number;
  rawLength: number;
}

/** Verifies an entry's header and checksum (LogDamage at `seq` if it fails) and says where its payload is. */
export function checkEntry(e: Buffer | undefined, seq: number): CheckedEntry {
  if (!e || e.length < HEADER_BYTES) throw new LogDamage(seq, 'entry is not a log entry (no header)');
  const kind = e[0]!;
  if (kind !== KIND_RECORDS && kind !== KIND_TOMBSTONE && kind !== KIND_PACKED) throw new LogDamage(seq, `entry has an unknown kind ${kind}`);
  const count = e.readUInt32BE(1);
  if (count === 0) throw new LogDamage(seq, 'entry claims no records');
  // in JS for entries of a record or two (no buffer view per call), natively for larger ones
  const sum = e.length < 512 ? crc32Of(e, HEADER_BYTES, e.length) : crc32(e.subarray(HEADER_BYTES));
  if (sum !== e.readUInt32BE(5)) throw new LogDamage(seq, 'checksum mismatch');
  const entry: CheckedEntry = { count, kind, bytes: e, at: HEADER_BYTES, dictId: 0, rawLength: e.length - HEADER_BYTES };
  if (kind !== KIND_PACKED) return entry;
  // the entry is the varints' reader: `at` moves past each one, so the payload starts where the second ended
  entry.dictId = readVarint(entry, seq);
  entry.rawLength = readVarint(entry, seq);
  if (entry.rawLength > MAX_RAW_ENTRY) throw new LogDamage(seq, `entry claims ${entry.rawLength} bytes of records`);
  return entry;
}

/** Reads the varint at `entry.at` and moves `at` past it (the result object is the cursor: no allocation per read). */
function readVarint(entry: CheckedEntry, seq: number): number {
  const e = entry.bytes;
  let at = entry.at;
  let v = 0;
  for (let shift = 0; shift < 35 && at < e.length; shift += 7) {
    const b = e[at++]!;
    v += (b & 0x7f) * 2 ** shift;
    if (b < 0x80) {
      entry.at = at;
      return v;
    }
  }
  throw new LogDamage(seq, 'entry header does not end');
}
