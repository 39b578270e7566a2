import { createHash } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readdirSync, readSync, rmSync } from 'node:fs';
import path from 'node:path';
import { deserialize } from 'node:v8';
import { Worker } from 'node:worker_threads';
import type { DaySnapshot, Encoded, ProjectSnapshot, SnapshotData } from '../core/snapshot.ts';
import { DIGEST_BYTES, MAGIC } from './snapshot-format.ts';

/**
 * Snapshots of the live state as files `snapshot-<seq>.bin` (layout: snapshot-format.ts), written by a worker thread
 * (snapshot-worker.ts) to a temporary file, fsynced and renamed, so a crash leaves either the old or the new snapshot,
 * never half of one. A file that fails its checksum is skipped. Frames are read one at a time, so a state of any size
 * restores (no single buffer over 2 GiB).
 */

/** Two snapshots: the newest, and one to fall back on if the newest turns out damaged. */
const SNAPSHOTS_KEPT = 2;
const NAME = /^snapshot-(\d{16})\.bin$/;

export class SnapshotFiles {
  private readonly dir: string;
  private worker: Worker | undefined;
  private nextId = 0;
  /** bumped whenever a new writer thread starts (it holds none of the bytes an earlier one was sent) */
  private started = 0;
  private closed = false;
  private readonly waiting = new Map<number, { resolve: (bytes: number) => void; reject: (err: Error) => void }>();

  /** `inspectOnly`: a tool reading while the service may run (check) must not remove the service's write in progress. */
  constructor(dataDir: string, opts: { inspectOnly?: boolean } = {}) {
    this.dir = path.join(dataDir, 'snapshots');
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
   * capture, so nothing else holds them). Resolves with the file once it is durable. `replaceAll` removes every
   * other snapshot once this one is durable (they may hold erased data).
   */
  async write(data: SnapshotData, opts: { replaceAll?: boolean } = {}): Promise<{ file: string; bytes: number }> {
    const file = path.join(this.dir, `snapshot-${String(data.lastSeq).padStart(16, '0')}.bin`);
    // Typed arrays of days given as data are copies made by the capture: transfer them instead of copying again.
    // Days and rings the caller serialized are fresh too (unchanged ones come as their key alone).
    const transfer: ArrayBuffer[] = [];
    const own = (b: Uint8Array) => {
      if (b.byteOffset === 0 && b.byteLength === b.buffer.byteLength) transfer.push(b.buffer as ArrayBuffer);
    };
    for (const p of data.projects) {
      if ('key' in p.recent && p.recent.bytes) own(p.recent.bytes);
      for (const d of p.days) {
        if ('key' in d) {
          if (d.bytes) own(d.bytes);
          continue;
        }
        transfer.push(d.sessions.keys.buffer as ArrayBuffer, d.sessions.values.buffer as ArrayBuffer, d.users.keys.buffer as ArrayBuffer);
      }
    }
    const worker = this.startWorker();
    const id = this.nextId++;
    const done = new Promise<number>((resolve, reject) => this.waiting.set(id, { resolve, reject }));
    worker.ref();
    worker.postMessage({ id, data, file }, transfer);
    let bytes: number;
    try {
      bytes = await done;
    } finally {
      if (this.waiting.size === 0) worker.unref();
    }
    this.prune(opts.replaceAll === true ? path.basename(file) : undefined);
    return { file, bytes };
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
    const transfer: ArrayBuffer[] = [];
    for (const e of items) if (e.bytes && e.bytes.byteOffset === 0 && e.bytes.byteLength === e.bytes.buffer.byteLength) transfer.push(e.bytes.buffer as ArrayBuffer);
    this.startWorker().postMessage({ preload: items }, transfer);
  }

