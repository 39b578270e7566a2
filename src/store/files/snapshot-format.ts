/**
 * Snapshot file layout: MAGIC, then frames (a 4-byte little-endian length and a body): the header
 * {version, lastSeq, maxRt, projects, bases?} (v8-serialized), then per project its frame ({id, monthly, realtime, days:
 * count}, v8), its ring's frame (a v8-serialized PackedRing) and one frame per live day (v8); a zero-length frame
 * ends them, followed by the SHA-256 of every frame (lengths included).
 *
 * The ring and the days are frames of their own so a reader can check the whole file first and decode them one
 * project at a time afterwards (startup holds one project's decoded data at a time, not the whole file's).
 *
 * A ring or day frame may instead be a reference (MAGIC ASNAP004): the length REF_FRAME, then REF_BYTES naming a frame
 * body in an earlier snapshot file of the same directory: that file's sequence (f64), where the body starts (f64), its
 * length and its CRC-32 (u32 each). An unchanged idle day is then a reference, not a copy: a snapshot writes what
 * changed since the last one. Every file a snapshot references is listed in its header (`bases`), so pruning keeps them.
 * MAGIC_V3 (no references) and MAGIC_V2 files (the ring inside the project frame) are still read.
 */
export const MAGIC = Buffer.from('ASNAP004');
export const MAGIC_V3 = Buffer.from('ASNAP003');
export const MAGIC_V2 = Buffer.from('ASNAP002');
export const DIGEST_BYTES = 32;
/** The length field of a reference frame: no frame body is that long (a body stays far below 2 GiB). */
export const REF_FRAME = 0xffffffff;
/** A reference's body: sequence and offset (f64 each), length and CRC-32 (u32 each). */
export const REF_BYTES = 24;

export function frameHeader(length: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(length, 0);
  return b;
}

/** A snapshot file's name for the sequence it covers. */
export function snapshotName(seq: number): string {
  return `snapshot-${String(seq).padStart(16, '0')}.bin`;
}
