import { createHash } from 'node:crypto';
import { closeSync, openSync, readSync, statSync } from 'node:fs';
import { open as openFile, rename, rm } from 'node:fs/promises';
import { crc32 } from 'node:zlib';
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
/** @typedef {{ id: number, data: SnapshotData, file: string, source?: string, refs?: boolean }} WriteRequest */

/** snapshot-format.ts's MAGIC and reference frame, handed over by the thread's creator */
const MAGIC = Buffer.from(workerData.magic);
/** @type {number} */
const REF_FRAME = workerData.refFrame;
/** @type {number} */
const REF_BYTES = workerData.refBytes;
const SNAPSHOT_NAME = /snapshot-(\d{16})\.bin$/;

/**
 * An earlier file is referenced by the next snapshot only while at least this share of it is still referenced; below
 * it, its live frames are copied into the new file so the old one can go (the files on disk stay within about twice
 * the state).
 */
const MIN_LIVE_SHARE = 0.5;
/** At most this many earlier files referenced by one snapshot (each is one more file a restart opens). */
const MAX_BASES = 8;
/**
 * Past MAX_BASES, the frames of all but this many (those with the most bytes referenced) are copied into the new file
 * at once: copying only the smallest file each time left five files of equal size taking turns, and every snapshot
 * copied one of them again (4.8 MiB of idle days every 2 s in bench/live-ids.ts at 1M events). Merged, they make one
 * larger file, and the next snapshots reference it.
 */
const CONSOLIDATE_TO = 4;

/** A frame's header: its body's length, 4 bytes little-endian (snapshot-format.ts). */
function frameHeader(length) {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(length, 0);
  return b;
}

/** Bytes gathered before one write: big enough that a write costs little per frame, small enough to hold. */
const WRITE_BATCH_BYTES = 1 << 20;

/** Bytes read from an earlier snapshot file at a time: copied frames come in file order, so one read serves many. */
const COPY_READ_BYTES = 1 << 20;

/**
 * Every day and ring as last sent, by key (unchanged ones arrive as their key alone): not their bytes, which would be
 * a second copy of every idle project's state, but where they are in the last file written, with a CRC-32 taken as
 * they were written (a day or ring given by place, in the file the service restored, is read from there and its
 * CRC-32 taken then: that file was checked whole at startup). A frame copied
 * from a file is checked against it, so a byte that changed on disk fails the write instead of entering the next
 * file under a fresh checksum (the main thread then sends everything again). Fresh bytes are held until written.
 * @typedef {{ bytes: Uint8Array } | { file: string, at: number, length: number, crc: number }} Held
 */
/** @type {Map<string, Held>} */
let held = new Map();

/** @returns {v is Encoded} */
function isEncoded(v) {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && typeof v.key === 'string' && !('day' in v);
}

/** Reads byte ranges of earlier snapshot files, in order, through one buffer per file (see COPY_READ_BYTES). */
class CopyReader {
  /** @type {Map<string, { fd: number, buf: Buffer, from: number, to: number }>} */
  open = new Map();

  /** @param {string} file @param {number} at @param {number} length @returns {Buffer} */
  read(file, at, length) {
    let f = this.open.get(file);
    if (!f) this.open.set(file, (f = { fd: openSync(file, 'r'), buf: Buffer.alloc(0), from: 0, to: 0 }));
    if (at < f.from || at + length > f.to) {
      // a new buffer each time: frames already taken from the old one may wait in the write batch
      const size = Math.max(COPY_READ_BYTES, length);
      f.buf = Buffer.allocUnsafe(size);
      let got = 0;
      while (got < length) {
        const n = readSync(f.fd, f.buf, got, size - got, at + got);
        if (n === 0) throw new Error(`${file} ends before byte ${at + length}`);
        got += n;
      }
      f.from = at;
      f.to = at + got;
    }
    return f.buf.subarray(at - f.from, at - f.from + length);
  }

  close() {
    for (const f of this.open.values()) closeSync(f.fd);
    this.open.clear();
  }
}

/**
 * @param {Encoded} e @param {CopyReader} copies
 * @param {string | undefined} source the restored file, for an item given by place (its CRC is taken as it is read)
 * @returns {{ body: Uint8Array, crc: number }}
 */
