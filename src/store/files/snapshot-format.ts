/**
 * Snapshot file layout: MAGIC, then frames (a 4-byte little-endian length and a body): the header
 * {version, lastSeq, maxRt, projects} (v8-serialized), then per project its frame ({id, monthly, realtime, days:
 * count}, v8), its ring's frame (a v8-serialized PackedRing) and one frame per live day (v8); a zero-length frame
 * ends them, followed by the SHA-256 of every frame (lengths included).
 *
 * The ring and the days are frames of their own so a reader can check the whole file first and decode them one
 * project at a time afterwards (startup holds one project's decoded data at a time, not the whole file's).
 * MAGIC_V2 files (the ring inside the project frame) are still read.
 */
export const MAGIC = Buffer.from('ASNAP003');
export const MAGIC_V2 = Buffer.from('ASNAP002');
export const DIGEST_BYTES = 32;

export function frameHeader(length: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(length, 0);
  return b;
}
