import { serialize } from 'node:v8';
import { daySnapshot, toSnapshot, type Encoded } from '../core/snapshot.ts';
import type { AnalyticsState } from '../core/state.ts';
import type { SnapshotFiles } from '../store/files/snapshot-files.ts';

/**
 * Writes a single node's snapshot files (PartitionFold decides when): a snapshot is captured synchronously at one
 * consistent point (the live state as of `lastSeq`: hash tables copied with a memcpy each, no per-key work) and
 * serialized, hashed and written by a worker thread; only one is written at a time.
 */
/** Main-thread time per warm-up slice: well under the 50 ms a request may wait. */
const PREWARM_SLICE_MS = 8;

export class Snapshotter {
  private writing: Promise<void> | undefined;
  /** the next snapshot replaces every older file (state was dropped that older files still hold) */
  purgePending = false;
  /**
   * What the snapshot writer already holds, by key: a ring's version, a live day's first and last sequence. Unchanged
   * rings and days (an idle project's: most of them) are sent as their key alone, so a capture walks and copies only
   * what changed since the last snapshot (cloning every ring and day of 300 projects took 400–800 ms).
   */
  private readonly sent = new Map<string, string>();
  /**
   * Days and rings asleep since the restore are sent by place (where they are in the restored file) until a write
   * fails; then as bytes. Only the first capture after a restart sends places: after it every key is sent.
   */
  private byPlace = true;

  private get sendsPlaces(): boolean {
    return this.byPlace && this.files.restoredFrom !== undefined;
  }
  private writerGeneration = -1;

  constructor(
    private readonly state: AnalyticsState,
    private readonly files: SnapshotFiles,
    /** reports each written snapshot: seconds from capture to durable file, and its size */
    private readonly onWritten?: (seconds: number, bytes: number) => void,
  ) {}

  /**
   * Captures the state now (synchronously, when no write is under way) and writes it; rejects when the file could not
   * be written. `replaceAll`: delete every other snapshot file once this one is written (after an erasure).
   */
  async write(opts: { replaceAll?: boolean } = {}): Promise<void> {
    while (this.writing) await this.writing;
    const started = performance.now();
    const generation = this.files.writerGeneration();
    if (generation !== this.writerGeneration) {
      this.sent.clear(); // a new writer thread holds nothing yet
      this.writerGeneration = generation;
    }
    const seen = new Set<string>();
    const data = toSnapshot(
      this.state,
      (id, ring) => this.encode(`r\u0000${id}`, String(ring.version), seen, () => ring.packed(), ring.storedAt()),
      (id, day) => this.encode(`d\u0000${id}\u0000${day.day}`, `${day.firstSeq}:${day.lastSeq}`, seen, () => daySnapshot(day), day.storedAt()),
    );
    for (const key of this.sent.keys()) if (!seen.has(key)) this.sent.delete(key);
    const replaceAll = opts.replaceAll === true || this.purgePending;
    this.purgePending = false;
    const run = this.files.write(data, { replaceAll }).then(
      ({ bytes }) => this.onWritten?.((performance.now() - started) / 1000, bytes),
      (err: unknown) => {
        this.sent.clear(); // send everything next time
        this.byPlace = false; // as bytes: the restored file may be what failed, or gone
        if (replaceAll) this.purgePending = true; // the older files still have to go
        throw err;
      },
    );
    this.writing = run.then(
      () => {},
      () => {},
    );
    try {
      await run;
    } finally {
      this.writing = undefined;
    }
  }

  /**
   * After startup the writer holds nothing, so the first snapshot would serialize every awake day and ring (all of
   * them after a replay from the log) on the main thread. This walks the state beforehand in slices of a few ms
   * (yielding to requests between them) and hands their bytes to the writer; what changes meanwhile is simply sent
   * again by the capture (versions tell). Days and rings asleep since the restore are left to the capture, which
   * gives their place in the restored file (a small object each, no bytes): warming them here only competed with the
   * start for the cores (a 5,000-site restart answered /health 0.7–1 s later).
   */
  async prewarm(): Promise<void> {
    const generation = this.files.writerGeneration();
    if (generation !== this.writerGeneration) {
      this.sent.clear();
      this.writerGeneration = generation;
    }
    const seen = new Set<string>();
    let batch: Encoded[] = [];
    let sliceStart = performance.now();
    const flush = async () => {
      const items = batch.filter((e) => e.bytes);
      batch = [];
      if (items.length > 0) this.files.preload(items);
      await new Promise((resolve) => setImmediate(resolve));
      sliceStart = performance.now();
    };
    const byPlace = this.sendsPlaces;
    for (const [id, p] of [...this.state.projects]) {
      if (!(byPlace && p.recent.storedAt())) batch.push(this.encode(`r\u0000${id}`, String(p.recent.version), seen, () => p.recent.packed()));
      for (const day of [...p.days.values()]) {
        if (!(byPlace && day.storedAt())) batch.push(this.encode(`d\u0000${id}\u0000${day.day}`, `${day.firstSeq}:${day.lastSeq}`, seen, () => daySnapshot(day)));
        if (performance.now() - sliceStart > PREWARM_SLICE_MS) await flush();
      }
      if (performance.now() - sliceStart > PREWARM_SLICE_MS) await flush();
    }
    await flush();
  }

  /**
   * `stored`: where a day or ring still asleep since the restore has its bytes in the file it was restored from. The
   * writer is told that place instead of given a copy, so it does not hold a second copy of every idle project.
   */
  private encode(key: string, version: string, seen: Set<string>, value: () => unknown, stored?: { at: number; length: number }): Encoded {
    seen.add(key);
    if (this.sent.get(key) === version) return { key };
    this.sent.set(key, version);
    if (stored && this.sendsPlaces) return { key, ...stored };
    const v = value();
    // A day or ring still asleep since the restore gives its stored bytes: written again as they are.
    return { key, bytes: v instanceof Uint8Array ? v : serialize(v) };
  }

  async idle(): Promise<void> {
    while (this.writing) await this.writing;
  }

  /** The log must keep every record after this sequence: the oldest snapshot a restart may fall back on. */
  oldestKeptSeq(): number {
    return this.files.oldestSeq();
  }

  /** Stops the writer thread (after idle). */
  async close(): Promise<void> {
    await this.idle();
    await this.files.close();
  }
}
