import { createHash } from 'node:crypto';
import { open as openFile, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { serialize } from 'node:v8';
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';

// Plain JavaScript so the thread starts without the TypeScript loader (Node 20 does not pass --import hooks on to
// workers, and registering tsx in the thread cost ~0.3 s of CPU and a loader thread of its own). The file layout's
// magic comes from snapshot-format.ts through workerData; the types are in snapshot-files.ts.

/**
 * Serializes, hashes and writes a snapshot off the main thread. The main thread only captures the live state (typed
 * arrays are copies it transfers, not clones) and posts it here, so the event loop never waits on v8.serialize,
 * SHA-256 or the disk. Each project and each live day is its own frame, so no buffer nears 2 GiB whatever the size.
 */

/** @typedef {import('../../core/snapshot.ts').Encoded} Encoded */
/** @typedef {import('../../core/snapshot.ts').SnapshotData} SnapshotData */
/** @typedef {{ id: number, data: SnapshotData, file: string }} WriteRequest */

/** snapshot-format.ts's MAGIC, handed over by the thread's creator */
const MAGIC = Buffer.from(workerData.magic);

/** A frame's header: its body's length, 4 bytes little-endian (snapshot-format.ts). */
function frameHeader(length) {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(length, 0);
  return b;
}

/** Bytes gathered before one write: big enough that a write costs little per frame, small enough to hold. */
const WRITE_BATCH_BYTES = 1 << 20;

/** The bytes of every day and ring as last sent, by key: unchanged ones arrive as their key alone. */
/** @type {Map<string, Uint8Array>} */
const held = new Map();

/** @returns {v is Encoded} */
function isEncoded(v) {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && typeof v.key === 'string' && !('day' in v);
}

/** @param {Encoded} e @param {Set<string>} seen @returns {Uint8Array} */
function resolve(e, seen) {
  seen.add(e.key);
  if (e.bytes) held.set(e.key, e.bytes);
  const bytes = held.get(e.key);
  if (!bytes) throw new Error(`snapshot writer holds nothing for ${e.key}`);
  return bytes;
}

/** @param {WriteRequest} req @returns {Promise<number>} */
async function write({ data, file }) {
  const tmp = `${file}.tmp`;
  try {
    return await writeTo(tmp, data, file);
  } catch (err) {
    await rm(tmp, { force: true }); // a full disk must not keep half a snapshot on it
    throw err;
  }
}

/** @param {string} tmp @param {SnapshotData} data @param {string} file @returns {Promise<number>} */
async function writeTo(tmp, data, file) {
  const seen = new Set();
  const fh = await openFile(tmp, 'w', 0o600);
  const hash = createHash('sha256');
  let bytes = 0;
  /** @type {Uint8Array[]} */
  let pending = [];
  let pendingBytes = 0;
  const flush = async () => {
    if (pending.length === 0) return;
    const out = Buffer.concat(pending, pendingBytes);
    pending = [];
    pendingBytes = 0;
    for (let done = 0; done < out.length; ) done += (await fh.write(out, done, out.length - done)).bytesWritten;
  };
  const frame = async (/** @type {unknown} */ value) => {
    // Bytes the main thread already serialized (cached days and rings) are written as they are.
    const body = value instanceof Uint8Array ? value : serialize(value);
    const head = frameHeader(body.length);
    hash.update(head).update(body);
    pending.push(head, body);
    pendingBytes += head.length + body.length;
    bytes += head.length + body.length;
    // Small frames (a small live day is ~1 KB) go out in batches: one write per frame was 100,000 writes.
    if (pendingBytes >= WRITE_BATCH_BYTES) await flush();
  };
  try {
    await fh.write(MAGIC);
    await frame({ version: data.version, lastSeq: data.lastSeq, maxRt: data.maxRt, projects: data.projects.length });
    for (const p of data.projects) {
      const { days, recent, ...rest } = p;
      await frame({ ...rest, days: days.length });
      await frame(isEncoded(recent) ? resolve(recent, seen) : recent);
      for (const d of days) await frame(isEncoded(d) ? resolve(d, seen) : d);
    }
    await flush();
    await fh.write(frameHeader(0));
    await fh.write(hash.digest());
    await fh.sync();
  } finally {
    await fh.close();
  }
  for (const key of held.keys()) if (!seen.has(key)) held.delete(key); // sealed or gone since
  await rename(tmp, file);
  // The rename is durable once the directory is synced (here too: an fsync can take a while on a busy disk).
  const dir = await openFile(path.dirname(file), 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
  return bytes;
}

/**
 * Lowest CPU priority for this thread only (on Linux, setpriority of "process 0" is the calling thread): on a small
 * machine the snapshot writer must not take a core from the event loop or LMDB's writer while requests wait.
 */
const BACKGROUND_NICE = 19;
try {
  setPriority(BACKGROUND_NICE);
} catch {
  // not permitted here: the snapshot still gets written, at normal priority
}

parentPort.on('message', (/** @type {WriteRequest | { preload: Encoded[] }} */ req) => {
  if ('preload' in req) {
    for (const e of req.preload) if (e.bytes) held.set(e.key, e.bytes);
    return;
  }
  write(req).then(
    (bytes) => parentPort.postMessage({ id: req.id, ok: true, bytes }),
    (err) => parentPort.postMessage({ id: req.id, ok: false, message: err instanceof Error ? err.message : String(err) }),
  );
});
