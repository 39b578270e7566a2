import { createReadStream, createWriteStream, existsSync, mkdirSync, openSync, closeSync, readdirSync, readSync, fstatSync, renameSync, rmSync, appendFileSync, fsyncSync } from 'node:fs';
import path from 'node:path';
import { Readable, Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { Objm, type ObjectStore } from '@nats-io/obj';
import type { NatsConnection } from '@nats-io/transport-node';
import type { SnapshotData } from '../../core/snapshot.ts';
import type { SnapshotStore } from '../seams.ts';
import { readSnapshot, SnapshotFiles } from '../files/snapshot-files.ts';

/**
 * Partition snapshots in the JetStream object store `analytics_snapshots_v1` (CLUSTER.md §5), named
 * `p<nn>/<seq, 16 digits>` by the stream sequence they cover. The body is the snapshot file of single-node mode
 * (snapshot-format.ts: magic, v8 frames, SHA-256), written by the same worker thread (snapshot-worker.mjs, through
 * SnapshotFiles: serialization, hashing and the disk stay off the main thread), followed by a trailer naming the
 * last folded message's batch id: `[batch id, UTF-8][u16 LE length]["ABID"]`. The file reader stops after the
 * digest, so the trailer is invisible to it.
 *
 * The written file stays on local disk as a cache (`<cacheDir>/<bucket>/p<nn>/snapshots/`, the 2 newest per
 * partition, SnapshotFiles' own pruning): loading takes the local copy of a sequence when there is one and downloads
 * otherwise (into the same cache). The 2 newest objects per partition are kept, older ones deleted after each write.
 */

/** Two per partition: the newest, and one to fall back on if the newest turns out damaged. */
const SNAPSHOTS_KEPT = 2;
const TRAILER_MAGIC = Buffer.from('ABID');
/** A batch id is `e:` + 43 base64url characters or `r:` + 22: anything longer is not ours. */
const MAX_BATCH_ID_BYTES = 1024;
const SEQ_DIGITS = 16;
const OBJECT_NAME = /^p(\d{2})\/(\d{16})$/;
/**
 * One object-store request of a partition's start (listing, object info, first chunk) gives up after this long,
 * then is asked again: answered in ms normally, while the client's default 5 s, waited on in a stream leader
 * failover, kept a partition's reads refused past the 10 s goal (like event-log.ts' LAST_SEQ_TIMEOUT_MS).
 */
export const LOAD_REQUEST_TIMEOUT_MS = 1_000;
/** Pause between two attempts of such a request. */
const LOAD_RETRY_MS = 250;
/**
 * With a usable local copy, the object store gets this long to name a newer snapshot; past it the local copy is
 * taken (correct either way: the follower replays whatever the copy lacks, and the resume check still applies).
 */
export const LOCAL_FALLBACK_MS = 2_000;
/**
 * Without a local copy, loading keeps asking the object store this long (a leader failover lasts 4–7 s, CLUSTER.md
 * §10), then gives up: the caller replays the partition from the stream.
 */
export const LOAD_DEADLINE_MS = 20_000;
/** A download that delivers no chunk for this long has stalled (a chunk is 128 KiB, served in ms): asked again. */
const DOWNLOAD_STALL_MS = 2_000;

export function snapshotObjectName(partition: number, seq: number): string {
  return `p${String(partition).padStart(2, '0')}/${String(seq).padStart(SEQ_DIGITS, '0')}`;
}

function trailer(batchId: string): Buffer {
  const id = Buffer.from(batchId, 'utf8');
  if (id.length > MAX_BATCH_ID_BYTES) throw new Error(`batch id too long (${id.length} bytes)`);
  const len = Buffer.alloc(2);
  len.writeUInt16LE(id.length, 0);
  return Buffer.concat([id, len, TRAILER_MAGIC]);
}

/** The batch id at the end of a snapshot file, or undefined (none written, or the trailer is cut). */
export function readTrailer(file: string): string | undefined {
  const fd = openSync(file, 'r');
  try {
    const size = fstatSync(fd).size;
    const tail = Buffer.alloc(Math.min(size, MAX_BATCH_ID_BYTES + 6));
    readSync(fd, tail, 0, tail.length, size - tail.length);
    if (tail.length < 6 || !tail.subarray(tail.length - 4).equals(TRAILER_MAGIC)) return undefined;
    const len = tail.readUInt16LE(tail.length - 6);
    if (len > tail.length - 6) return undefined;
    return tail.subarray(tail.length - 6 - len, tail.length - 6).toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/** Worth asking again: a timeout, no responders (no stream leader yet), a stalled download. */
function isTransient(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err.name === 'TimeoutError' || err.name === 'JetStreamNotEnabled' || err.name === 'NoResponders') return true;
  return /timeout|timed out|temporarily unavailable|no responders|not enabled|stalled|disconnect|reconnect/i.test(err.message);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

function localName(seq: number): string {
  return `snapshot-${String(seq).padStart(SEQ_DIGITS, '0')}.bin`;
}

export interface ObjectSnapshotStoreOptions {
  log?: (line: string) => void;
}

export class ObjectSnapshotStore implements SnapshotStore {
  private readonly files = new Map<number, SnapshotFiles>();
  private readonly root: string;
  /**
   * Per partition, the erase floor (src/store/nats/erasures.ts): snapshots below it may hold an erased project, so
   * they are never loaded or stored again, and are removed from the local cache (and, by prune, the object store).
   */
  private readonly floors = new Map<number, number>();

  private constructor(
    readonly os: ObjectStore,
    /** the same bucket with LOAD_REQUEST_TIMEOUT_MS on every request: loading only (writes keep the default) */
    private readonly quickOs: ObjectStore,
    /** JetStream API with LOAD_REQUEST_TIMEOUT_MS: the listing */
    private readonly quickJsm: JetStreamManager,
    private readonly bucket: string,
    cacheDir: string,
    private readonly log: (line: string) => void,
  ) {
    // per bucket: a cache never mixes snapshots of two clusters (or two tests)
    this.root = path.join(cacheDir, bucket);
  }

  /** `bucket`: ResourceNames.snapshots (ensureResources created it); `cacheDir`: the node's data directory or below. */
  static async open(nc: NatsConnection, bucket: string, cacheDir: string, opts: ObjectSnapshotStoreOptions = {}): Promise<ObjectSnapshotStore> {
    const os = await new Objm(nc).open(bucket);
    const quickOs = await new Objm(jetstream(nc, { timeout: LOAD_REQUEST_TIMEOUT_MS, checkAPI: false })).open(bucket, false);
    const quickJsm = await jetstreamManager(nc, { timeout: LOAD_REQUEST_TIMEOUT_MS, checkAPI: false });
    return new ObjectSnapshotStore(os, quickOs, quickJsm, bucket, cacheDir, opts.log ?? (() => {}));
  }

  /**
   * The partition's local snapshot files and their writer thread (one per partition: the writer keeps the bytes of
   * unchanged days it was sent before, by key, so a partition's snapshotter must always talk to the same one).
   */
  local(partition: number): SnapshotFiles {
    let f = this.files.get(partition);
    if (!f) {
      f = new SnapshotFiles(path.join(this.root, `p${String(partition).padStart(2, '0')}`));
      this.files.set(partition, f);
    }
    return f;
  }

  private localFile(partition: number, seq: number): string {
    return path.join(this.root, `p${String(partition).padStart(2, '0')}`, 'snapshots', localName(seq));
  }

  /** Raises partition n's erase floor: local snapshot files below it are removed now (objects: see removeObjectsBelow). */
  setFloor(partition: number, seq: number): void {
    if (seq <= (this.floors.get(partition) ?? 0)) return;
    this.floors.set(partition, seq);
    this.removeLocalBelow(partition, seq);
  }

  private removeLocalBelow(partition: number, seq: number): number {
    const dir = path.join(this.root, `p${String(partition).padStart(2, '0')}`, 'snapshots');
    if (!existsSync(dir)) return 0;
    let n = 0;
    for (const f of readdirSync(dir)) {
      const m = /^snapshot-(\d{16})\.bin(\.tmp)?$/.exec(f);
      if (m && Number(m[1]) < seq) {
        rmSync(path.join(dir, f), { force: true });
        n++;
      }
    }
    return n;
  }

  /** Deletes the partition's snapshot objects below `seq` (an erasure); returns how many. */
  async removeObjectsBelow(partition: number, seq: number): Promise<number> {
    let n = 0;
    for (const s of await this.objectSeqs(partition)) {
      if (s >= seq) continue;
      try {
        await this.os.delete(snapshotObjectName(partition, s));
        n++;
      } catch (err) {
        if (!/not found/i.test(err instanceof Error ? err.message : String(err))) throw err; // pruned meanwhile
      }
    }
    return n;
  }

  async write(partition: number, data: SnapshotData, lastBatchId?: string): Promise<{ bytes: number }> {
    const files = this.local(partition);
    const { file, bytes } = await files.write(data);
    if (data.lastSeq < (this.floors.get(partition) ?? 0)) {
      // folded before an erase marker (written while the marker was on its way): it may hold the erased project
      rmSync(file, { force: true });
      this.log(`snapshot ${snapshotObjectName(partition, data.lastSeq)} not stored: below the partition's erase floor`);
      return { bytes: 0 };
    }
    if (lastBatchId !== undefined) {
      appendFileSync(file, trailer(lastBatchId));
      const fd = openSync(file, 'r+');
      try {
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    }
    const name = snapshotObjectName(partition, data.lastSeq);
    await this.os.put({ name, description: `partition ${partition} state as of stream sequence ${data.lastSeq}` }, Readable.toWeb(createReadStream(file)) as ReadableStream<Uint8Array>);
    if (data.lastSeq < (this.floors.get(partition) ?? 0)) rmSync(file, { force: true }); // the floor rose during the put: prune removes the object
    await this.prune(partition);
    return { bytes };
  }

  /** Sequences of the partition's objects, newest first. */
  async objectSeqs(partition: number): Promise<number[]> {
    const seqs: number[] = [];
    for (const info of await this.os.list()) {
      const m = OBJECT_NAME.exec(info.name);
      if (m && Number(m[1]) === partition && !info.deleted) seqs.push(Number(m[2]));
    }
    return seqs.sort((x, y) => y - x);
  }

  private async prune(partition: number): Promise<void> {
    const floor = this.floors.get(partition) ?? 0;
    const seqs = await this.objectSeqs(partition);
    for (const seq of [...seqs.slice(SNAPSHOTS_KEPT), ...seqs.slice(0, SNAPSHOTS_KEPT).filter((s) => s < floor)]) {
      await this.os.delete(snapshotObjectName(partition, seq)).catch((err: unknown) => {
        this.log(`old snapshot ${snapshotObjectName(partition, seq)} not deleted (next write retries): ${err instanceof Error ? err.message : String(err)}`);
      });
    }
  }

  /**
   * Sequences of the partition's objects, newest first, in one JetStream API request bounded by
   * LOAD_REQUEST_TIMEOUT_MS (the object store's `list()` is a push consumer nothing bounds). It names objects by
   * their meta subject, deleted ones included: those are older than the kept ones (prune), and a download of one
   * finds it gone.
   */
  async listedSeqs(partition: number): Promise<number[]> {
    const prefix = `$O.${this.bucket}.M.`;
    const info = await this.quickJsm.streams.info(`OBJ_${this.bucket}`, { subjects_filter: `${prefix}>` });
    const seqs: number[] = [];
    for (const subject of Object.keys(info.state.subjects ?? {})) {
      if (!subject.startsWith(prefix)) continue;
      const m = OBJECT_NAME.exec(Buffer.from(subject.slice(prefix.length), 'base64url').toString('utf8'));
      if (m && Number(m[1]) === partition) seqs.push(Number(m[2]));
    }
    return seqs.sort((x, y) => y - x);
  }

  /** `attempt` until it succeeds, a non-transient error, or `until` (performance.now() time); pauses LOAD_RETRY_MS. */
  private async retry<T>(until: number, attempt: () => Promise<T>): Promise<T> {
    for (;;) {
      try {
        return await attempt();
      } catch (err) {
        if (!isTransient(err) || performance.now() + LOAD_RETRY_MS >= until) throw err;
        await sleep(LOAD_RETRY_MS);
      }
    }
  }

  /**
   * The newest snapshot at or below `maxSeq` that reads whole: the local copy when it is that sequence, else a
   * download. No JetStream request on the way waits longer than LOAD_REQUEST_TIMEOUT_MS; the object store's
   * answers are awaited (asked again) for LOCAL_FALLBACK_MS when a local copy could be used instead, for
   * LOAD_DEADLINE_MS when not. Any snapshot at or below the stream's end is a correct start (the follower replays
   * the rest, and the caller's resume check applies), so falling back to an older local copy is only slower.
   */
  async loadNewest(partition: number, maxSeq: number, onSkip: (name: string, why: string) => void): Promise<{ data: SnapshotData; lastBatchId?: string } | undefined> {
    const started = performance.now();
    const deadline = started + LOAD_DEADLINE_MS;
    const local = new Set<number>();
    for (const f of this.local(partition).files()) local.add(Number(/(\d{16})/.exec(f)![1]));
    const localBelow = (seq: number) => [...local].some((s) => s < seq);
    let remote: Set<number>;
    try {
      remote = new Set(await this.retry(localBelow(maxSeq + 1) ? Math.min(deadline, started + LOCAL_FALLBACK_MS) : deadline, () => this.listedSeqs(partition)));
    } catch (err) {
      if (!localBelow(maxSeq + 1)) throw err;
      this.log(`partition ${partition}: the object store did not list snapshots in ${Math.round(performance.now() - started)} ms (${message(err)}); starting from the local copy`);
      remote = new Set();
    }
    const seqs = [...new Set([...remote, ...local])].sort((x, y) => y - x);
    const floor = this.floors.get(partition) ?? 0;
    for (const seq of seqs) {
      const name = snapshotObjectName(partition, seq);
      if (seq < floor) {
        onSkip(name, `older than the partition's erase floor ${floor} (a deleted project's erasure)`);
        continue;
      }
      if (seq > maxSeq) {
        onSkip(name, `covers records beyond the log's last sequence ${maxSeq}`);
        continue;
      }
      const file = this.localFile(partition, seq);
      if (local.has(seq)) {
        try {
          return this.readLocal(file);
        } catch (err) {
          onSkip(file, err instanceof Error ? err.message : String(err));
          rmSync(file, { force: true }); // the object store's copy, if any, replaces it
        }
      }
      if (!remote.has(seq)) continue;
      try {
        // an older local copy to fall back on: the object store gets LOCAL_FALLBACK_MS for this one
        await this.retry(localBelow(seq) ? Math.min(deadline, performance.now() + LOCAL_FALLBACK_MS) : deadline, () => this.download(name, file));
        return this.readLocal(file);
      } catch (err) {
        onSkip(name, message(err));
        rmSync(file, { force: true });
        if (!localBelow(seq) && isTransient(err)) throw err; // not damaged, unreachable: nothing older is known to be whole
      }
    }
    return undefined;
  }

  private readLocal(file: string): { data: SnapshotData; lastBatchId?: string } {
    const data = readSnapshot(file);
    const lastBatchId = readTrailer(file);
    return lastBatchId === undefined ? { data } : { data, lastBatchId };
  }

  /**
   * Fetches an object into the cache (a temporary file renamed when whole: SnapshotFiles removes leftovers). Its
   * requests are bounded by LOAD_REQUEST_TIMEOUT_MS, the transfer by DOWNLOAD_STALL_MS without a chunk.
   */
  private async download(name: string, file: string): Promise<void> {
    const r = await this.quickOs.get(name);
    if (!r) throw new Error('gone from the object store');
    const failed = Promise.resolve(r.error).catch((err: unknown) => err); // settles whatever happens below
    mkdirSync(path.dirname(file), { recursive: true });
    const tmp = `${file}.tmp`;
    const source = Readable.fromWeb(r.data as import('node:stream/web').ReadableStream<Uint8Array>);
    let timer: NodeJS.Timeout | undefined;
    const watch = () => {
      clearTimeout(timer);
      timer = setTimeout(() => source.destroy(new Error(`download of ${name} stalled: no chunk for ${DOWNLOAD_STALL_MS} ms`)), DOWNLOAD_STALL_MS);
    };
    const progress = new Transform({
      transform(chunk: Buffer, _enc, done) {
        watch();
        done(null, chunk);
      },
    });
    try {
      watch();
      await pipeline(source, progress, createWriteStream(tmp, { mode: 0o600 }) as Writable);
      const err = await failed;
      if (err) throw err;
      renameSync(tmp, file);
    } finally {
      clearTimeout(timer);
      if (existsSync(tmp)) rmSync(tmp, { force: true });
    }
  }

  /** Stops the writer threads; the connection is the caller's. */
  async close(): Promise<void> {
    await Promise.all([...this.files.values()].map((f) => f.close()));
    this.files.clear();
  }
}