  private startWorker(): Worker {
    if (this.worker) return this.worker;
    // The worker is TypeScript like the rest: it registers the loader the service runs under (tsx) first. Node 20
    // does not pass --import hooks on to workers, so a two-line bootstrap does it.
    const loader = import.meta.resolve('tsx/esm/api');
    const entry = new URL('./snapshot-worker.ts', import.meta.url).href;
    const boot = `import(${JSON.stringify(loader)}).then((m) => { m.register(); return import(${JSON.stringify(entry)}); });`;
    const w = new Worker(boot, { eval: true });
    w.on('message', (m: { id: number; ok: boolean; bytes?: number; message?: string }) => {
      const p = this.waiting.get(m.id);
      if (!p) return;
      this.waiting.delete(m.id);
      if (m.ok) p.resolve(m.bytes ?? 0);
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
   * truth) that passes its checksum, or undefined. Skipped files are reported through `onSkip`.
   */
  loadNewest(maxSeq: number, onSkip: (file: string, why: string) => void): SnapshotData | undefined {
    for (const file of this.files().reverse()) {
      const full = path.join(this.dir, file);
      if (Number(NAME.exec(file)![1]) > maxSeq) {
        onSkip(full, `covers records beyond the log's last sequence ${maxSeq}`);
        continue;
      }
      try {
        return readSnapshot(full);
      } catch (err) {
        onSkip(full, err instanceof Error ? err.message : String(err));
      }
    }
    return undefined;
  }

  /** Every snapshot file, oldest first, with its sequence and either its data or why it is unusable (check). */
  inspect(): Array<{ file: string; seq: number; data?: SnapshotData; problem?: string }> {
    return this.files().map((f) => {
      const file = path.join(this.dir, f);
      const seq = Number(NAME.exec(f)![1]);
      try {
        return { file, seq, data: readSnapshot(file) };
      } catch (err) {
        return { file, seq, problem: err instanceof Error ? err.message : String(err) };
      }
    });
  }

  /** Sequence of the oldest snapshot kept (0 when there is none): the log must keep every record after it. */
  oldestSeq(): number {
    const first = this.files()[0];
    return first === undefined ? 0 : Number(NAME.exec(first)![1]);
  }

  files(): string[] {
    return readdirSync(this.dir).filter((f) => NAME.test(f)).sort();
  }

  private prune(only?: string): void {
    const all = this.files();
    const drop = only !== undefined ? all.filter((f) => f !== only) : all.slice(0, Math.max(0, all.length - SNAPSHOTS_KEPT));
    for (const f of drop) rmSync(path.join(this.dir, f), { force: true });
  }
}

/** A snapshot file's data, after checking its header and SHA-256 frame by frame; throws on any mismatch. */
export function readSnapshot(file: string): SnapshotData {
  const fd = openSync(file, 'r');
  try {
    let pos = 0;
    const read = (n: number): Buffer => {
      const b = Buffer.allocUnsafe(n);
      let got = 0;
      while (got < n) {
        const r = readSync(fd, b, got, n - got, pos);
        if (r === 0) throw new Error('truncated');
        got += r;
        pos += r;
      }
      return b;
    };
    if (!read(MAGIC.length).equals(MAGIC)) throw new Error('bad header');
    const hash = createHash('sha256');
    const frames: unknown[] = [];
    for (;;) {
      const head = read(4);
      const len = head.readUInt32LE(0);
      if (len === 0) break;
      const body = read(len);
      hash.update(head).update(body);
      frames.push(deserialize(body));
    }
    if (!hash.digest().equals(read(DIGEST_BYTES))) throw new Error('checksum mismatch');
    const header = frames[0] as Omit<SnapshotData, 'projects'> & { projects: number };
    const projects: ProjectSnapshot[] = [];
    let i = 1;
    for (let n = 0; n < header.projects; n++) {
      const p = frames[i++] as Omit<ProjectSnapshot, 'days'> & { days: number };
      const days: DaySnapshot[] = [];
      for (let d = 0; d < p.days; d++) days.push(frames[i++] as DaySnapshot);
      // A ring the snapshotter sent as bytes (see Snapshotter.encodeRing) is a serialized packed array.
      const recent = p.recent instanceof Uint8Array ? (deserialize(p.recent) as Array<string | number>) : p.recent;
      projects.push({ ...p, recent, days });
    }
    return { version: header.version, lastSeq: header.lastSeq, maxRt: header.maxRt, projects };
  } finally {
    closeSync(fd);
  }
}
