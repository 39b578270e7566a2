import { serialize } from 'node:v8';
import type { DayAggregate, StoredDay } from '../core/day-aggregate.ts';
import { daySnapshot, toSnapshot, type Encoded } from '../core/snapshot.ts';
import type { AnalyticsState } from '../core/state.ts';
import type { DayPlacer, SnapshotFiles } from '../store/files/snapshot-files.ts';

/**
 * Writes a single node's snapshot files (PartitionFold decides when): a snapshot is captured synchronously at one
 * consistent point (the live state as of `lastSeq`: hash tables copied with a memcpy each, no per-key work) and
 * serialized, hashed and written by a worker thread; only one is written at a time.
 */
/** Main-thread time per warm-up or rehoming slice: well under the 50 ms a request may wait. */
const PREWARM_SLICE_MS = 8;
/** Days rehomed between two looks at the clock (one is a comparison and a small object). */
const REHOME_CHECK_EVERY = 256;

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
   * Days and rings asleep on a snapshot file (restored from it, or moved onto it after a write) are sent by place
   * when the writer does not hold them (the first capture after a restart or a new writer thread) until a write
   * fails; then as bytes.
   */
  private byPlace = true;
  private writerGeneration = -1;
  /** days moved from bytes in memory onto the file just written (operator figure and tests) */
  rehomed = 0;

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
    // every day in frame order with the bytes it sleeps on now: after the write, those still asleep on them move onto
    // the file (rehome)
    const days: DayAggregate[] = [];
    const asleepOn: Array<StoredDay | undefined> = [];
    const data = toSnapshot(
      this.state,
      (id, ring) => this.encode(`r\u0000${id}`, String(ring.version), seen, () => ring.packed(), ring.storedAt()),
      (id, day) => {
        days.push(day);
        asleepOn.push(day.storedDay);
        return this.encode(`d\u0000${id}\u0000${day.day}`, `${day.firstSeq}:${day.lastSeq}`, seen, () => daySnapshot(day), day.storedAt());
      },
    );
    for (const key of this.sent.keys()) if (!seen.has(key)) this.sent.delete(key);
    const replaceAll = opts.replaceAll === true || this.purgePending;
    this.purgePending = false;
    const run = this.files.write(data, { replaceAll }).then(
      (w) => {
        this.onWritten?.((performance.now() - started) / 1000, w.bytes);
        return w;
      },
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
    let written: { places: Float64Array };
    try {
      written = await run;
    } finally {
      this.writing = undefined;
    }
    await this.rehome(days, asleepOn, written.places);
  }

  /**
   * A day that slept at the capture and still sleeps on the same bytes is moved onto its frame in the file just
   * written, or in the earlier file that file references for it: its bytes leave memory (a day put to sleep since the
   * last snapshot holds them), and a day on a file no longer kept moves too, so at most the kept files stay open (an
   * older one is closed once no day is left on it). The file then holds what the writer copies or references next
   * time, by the place it noted. In slices between requests.
   */
  private async rehome(days: DayAggregate[], asleepOn: Array<StoredDay | undefined>, places: Float64Array): Promise<void> {
    if (places.length !== days.length * 4) return; // a writer that gave no places (or another capture's): leave them
    const placers = new Map<number, { file: string; place: DayPlacer }>();
    const target = (seq: number) => {
      let t = placers.get(seq);
      if (!t) {
        const file = this.files.pathOf(seq);
        placers.set(seq, (t = { file, place: this.files.placer(file) }));
      }
      return t;
    };
    let sliceStart = performance.now();
    for (let i = 0; i < days.length; i++) {
      if (i % REHOME_CHECK_EVERY === 0 && performance.now() - sliceStart > PREWARM_SLICE_MS) {
        await new Promise((resolve) => setImmediate(resolve));
        sliceStart = performance.now();
      }
      const from = asleepOn[i];
      const at = places[i * 4]!;
      if (from === undefined || Number.isNaN(at)) continue;
      const d = days[i]!;
      if (d.storedDay !== from) continue;
      const onto = target(places[i * 4 + 3]!);
      if (from.file === onto.file && from.at === at) continue; // asleep there already (an unchanged day referenced)
      const to = onto.place(from, at, places[i * 4 + 1]!, places[i * 4 + 2]!);
      if (to === undefined) continue; // the file is gone already: a later write moves it
      if (!d.rehome(from, to) || from.file !== undefined) continue;
      this.rehomed++;
      from.release?.(); // its bytes were in memory: nothing reads them any more
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
    const byPlace = this.byPlace;
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
   * `stored`: where a sleeping day or ring has its bytes in a snapshot file. The writer is told that place instead of
   * given a copy, so it does not hold a second copy of every idle project.
   */
  private encode(key: string, version: string, seen: Set<string>, value: () => unknown, stored?: { file: string; at: number; length: number; crc?: number }): Encoded {
    seen.add(key);
    if (this.sent.get(key) === version) return { key };
    this.sent.set(key, version);
    if (stored && this.byPlace) return { key, ...stored };
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
