/** This file is long because the writer thread's handle, the frame reader that checks a file (here or beside a hashing thread), the references into earlier files and the pruning that keeps them share one layout. */
import { createHash, type Hash } from 'node:crypto';
import { close, closeSync, fstatSync, mkdirSync, openSync, readdirSync, readSync, rmSync, statSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { deserialize } from 'node:v8';
import { crc32 } from 'node:zlib';
import { Worker } from 'node:worker_threads';
import type { StoredDay } from '../../core/day-aggregate.ts';
import type { PackedRing } from '../../core/recent-ring.ts';
import type { DaySnapshot, Encoded, ProjectSnapshot, SnapshotData } from '../../core/snapshot.ts';
import { DIGEST_BYTES, MAGIC, MAGIC_V2, MAGIC_V3, REF_BYTES, REF_FRAME, snapshotName } from './snapshot-format.ts';

/**
 * Snapshots of the live state as files `snapshot-<seq>.bin` (layout: snapshot-format.ts), written by a worker thread
 * (snapshot-worker.mjs) to a temporary file, fsynced and renamed, so a crash leaves either the old or the new snapshot,
 * never half of one. A file that fails its checksum is skipped. Frames are read one at a time, so a state of any size
 * restores (no single buffer over 2 GiB).
 */

/**
 * At most this many buffers are transferred to the writer in one message, the largest; the rest are copied. Node checks
 * a transfer list for repeats pair by pair: 10,000 small buffers took 43 ms of the main thread to transfer here, 30,000
 * took 504 ms and 100,000 4.9 s, where copying them took 11, 39 and 103 ms. 512 transfers cost ~1 ms.
 */
export const MAX_TRANSFERS = 512;

/** Adds `b`'s buffer to `owned` when `b` is all of it (a copy the capture made, nothing else in it). */
function ownWhole(b: Uint8Array, owned: ArrayBuffer[]): void {
  if (b.byteOffset === 0 && b.byteLength === b.buffer.byteLength) owned.push(b.buffer as ArrayBuffer);
}

/** The buffers of `owned` worth transferring rather than copying: the MAX_TRANSFERS largest (no repeats). */
export function worthTransferring(owned: ArrayBuffer[]): ArrayBuffer[] {
  const unique = [...new Set(owned)];
  if (unique.length <= MAX_TRANSFERS) return unique;
  return unique.sort((a, b) => b.byteLength - a.byteLength).slice(0, MAX_TRANSFERS);
}

/** Two snapshots: the newest, and one to fall back on if the newest turns out damaged. */
const SNAPSHOTS_KEPT = 2;
const NAME = /^snapshot-(\d{16})\.bin$/;

/** The writer thread: plain JavaScript, so it starts in milliseconds without the TypeScript loader. */
const WRITER = new URL('./snapshot-worker.mjs', import.meta.url);

export class SnapshotFiles {
  private readonly dir: string;
  private worker: Worker | undefined;
  private nextId = 0;
  /** bumped whenever a new writer thread starts (it holds none of the bytes an earlier one was sent) */
  private started = 0;
  private closed = false;
  /** the file the newest lazily read state came from (loadNewest): asleep days and rings point into it */
  restoredFrom: string | undefined;
  /** the newest file read ahead by prefetchNewest, for loadNewest */
  private prefetched: { file: string; data?: SnapshotData; pending?: Promise<void>; error?: Error } | undefined;
  private readonly waiting = new Map<number, { resolve: (r: { bytes: number; places?: Float64Array }) => void; reject: (err: Error) => void }>();

  /**
   * Whether a snapshot may reference unchanged frames in earlier files of this directory (snapshot-format.ts) instead of
   * copying them: the service's own files. Files that must stand alone (the object store's) leave it off.
   */
  private readonly deltas: boolean;

  /**
   * `inspectOnly`: a tool reading while the service may run (check) must not remove the service's write in progress.
   * `deltas`: see the field.
   */
  constructor(dataDir: string, opts: { inspectOnly?: boolean; deltas?: boolean } = {}) {
    this.dir = path.join(dataDir, 'snapshots');
    this.deltas = opts.deltas === true;
    mkdirSync(this.dir, { recursive: true });
    // A process killed mid-write leaves its temporary file (up to a full snapshot) behind: nobody else writes here.
    if (!opts.inspectOnly) this.removeLeftovers();
  }

  /** Temporary files of writes that never finished. */
  removeLeftovers(): string[] {
    const gone = readdirSync(this.dir).filter((f) => f.endsWith('.tmp'));
    for (const f of gone) rmSync(path.join(this.dir, f), { force: true });
    return gone;
  }

  /**
   * Hands the captured state to the writer thread, transferring its typed arrays (they are copies made by the
   * capture, so nothing else holds them). Resolves with the file once it is durable, and where each encoded day
   * landed (`places`, four numbers a day, see snapshot-worker.mjs writeTo; `placer` turns one into a day's stored
   * bytes). `replaceAll` writes a file that stands alone and removes every other snapshot once it is durable (they may
   * hold erased data).
   */
  async write(data: SnapshotData, opts: { replaceAll?: boolean } = {}): Promise<{ file: string; bytes: number; places: Float64Array }> {
    const file = this.pathOf(data.lastSeq);
    // Typed arrays of days given as data are copies made by the capture: transfer them instead of copying again.
    // Days and rings the caller serialized are fresh too (unchanged ones come as their key alone).
    const owned: ArrayBuffer[] = [];
    const own = (b: Uint8Array) => ownWhole(b, owned);
    for (const p of data.projects) {
      // Copies made by the capture: a sleeping day's or ring's bytes (a copy of what it holds), packed columns, tables.
      const r = p.recent;
      if (r instanceof Uint8Array) own(r);
      else if ('key' in r) {
        if (r.bytes) own(r.bytes);
      } else if ('ts' in r) owned.push(r.ts.buffer as ArrayBuffer, r.ids.buffer as ArrayBuffer);
      for (const d of p.days) {
        if (d instanceof Uint8Array) own(d);
        else if ('key' in d) {
          if (d.bytes) own(d.bytes);
        } else if ('visits' in d) {
          const arrays = [d.visits.keys, d.visits.visitors, d.visits.firsts, d.visitPageviews, d.sessions?.keys, d.sessions?.values, d.users?.keys, d.users?.values];
          for (const t of arrays) if (t) owned.push(t.buffer as ArrayBuffer);
        }
      }
    }
    const transfer = worthTransferring(owned);
    const worker = this.startWorker();
    const id = this.nextId++;
    const done = new Promise<{ bytes: number; places?: Float64Array }>((resolve, reject) => this.waiting.set(id, { resolve, reject }));
    worker.ref();
    worker.postMessage({ id, data, file, source: this.restoredFrom, refs: this.deltas && opts.replaceAll !== true }, transfer);
    let written: { bytes: number; places?: Float64Array };
    try {
      written = await done;
    } finally {
      if (this.waiting.size === 0) worker.unref();
    }
    await this.prune(opts.replaceAll === true ? path.basename(file) : undefined);
    return { file, bytes: written.bytes, places: written.places ?? new Float64Array(0) };
  }

  /** The path of the snapshot file covering `seq`. */
  pathOf(seq: number): string {
    return path.join(this.dir, snapshotName(seq));
  }

  /**
   * Days' stored bytes in `file`, a snapshot this process wrote (`places` of write): a sleeping day moved onto them
   * holds no copy in memory (Snapshotter). One handle for the file, opened on the first day placed and closed once no
   * day placed on it is reachable; undefined for every day when the file is already gone (a later write pruned it).
   */
  placer(file: string): DayPlacer {
    let held: HeldFile | null | undefined;
    return (from, at, length, crc) => {
      if (held === undefined) {
        try {
          const fd = openSync(file, 'r');
          held = new HeldFile(fd, file);
          closeWhenUnreachable.register(held, fd);
        } catch {
          held = null;
        }
      }
      if (held === null) return undefined;
      // one step back only (see FileDay): the file before `from`'s is let go
      const fallback = from instanceof FileDay ? from : undefined;
      if (fallback) fallback.fallback = undefined;
      return new FileDay(from.day, from.firstSeq, from.lastSeq, at, length, held, crc, fallback);
    };
  }

  /**
   * Hands the writer thread bytes ahead of a snapshot (the snapshotter's warm-up after startup), so the next capture
   * can send them as keys. Messages are handled in order, so a later write sees them.
   */
  /** Which writer thread will take the next write (starting one if needed): a new one holds nothing yet. */
  writerGeneration(): number {
    if (!this.closed) this.startWorker();
    return this.started;
  }

  preload(items: Encoded[]): void {
    if (this.closed) return;
    const owned: ArrayBuffer[] = [];
    for (const e of items) if (e.bytes) ownWhole(e.bytes, owned);
    this.startWorker().postMessage({ preload: items }, worthTransferring(owned));
  }

  private startWorker(): Worker {
    if (this.worker) return this.worker;
    // execArgv: [] keeps the parent's --import (the TypeScript loader) out of the thread.
    const w = new Worker(WRITER, { workerData: { magic: new Uint8Array(MAGIC), refFrame: REF_FRAME, refBytes: REF_BYTES }, execArgv: [] });
    w.on('message', (m: { id: number; ok: boolean; bytes?: number; places?: Float64Array; message?: string }) => {
      const p = this.waiting.get(m.id);
      if (!p) return;
      this.waiting.delete(m.id);
      if (m.ok) p.resolve({ bytes: m.bytes ?? 0, places: m.places });
      else p.reject(new Error(m.message ?? 'snapshot write failed'));
    });
    w.on('error', (err) => {
      for (const p of this.waiting.values()) p.reject(err);
      this.waiting.clear();
      this.worker = undefined;
    });
    w.unref();
    this.worker = w;
    this.started++;
    return w;
  }

  async close(): Promise<void> {
    this.closed = true;
    const w = this.worker;
    this.worker = undefined;
    if (w) await w.terminate();
  }

  /**
   * The newest snapshot covering at most `maxSeq` (a snapshot ahead of the log cannot be trusted: the log is the
   * truth) that passes its checksum, or undefined. Skipped files are reported through `onSkip`. Its projects' rings
   * and days are read from the file when first asked for (restore right away: the file must still be there).
   */
  loadNewest(maxSeq: number, onSkip: (file: string, why: string) => void): SnapshotData | undefined {
    const early = this.prefetched;
    this.prefetched = undefined;
    for (const file of this.restorable().reverse()) {
      const full = path.join(this.dir, file);
      if (Number(NAME.exec(file)![1]) > maxSeq) {
        onSkip(full, `covers records beyond the log's last sequence ${maxSeq}`);
        continue;
      }
      try {
        if (early?.file === full && early.error) throw early.error;
        // Lazily: startup decodes one project at a time (the file is checked whole first; a read ahead whose checksum
        // is still being computed is not used: see loadNewestChecked).
        const data = early?.file === full && early.data && !early.pending ? early.data : readSnapshot(full, true);
        this.restoredFrom = full;
        return data;
      } catch (err) {
        onSkip(full, err instanceof Error ? err.message : String(err));
      }
    }
    return undefined;
  }

  /** loadNewest once the checksum of the file prefetchNewest read is known (startup). */
  async loadNewestChecked(maxSeq: number, onSkip: (file: string, why: string) => void): Promise<SnapshotData | undefined> {
    const early = this.prefetched;
    if (early?.pending) {
      try {
        await early.pending;
        this.prefetched = { file: early.file, data: early.data! };
      } catch (err) {
        this.prefetched = { file: early.file, error: err instanceof Error ? err : new Error(String(err)) };
      }
    }
    return this.loadNewest(maxSeq, onSkip);
  }

  /**
   * Reads the newest snapshot file ahead of loadNewest, which then uses what was read (or the reason it was refused)
   * if that file is still the one it picks. Startup reads it while the LMDB walk runs in its child process, before the
   * log (and so the highest usable sequence) can be opened.
   */
  prefetchNewest(): void {
    const newest = this.files().at(-1);
    if (newest === undefined) return;
    const file = path.join(this.dir, newest);
    try {
      // its checksum in a thread of its own meanwhile: loadNewestChecked waits for it before the data is used
      const { data, check } = readSnapshotHashedAside(file);
      check.catch(() => {}); // loadNewestChecked reports it
      this.prefetched = { file, data, pending: check };
    } catch (err) {
      this.prefetched = { file, error: err instanceof Error ? err : new Error(String(err)) };
    }
  }

  /**
   * Every snapshot file, oldest first, with its sequence and either its data or why it is unusable (check). A file
   * kept only because a newer one references it (`base`) is checked against its own digest and not decoded: it is no
   * restore point, and its own references may be gone (they were pruned once nothing restorable needed them).
   */
  inspect(): Array<{ file: string; seq: number; data?: SnapshotData; problem?: string; base?: true }> {
    const restorable = new Set(this.restorable());
    return this.files().map((f) => {
      const file = path.join(this.dir, f);
      const seq = Number(NAME.exec(f)![1]);
      try {
        if (restorable.has(f)) return { file, seq, data: readSnapshot(file) };
        checkWholeHere(file);
        return { file, seq, base: true as const };
      } catch (err) {
        return { file, seq, problem: err instanceof Error ? err.message : String(err), ...(restorable.has(f) ? {} : { base: true as const }) };
      }
    });
  }

  /** Sequence of the oldest snapshot kept (0 when there is none): the log must keep every record after it. */
  oldestSeq(): number {
    const first = this.restorable()[0];
    return first === undefined ? 0 : Number(NAME.exec(first)![1]);
  }

  /**
   * The files a restart may restore from, oldest first: the newest SNAPSHOTS_KEPT. An older file kept only because a
   * newer one references it is read through those references, never restored from: so it does not hold back the
   * log's retention (an idle tenant's days can stay referenced in one file for months).
   */
  private restorable(): string[] {
    return this.files().slice(-SNAPSHOTS_KEPT);
  }

  /** The newest snapshot file's path, if there is one. */
  newestFile(): string | undefined {
    const newest = this.files().at(-1);
    return newest === undefined ? undefined : path.join(this.dir, newest);
  }

  /** Size of the newest snapshot file (0: none yet); what the operator gauge shows from the start. */
  newestBytes(): number {
    const newest = this.newestFile();
    return newest === undefined ? 0 : statSync(newest).size;
  }

  files(): string[] {
    return readdirSync(this.dir).filter((f) => NAME.test(f)).sort();
  }

  /**
   * Removes the files past the newest SNAPSHOTS_KEPT and the earlier files they reference (or every other one). Off
   * the main thread: unlinking a snapshot of a few hundred MB makes the file system free its extents, and a
   * synchronous rmSync held the event loop for 60 ms (2M events) to 500 ms (a loaded disk) on every snapshot.
   */
  private async prune(only?: string): Promise<void> {
    const all = this.files();
    let drop: string[];
    if (only !== undefined) drop = all.filter((f) => f !== only);
    else {
      const newest = all.slice(-SNAPSHOTS_KEPT);
      const kept = new Set(newest);
      for (const f of newest) for (const seq of basesOf(path.join(this.dir, f))) kept.add(snapshotName(seq));
      drop = all.filter((f) => !kept.has(f));
    }
    await Promise.all(drop.map((f) => rm(path.join(this.dir, f), { force: true })));
  }
}

/** Bytes read from the file at a time while checking it (frames are mostly ~1 KB). */
const READ_CHUNK = 4 << 20;

/** Reads a file's frames in order through a buffer of READ_CHUNK bytes, knowing where each one starts. */
class FrameReader {
  private buf = Buffer.allocUnsafe(READ_CHUNK);
  private start = 0;
  private end = 0;
  /** file offset of buf[0] */
  private base = 0;

  /** the file's length: a frame length read from damaged bytes must not become a read (or a buffer) past it */
  private readonly size: number;
  /** the running SHA-256 of the bytes read since startHash, and the file offset up to which it has them */
  private hash: Hash | undefined;
  private hashed = 0;

  constructor(private readonly fd: number) {
    this.size = fstatSync(fd).size;
  }

  /** The file offset of the next byte read. */
  get position(): number {
    return this.base + this.start;
  }

  /**
   * Hashes every byte read from here on, in the reader's large chunks: hashing frame by frame crossed into native
   * code twice a frame (a 5,000-site snapshot has ~160,000 frames).
   */
  startHash(): void {
    this.hash = createHash('sha256');
    this.hashed = this.position;
  }

  /** The digest of the bytes read since startHash. */
  digest(): Buffer {
    this.feed();
    const d = this.hash!.digest();
    this.hash = undefined;
    return d;
  }

  private feed(): void {
    const upTo = this.position;
    if (this.hash === undefined || upTo <= this.hashed) return;
    this.hash.update(this.buf.subarray(this.hashed - this.base, upTo - this.base));
    this.hashed = upTo;
  }

  /** The next `n` bytes (a view valid until the next call). */
  read(n: number): Buffer {
    this.ensure(n);
    const out = this.buf.subarray(this.start, this.start + n);
    this.start += n;
    return out;
  }

  /**
   * The next four bytes as a little-endian number, and skip: passing over `n` bytes (hashed all the same). Neither
   * makes a view: a 5,000-site snapshot has ~160,000 frames whose bodies stay in the file, and two views a frame were
   * a fifth of reading it (their allocation and its garbage collection).
   */
  u32(): number {
    this.ensure(4);
    const v = this.buf.readUInt32LE(this.start);
    this.start += 4;
    return v;
  }

  skip(n: number): void {
    this.ensure(n);
    this.start += n;
  }

  private ensure(n: number): void {
    if (this.position + n > this.size) {
      throw new Error(`damaged: ${n} bytes are asked for at byte ${this.position}, but the file ends at byte ${this.size} (a damaged frame length, or a file cut short)`);
    }
    if (this.end - this.start < n) this.fill(n);
  }

  private fill(n: number): void {
    this.feed(); // bytes about to leave the buffer
    const kept = this.end - this.start;
    const size = Math.max(READ_CHUNK, n);
    const next = size > this.buf.length ? Buffer.allocUnsafe(size) : this.buf;
    this.buf.copy(next, 0, this.start, this.end);
    this.buf = next;
    this.base += this.start;
    this.start = 0;
    this.end = kept;
    while (this.end < n) {
      const r = readSync(this.fd, this.buf, this.end, this.buf.length - this.end, this.base + this.end);
      if (r === 0) throw new Error('truncated');
      this.end += r;
    }
  }
}

/**
 * A snapshot file's data, after checking its header and SHA-256 (over its frames, read in large chunks); throws on any
 * mismatch. `lazy`: each project's ring and live days stay in the file (FilePlace, FileDay: their place in a HeldFile),
 * read and decoded when first touched, so startup decodes nothing and an idle project costs a small object a day, not
 * its bytes. Otherwise everything is decoded.
 */
export function readSnapshot(file: string, lazy = false): SnapshotData {
  const { data, bases } = readFrames(file, lazy, true);
  // Lazily read bodies in the earlier files it references are checked as those files are, whole (an eager read
  // checked each body's CRC-32 as it read it).
  if (lazy) for (const base of bases) checkWholeHere(base);
  return data;
}

/**
 * readSnapshot (lazy) with the frames' SHA-256 computed by a worker thread (snapshot-hash.mjs) while this thread parses
 * them: hashing was a quarter of reading a snapshot on the main thread (63 of ~200 ms for 62 MiB), on the critical path
 * of a start. The data may be used only once `check` resolves (it rejects, naming the mismatch, for a damaged file).
 */
export function readSnapshotHashedAside(file: string): { data: SnapshotData; check: Promise<void> } {
  // The writer puts the digest last: MAGIC, frames, a zero length, the digest.
  const end = statSync(file).size - 4 - DIGEST_BYTES;
  // The earlier files it references (listed in its header: hashed in the same thread right after it) hold most of
  // its days: each is checked whole against its own digest too.
  const bases = basesOf(file).map((seq) => path.join(path.dirname(file), snapshotName(seq)));
  let digests: Array<{ expected: Buffer; from: number; to: number }>;
  try {
    digests = bases.map((b) => digestOf(b));
  } catch (err) {
    return { data: readSnapshot(file, true), check: Promise.reject(err instanceof Error ? err : new Error(String(err))) };
  }
  const hashed = end > MAGIC.length ? hashInWorker([{ file, from: MAGIC.length, to: end }, ...digests.map((d, i) => ({ file: bases[i]!, from: d.from, to: d.to }))]) : undefined;
  let parsed: ReturnType<typeof readFrames>;
  try {
    parsed = readFrames(file, true, false);
  } catch (err) {
    hashed?.catch(() => {});
    throw err;
  }
  const { data, digest } = parsed;
  if (!digest || !hashed || digest.from !== MAGIC.length || digest.to !== end || parsed.bases.some((b) => !bases.includes(b))) {
    // an older layout (checked as it was read), bytes after the digest, or a reference to a file its header does not
    // list: checked here, as readSnapshot does
    hashed?.catch(() => {});
    return { data: digest ? readSnapshot(file, true) : data, check: Promise.resolve() };
  }
  const check = hashed.then((d) => {
    if (!d[0]!.equals(digest.expected)) throw new Error('checksum mismatch');
    for (let i = 0; i < bases.length; i++) {
      if (!d[i + 1]!.equals(digests[i]!.expected)) throw new Error(`checksum mismatch in ${bases[i]}, which this snapshot references`);
    }
  });
  return { data, check };
}

const HASHER = new URL('./snapshot-hash.mjs', import.meta.url);

/** The SHA-256 of each range, in order, computed in one thread. */
function hashInWorker(ranges: Array<{ file: string; from: number; to: number }>): Promise<Buffer[]> {
  return new Promise((resolve, reject) => {
    const w = new Worker(HASHER, { workerData: { ranges }, execArgv: [] });
    w.once('message', (m: { digests?: Uint8Array[]; error?: string }) =>
      m.digests ? resolve(m.digests.map((d) => Buffer.from(d))) : reject(new Error(m.error ?? 'no digest')),
    );
    w.once('error', reject);
    w.once('exit', (code) => reject(new Error(`the thread checking the snapshot exited (code ${code}) without a digest`)));
  });
}

/**
 * The parse shared by both: frames read in order, lengths checked against the file. `hashHere`: the SHA-256 is fed as
 * the frames pass and compared; otherwise the caller gets the expected digest and the byte range it covers.
 */
function readFrames(
  file: string,
  lazy: boolean,
  hashHere: boolean,
): { data: SnapshotData; bases: string[]; digest?: { expected: Buffer; from: number; to: number } } {
  const fd = openSync(file, 'r');
  /** lazy: the days left in the file read from it, so it stays open if the parse passes (and while they sleep) */
  const held = lazy ? new HeldFile(fd, file) : undefined;
  const bases = new Bases(path.dirname(file));
  let parsed = false;
  try {
    const r = new FrameReader(fd);
    const magic = r.read(MAGIC.length);
    if (magic.equals(MAGIC_V2)) return { data: readV2(r), bases: [] };
    if (!magic.equals(MAGIC) && !magic.equals(MAGIC_V3)) throw new Error('bad header');
    const from = r.position;
    if (hashHere) r.startHash();
    const header = decode(nextFrame(r)) as Omit<SnapshotData, 'projects'> & { projects: number };
    const projects: ProjectSnapshot[] = [];
    for (let n = 0; n < header.projects; n++) {
      // Project frames are small (id, monthly counters, realtime minutes, the days' index): decoded as they pass.
      const { days: count, ...p } = decode(nextFrame(r)) as Omit<ProjectSnapshot, 'days' | 'recent'> & { days: number };
      const index = p.index;
      if (!lazy || !index || index.length !== count) {
        const recent = decode(bases.body(r)) as PackedRing;
        const days: DaySnapshot[] = [];
        for (let d = 0; d < count; d++) days.push(decode(bases.body(r)) as DaySnapshot);
        projects.push({ ...p, recent, days });
        continue;
      }
      // The ring and day frames stay in the file (or the earlier file a reference names): note where each body is; a
      // sleeping day or ring reads its bytes from there when asked for (this file is checked whole, a referenced body
      // by its CRC-32, and each is held open while any of them sleeps).
      const ring = bases.place(r, held!);
      const recent = new FilePlace<PackedRing>(ring.at, ring.length, ring.held, ring.crc);
      const days: StoredDay[] = new Array(count);
      for (let d = 0; d < count; d++) {
        const [day, firstSeq, lastSeq] = index[d]!;
        const at = bases.place(r, held!);
        days[d] = new FileDay(day, firstSeq, lastSeq, at.at, at.length, at.held, at.crc);
      }
      projects.push({ ...p, recent, days });
    }
    const to = r.position;
    const computed = hashHere ? r.digest() : undefined;
    if (r.u32() !== 0) throw new Error('more frames than the header says');
    const expected = Buffer.from(r.read(DIGEST_BYTES));
    if (computed && !computed.equals(expected)) throw new Error('checksum mismatch');
    parsed = true;
    const data = { version: header.version, lastSeq: header.lastSeq, maxRt: header.maxRt, projects };
    const referenced = bases.files();
    return computed ? { data, bases: referenced } : { data, bases: referenced, digest: { expected, from, to } };
  } finally {
    if (held && parsed) closeWhenUnreachable.register(held, fd);
    else closeSync(fd);
    bases.done(lazy && parsed);
  }
}

/** Where a ring's or day's body is: this file, or an earlier one a reference names (with the CRC-32 it must have). */
interface BodyPlace {
  at: number;
  length: number;
  held: HeldFile;
  crc?: number;
}

/**
 * The earlier snapshot files a file's references name, opened once each while it is parsed. `done(keep)`: kept open
 * while days asleep on them are reachable (a lazy parse that passed), closed otherwise.
 */
class Bases {
  private readonly open = new Map<number, HeldFile>();

  constructor(private readonly dir: string) {}

  /** The next frame's place: skipped over in this file, or the place a reference names. */
  place(r: FrameReader, self: HeldFile): BodyPlace {
    const length = frameLength(r);
    if (length === REF_FRAME) return this.referenced(r);
    const at = r.position;
    r.skip(length);
    return { at, length, held: self };
  }

  /** The next frame's body: read from this file, or from the earlier one a reference names (its CRC-32 checked). */
  body(r: FrameReader): Uint8Array {
    const length = frameLength(r);
    if (length !== REF_FRAME) return r.read(length);
    const p = this.referenced(r);
    return new FilePlace(p.at, p.length, p.held, p.crc).bytes;
  }

  /** A reference frame's body (after its length): the place it names. */
  private referenced(r: FrameReader): BodyPlace {
    const ref = r.read(REF_BYTES);
    return { at: ref.readDoubleLE(8), length: ref.readUInt32LE(16), held: this.file(ref.readDoubleLE(0)), crc: ref.readUInt32LE(20) };
  }

  private file(seq: number): HeldFile {
    let h = this.open.get(seq);
    if (h) return h;
    const name = path.join(this.dir, snapshotName(seq));
    let fd: number;
    try {
      fd = openSync(name, 'r');
    } catch (err) {
      throw new Error(`references ${name}, which cannot be read (${err instanceof Error ? err.message : String(err)})`);
    }
    h = new HeldFile(fd, name);
    this.open.set(seq, h);
    return h;
  }

  /** The paths of the files opened so far. */
  files(): string[] {
    return [...this.open.values()].map((h) => h.file);
  }

  done(keep: boolean): void {
    for (const h of this.open.values()) {
      if (keep) closeWhenUnreachable.register(h, h.fd);
      else closeSync(h.fd);
    }
    this.open.clear();
  }
}

/**
 * Where a snapshot file's digest is and the range it covers (MAGIC, the frames, a zero length, then the digest);
 * throws when its end is not shaped so.
 */
function digestOf(file: string): { expected: Buffer; from: number; to: number } {
  const fd = openSync(file, 'r');
  try {
    const size = fstatSync(fd).size;
    if (size < MAGIC.length + 4 + DIGEST_BYTES) throw new Error(`${file} is too short to be a snapshot`);
    const tail = Buffer.from(readRange(fd, size - 4 - DIGEST_BYTES, 4 + DIGEST_BYTES));
    if (tail.readUInt32LE(0) !== 0) throw new Error(`${file} does not end in a digest`);
    return { expected: tail.subarray(4), from: MAGIC.length, to: size - 4 - DIGEST_BYTES };
  } finally {
    closeSync(fd);
  }
}

/** Checks a referenced snapshot file whole against its own digest, on this thread. */
function checkWholeHere(file: string): void {
  const { expected, from, to } = digestOf(file);
  const fd = openSync(file, 'r');
  try {
    const hash = createHash('sha256');
    const buf = Buffer.allocUnsafe(Math.min(READ_CHUNK, Math.max(1, to - from)));
    for (let at = from; at < to; ) {
      const n = readSync(fd, buf, 0, Math.min(buf.length, to - at), at);
      if (n === 0) throw new Error(`${file} ends at byte ${at}`);
      hash.update(buf.subarray(0, n));
      at += n;
    }
    if (!hash.digest().equals(expected)) throw new Error(`checksum mismatch in ${file}, which this snapshot references`);
  } finally {
    closeSync(fd);
  }
}

/** The earlier files a snapshot file references (its header's `bases`); none when it cannot be read. */
function basesOf(file: string): number[] {
  let fd: number | undefined;
  try {
    fd = openSync(file, 'r');
    const head = readRange(fd, 0, MAGIC.length + 4);
    if (!Buffer.from(head.buffer, 0, MAGIC.length).equals(MAGIC)) return [];
    const length = Buffer.from(head.buffer).readUInt32LE(MAGIC.length);
    if (length > fstatSync(fd).size) return [];
    const header = deserialize(readRange(fd, MAGIC.length + 4, length)) as { bases?: number[] };
    return Array.isArray(header.bases) ? header.bases : [];
  } catch {
    return [];
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * A checked snapshot file held open while days or rings restored from it (or moved onto it, see placer) sleep: their bytes are read from it when
 * asked for (a wake, a first read, a snapshot that cannot copy them by place), so a restored state does not hold its
 * file's bytes in memory. Open, the file stays readable after a newer snapshot prunes it (its disk space is freed when
 * the last of them woke or sealed and the handle was collected). The file is never written after it is renamed into
 * place, so a change of its modification time means something else wrote it: reading then fails, naming the file.
 */
class HeldFile {
  private readonly mtimeMs: number;

  constructor(
    readonly fd: number,
    readonly file: string,
  ) {
    this.mtimeMs = fstatSync(fd).mtimeMs;
  }

  read(at: number, length: number): Uint8Array {
    if (fstatSync(this.fd).mtimeMs !== this.mtimeMs) throw new Error(`${this.file} was changed on disk after it was written or checked; restart to restore from the log`);
    return readRange(this.fd, at, length);
  }
}

/**
 * Closes a held snapshot file once nothing asleep on it is left (the handle was collected). Off the main thread
 * (libuv's pool), as prune removes files: the file is usually pruned by then, and the last close of a removed file of
 * a few hundred MB frees its extents inside the call (tens to hundreds of ms), which with days moving onto each new
 * snapshot comes once per snapshot.
 */
const closeWhenUnreachable = new FinalizationRegistry<number>((fd) => {
  close(fd, () => {}); // an error here means it was closed already
});

/**
 * A day's or ring's frame body left in the held file (see HeldFile): read and decoded when asked for. `crc`: the
 * CRC-32 the writer took of a frame this process wrote (a file read at startup was checked whole instead).
 */
class FilePlace<T> {
  constructor(
    readonly at: number,
    readonly length: number,
    private readonly held: HeldFile,
    readonly crc?: number,
  ) {}

  get file(): string {
    return this.held.file;
  }

  get bytes(): Uint8Array {
    const b = this.held.read(this.at, this.length);
    if (this.crc !== undefined && crc32(b) !== this.crc) throw new Error(`${this.held.file} changed on disk at byte ${this.at} after it was written; restart to restore from the log`);
    return b;
  }

  load(): T {
    return decode(this.bytes) as T;
  }
}

/**
 * A day asleep on a snapshot file: its name and sequences, and its place in the held file. A day moved onto a file
 * this process wrote keeps the place it was moved from when that was in a file too (`fallback`: the previous
 * snapshot, or the restored one): if the newer file changed on disk, its bytes are read from there instead, so one
 * damaged snapshot costs a failed write, not the day. Only one step back is kept, so at most two files stay open.
 */
class FileDay extends FilePlace<DaySnapshot> implements StoredDay {
  constructor(
    readonly day: string,
    readonly firstSeq: number,
    readonly lastSeq: number,
    at: number,
    length: number,
    held: HeldFile,
    crc?: number,
    public fallback?: FileDay,
  ) {
    super(at, length, held, crc);
  }

  override get bytes(): Uint8Array {
    try {
      return super.bytes;
    } catch (err) {
      if (this.fallback === undefined) throw err;
      return this.fallback.bytes;
    }
  }
}

/** Makes a day's stored bytes of a place in a file this process wrote (see SnapshotFiles.placer). */
export type DayPlacer = (from: StoredDay, at: number, length: number, crc: number) => StoredDay | undefined;

/** `length` bytes of the file at `offset`, in a buffer of their own. */
function readRange(fd: number, offset: number, length: number): Uint8Array {
  const out = new Uint8Array(length);
  for (let got = 0; got < length; ) {
    const n = readSync(fd, out, got, length - got, offset + got);
    if (n === 0) throw new Error('truncated');
    got += n;
  }
  return out;
}

/** The next frame's body (a view into the reader's buffer: valid until the next read). */
function nextFrame(r: FrameReader): Buffer {
  return r.read(frameLength(r));
}

/** The next frame's length (its body follows). */
function frameLength(r: FrameReader): number {
  const length = r.u32();
  if (length === 0) throw new Error('fewer frames than the header says');
  return length;
}

/** A frame body as its value: bytes that hold serialized bytes (a day or ring written while asleep) are unwrapped. */
function decode(body: Uint8Array): unknown {
  let v: unknown = deserialize(body);
  while (v instanceof Uint8Array) v = deserialize(v);
  return v;
}

/** A file in the layout before MAGIC (the ring inside the project frame), read whole. */
function readV2(r: FrameReader): SnapshotData {
  const hash = createHash('sha256');
  const frames: unknown[] = [];
  for (;;) {
    const head = r.read(4);
    const len = head.readUInt32LE(0);
    if (len === 0) break;
    hash.update(head);
    const body = r.read(len);
    hash.update(body);
    frames.push(deserialize(body));
  }
  if (!hash.digest().equals(r.read(DIGEST_BYTES))) throw new Error('checksum mismatch');
  const header = frames[0] as Omit<SnapshotData, 'projects'> & { projects: number };
  const projects: ProjectSnapshot[] = [];
  let i = 1;
  for (let n = 0; n < header.projects; n++) {
    const p = frames[i++] as Omit<ProjectSnapshot, 'days'> & { days: number };
    const days: DaySnapshot[] = [];
    for (let d = 0; d < p.days; d++) days.push(frames[i++] as DaySnapshot);
    // A ring the snapshotter sent as bytes (see Snapshotter.encode) is a serialized flat array (snapshot version 3).
    const recent = p.recent instanceof Uint8Array ? (deserialize(p.recent) as Array<string | number>) : p.recent;
    projects.push({ ...p, recent, days });
  }
  return { version: header.version, lastSeq: header.lastSeq, maxRt: header.maxRt, projects };
}