function resolve(e, copies, source) {
  if (e.bytes) held.set(e.key, { bytes: e.bytes });
  else if (e.at !== undefined && e.length !== undefined) {
    const from = e.file ?? source;
    if (from === undefined) throw new Error(`${e.key} is given by place, but no file is named`);
    const body = copies.read(from, e.at, e.length);
    const crc = crc32(body);
    if (e.crc !== undefined && crc !== e.crc) throw new Error(`${from} changed on disk at byte ${e.at} (${e.key}): the snapshot is written again from memory`);
    return { body, crc };
  }
  const h = held.get(e.key);
  if (!h) throw new Error(`snapshot writer holds nothing for ${e.key}`);
  if ('bytes' in h) return { body: h.bytes, crc: crc32(h.bytes) };
  const body = copies.read(h.file, h.at, h.length);
  if (crc32(body) !== h.crc) throw new Error(`${h.file} changed on disk at byte ${h.at} (${e.key}): the snapshot is written again from memory`);
  return { body, crc: h.crc };
}

/**
 * @param {WriteRequest} req
 * @returns {Promise<{ bytes: number, places: Float64Array }>} the file's size, and where each day landed (see
 * writeTo)
 */
async function write({ data, file, source, refs }) {
  const tmp = `${file}.tmp`;
  try {
    return await writeTo(tmp, data, file, source, refs === true);
  } catch (err) {
    await rm(tmp, { force: true }); // a full disk must not keep half a snapshot on it
    throw err;
  }
}

/**
 * Where an item's bytes are now when they are in a file (given by place, or held from an earlier write), with its
 * length; undefined for bytes in memory.
 * @param {Encoded} e @param {string | undefined} source @returns {{ file: string, length: number } | undefined}
 */
function locate(e, source) {
  if (e.bytes) return undefined;
  if (e.at !== undefined && e.length !== undefined) {
    const file = e.file ?? source;
    return file === undefined ? undefined : { file, length: e.length };
  }
  const h = held.get(e.key);
  return h && !('bytes' in h) ? { file: h.file, length: h.length } : undefined;
}

/**
 * The place of an item whose bytes are in `file`: as held from an earlier write, as given with its CRC-32 (a
 * reference restored, a file this process wrote: not read again), or read to take its CRC-32.
 * @param {string} file @param {Encoded} e @param {CopyReader} copies @param {string | undefined} source
 * @returns {{ file: string, at: number, length: number, crc: number }}
 */
function placeIn(file, e, copies, source) {
  const h = held.get(e.key);
  if (e.at === undefined && h && !('bytes' in h)) return h;
  if (e.at !== undefined && e.length !== undefined && e.crc !== undefined) return { file, at: e.at, length: e.length, crc: e.crc };
  const { body, crc } = resolve(e, copies, source);
  return { file, at: /** @type {number} */ (e.at), length: body.length, crc };
}

/**
 * The earlier files this snapshot may reference instead of copying from: snapshot files of the same directory still
 * on disk of which at least MIN_LIVE_SHARE is referenced; past MAX_BASES of them, the CONSOLIDATE_TO with the most
 * bytes referenced.
 * @param {SnapshotData} data @param {string} file @param {string | undefined} source @returns {Map<string, number>} file -> seq
 */
function chooseBases(data, file, source) {
  /** @type {Map<string, number>} */
  const live = new Map();
  const count = (/** @type {unknown} */ v) => {
    if (!isEncoded(v)) return;
    const at = locate(v, source);
    if (at) live.set(at.file, (live.get(at.file) ?? 0) + at.length);
  };
  for (const p of data.projects) {
    count(p.recent);
    for (const d of p.days) count(d);
  }
  const dir = path.dirname(file);
  /** @type {Array<[string, number, number]>} */
  const eligible = [];
  for (const [f, bytes] of live) {
    const m = SNAPSHOT_NAME.exec(f);
    if (!m || path.dirname(f) !== dir || f === file) continue;
    let size;
    try {
      size = statSync(f).size;
    } catch {
      continue; // pruned already: its frames are copied (from the handle the service still holds, or they fail)
    }
    if (bytes >= MIN_LIVE_SHARE * size) eligible.push([f, Number(m[1]), bytes]);
  }
  // most bytes referenced first; of two alike, the newer
  eligible.sort((a, b) => b[2] - a[2] || b[1] - a[1]);
  const kept = eligible.length > MAX_BASES ? eligible.slice(0, CONSOLIDATE_TO) : eligible;
  return new Map(kept.map(([f, seq]) => [f, seq]));
}

