/**
 * Snapshot file layout: MAGIC, then frames (a 4-byte little-endian length and a v8-serialized body): the header
 * {version, lastSeq, maxRt, projects}, then per project its frame (days: count) followed by one frame per live day;
 * a zero-length frame ends them, followed by the SHA-256 of every frame (lengths included).
 */
export const MAGIC = Buffer.from('ASNAP002');
export const DIGEST_BYTES = 32;

export function frameHeader(length: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(length, 0);
  return b;
}