/**
 * @param {string} tmp @param {SnapshotData} data @param {string} file @param {string | undefined} source
 * @param {boolean} refs whether unchanged frames in earlier files may be referenced (otherwise copied: a file that
 * stands alone, as after an erasure or for the object store)
 * @returns {Promise<{ bytes: number, places: Float64Array }>} `places`: four numbers per day frame,
 * in the order of the days in `data` (project by project): where its body starts, its length, its CRC-32 and the
 * sequence of the file that holds it (this one, or the earlier one it references); NaN for a day given as data rather
 * than encoded. The main thread moves sleeping days onto those places (Snapshotter).
 */
async function writeTo(tmp, data, file, source, refs) {
  /** where each day and ring lands in this file: what `held` becomes once the file is durable */
  /** @type {Map<string, Held>} */
  const next = new Map();
  let dayCount = 0;
  for (const p of data.projects) dayCount += p.days.length;
  const places = new Float64Array(dayCount * 4).fill(NaN);
  const ownSeq = Number(SNAPSHOT_NAME.exec(file)?.[1] ?? NaN);
  const bases = refs ? chooseBases(data, file, source) : new Map();
  let dayNo = 0;
  const copies = new CopyReader();
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
  const put = async (/** @type {Buffer} */ head, /** @type {Uint8Array} */ body) => {
    hash.update(head).update(body);
    pending.push(head, body);
    pendingBytes += head.length + body.length;
    bytes += head.length + body.length;
    // Small frames (a small live day is ~1 KB) go out in batches: one write per frame was 100,000 writes.
    if (pendingBytes >= WRITE_BATCH_BYTES) await flush();
  };
  /** @returns {Promise<number>} where the frame's body starts in the file */
  const frame = async (/** @type {unknown} */ value) => {
    // Bytes the main thread already serialized (cached days and rings), or copied from an earlier file, are written
    // as they are.
    const body = value instanceof Uint8Array ? value : serialize(value);
    const at = MAGIC.length + bytes + 4;
    await put(frameHeader(body.length), body);
    return at;
  };
  /** @returns {Promise<Held & { seq: number }>} */
  const encoded = async (/** @type {Encoded} */ e) => {
    const where = locate(e, source);
    const baseSeq = where ? bases.get(where.file) : undefined;
    if (where && baseSeq !== undefined) {
      // unchanged and in a file kept as a base: a reference, not a copy
      const place = placeIn(where.file, e, copies, source);
      const ref = Buffer.alloc(REF_BYTES);
      ref.writeDoubleLE(baseSeq, 0);
      ref.writeDoubleLE(place.at, 8);
      ref.writeUInt32LE(place.length, 16);
      ref.writeUInt32LE(place.crc, 20);
      await put(frameHeader(REF_FRAME), ref);
      next.set(e.key, place);
      return { ...place, seq: baseSeq };
    }
    const { body, crc } = resolve(e, copies, source);
    const place = { file, at: await frame(body), length: body.length, crc };
    next.set(e.key, place);
    return { ...place, seq: ownSeq };
  };
  try {
    await fh.write(MAGIC);
    await frame({ version: data.version, lastSeq: data.lastSeq, maxRt: data.maxRt, projects: data.projects.length, bases: [...bases.values()] });
    for (const p of data.projects) {
      const { days, recent, ...rest } = p;
      await frame({ ...rest, days: days.length });
      if (isEncoded(recent)) await encoded(recent);
      else await frame(recent);
      for (const d of days) {
        if (isEncoded(d)) {
          const { at, length, crc, seq } = await encoded(d);
          places.set([at, length, crc, seq], dayNo * 4);
        } else await frame(d);
        dayNo++;
      }
    }
    await flush();
    await fh.write(frameHeader(0));
    await fh.write(hash.digest());
    await fh.sync();
  } finally {
    copies.close();
    await fh.close();
  }
  await rename(tmp, file);
  // Only now: a failed write leaves `held` pointing at the files that still hold those bytes. Keys not seen were
  // sealed or are gone since.
  held = next;
  // The rename is durable once the directory is synced (here too: an fsync can take a while on a busy disk).
  const dir = await openFile(path.dirname(file), 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
  return { bytes, places };
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
    // bytes ahead of a snapshot (the snapshotter's warm-up after startup)
    for (const e of req.preload) if (e.bytes) held.set(e.key, { bytes: e.bytes });
    return;
  }
  write(req).then(
    ({ bytes, places }) => parentPort.postMessage({ id: req.id, ok: true, bytes, places }, [places.buffer]),
    (err) => parentPort.postMessage({ id: req.id, ok: false, message: err instanceof Error ? err.message : String(err) }),
  );
});
