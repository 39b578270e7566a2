import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import { open, type Database, type RootDatabase } from 'lmdb';
import { decodeDay, decodeSegment, verifySegment } from '../../core/columns/codec.ts';
import type { VisitTable } from '../../core/columns/day-table.ts';
import type { SegmentView } from '../../core/columns/segment.ts';
import { removeReplaced, replaceFile } from './replace-file.ts';

/**
 * Sealed column segments in their own LMDB environment (`columns.lmdb` in the data directory), so a rebuild or an
 * erasure can drop and compact it without touching the log. Keys are [projectId, day, segmentNo]; the value is one
 * encoded segment (core/columns/codec.ts). The marker "folded up to log sequence N" is written in the same
 * transaction as the segments it covers, so after a crash the projection replays the log from N + 1.
 */

/** 1 TiB of address space: LMDB maps lazily, so this costs nothing until used. */
const MAP_SIZE = 2 ** 40;
/**
 * Decoded segments kept for questions (typed-array views over their bytes plus parsed dictionaries): 512 MiB holds
 * ~20M events at ~25 B, a month of a busy project, so a 30-day question reads nothing from the file.
 */
const CACHE_BYTES = 512 * 2 ** 20;
const MARKER = 'folded_up_to';
/** Segment keys removed per erasure transaction (a segment is removed without reading it: a slice takes a few ms). */
const ERASE_SLICE = 500;
const FILE = 'columns.lmdb';

export const crc = (bytes: Uint8Array): number => crc32(bytes);

/**
 * A stored segment whose checksum or header does not hold: a question over its day is refused (never answered from
 * damaged bytes), naming the file, the segment and the way out.
 */
export class DamagedSegmentError extends Error {
  override readonly name = 'DamagedSegmentError';
  /** the error code a cluster owner's read reply carries, so the node that forwarded the question answers 503 too */
  readonly code = 'unavailable';
  constructor(
    readonly file: string,
    readonly key: SegKey,
    readonly problem: string,
  ) {
    super(
      `${file} is damaged: the column segment of project ${key[0]}, day ${key[1]} (no. ${key[2]}): ${problem}. ` +
        'Questions over that day are refused until it is rebuilt: stop the service and run `npx analytics rebuild` ' +
        '(the column store is folded again from the log), or restore the newest backup (`analytics backup DEST` made it).',
    );
  }
}

type SegKey = [string, string, number];

export interface StoredSegment {
  segNo: number;
  view: SegmentView;
  /** a merged day's visit table */
  table: VisitTable | undefined;
}

export class ColumnStore {
  private root!: RootDatabase;
  private segs!: Database<Buffer, SegKey>;
  private meta!: Database<unknown, string>;
  /** decoded segments by project-day (the whole list, so a cached day costs no read), most recently used last */
  private readonly cache = new Map<string, { list: StoredSegment[]; bytes: number }>();
  private cacheBytes = 0;
  /** set for the few milliseconds a compaction copies the last writes and swaps the file */
  private gate: Promise<void> | undefined;
  /** while a compaction copies: the segment keys written since the copy began (see compact) */
  private copying: SegKey[] | undefined;
  /** set while a compaction copies: a rebuild (clearFrom) waits for it */
  private copyGate: Promise<void> | undefined;
  readonly file: string;

  private constructor(
    dataDir: string,
    private readonly readOnly: boolean,
  ) {
    this.file = path.join(dataDir, FILE);
    this.openEnv();
  }

  static open(dataDir: string, opts: { readOnly?: boolean } = {}): ColumnStore {
    const store = new ColumnStore(dataDir, opts.readOnly === true);
    // an old file a crash left under its second name mid-swap: off the main thread
    if (opts.readOnly !== true) void removeReplaced(store.file).catch(() => {});
    return store;
  }

  /** Whether a data directory has a columns file (a read-only tool on an older directory finds none). */
  static exists(dataDir: string): boolean {
    return existsSync(path.join(dataDir, FILE));
  }

  private openEnv(): void {
    this.root = open({ path: this.file, mapSize: MAP_SIZE, maxDbs: 4, noSubdir: true, readOnly: this.readOnly });
    this.segs = this.root.openDB<Buffer, SegKey>({ name: 'segments', encoding: 'binary' });
    this.meta = this.root.openDB<unknown, string>({ name: 'meta' });
  }

  /** Every event up to this log sequence is in a stored segment. */
  marker(): number {
    return (this.meta.get(MARKER) as number | undefined) ?? 0;
  }

  /** Resolves once no compaction is swapping the file. */
  async settled(): Promise<void> {
    while (this.gate) await this.gate;
  }

  /** The sealed segments of one project-day, in segment order (decoded views, cached). */
  day(projectId: string, day: string): StoredSegment[] {
    const ck = `${projectId}\u0000${day}\u0000`;
    let hit = this.cache.get(ck);
    if (hit) {
      this.cache.delete(ck); // most recent last
      this.cache.set(ck, hit);
      return hit.list;
    }
    const list: StoredSegment[] = [];
    let bytes = 0;
    for (const { key, value } of this.segs.getRange({ start: [projectId, day, 0], end: [projectId, day, Number.MAX_SAFE_INTEGER] })) {
      // checked once as it is read into the cache (~1.4 GB/s: a cold month of 10M events ~0.1–0.2 s): damaged bytes
      // would decode into wrong figures, or none
      const problem = verifySegment(value, crc);
      if (problem) throw new DamagedSegmentError(this.file, key, problem);
      list.push({ segNo: key[2], ...decodeDay(value) });
      bytes += value.byteLength;
    }
    hit = { list, bytes };
    this.cache.set(ck, hit);
    this.cacheBytes += bytes;
    for (const [k, v] of this.cache) {
      if (this.cacheBytes <= CACHE_BYTES) break;
      this.cache.delete(k);
      this.cacheBytes -= v.bytes;
    }
    return list;
  }

  /** Writes segments and the marker in one transaction. */
  async write(segments: Array<{ projectId: string; day: string; segNo: number; bytes: Uint8Array }>, marker: number): Promise<void> {
    await this.settled();
    for (const s of segments) this.copying?.push([s.projectId, s.day, s.segNo]);
    await this.root.transaction(() => {
      for (const s of segments) this.segs.putSync([s.projectId, s.day, s.segNo], Buffer.from(s.bytes.buffer, s.bytes.byteOffset, s.bytes.byteLength));
      if (marker > this.marker()) this.meta.putSync(MARKER, marker);
    });
    const days = new Set(segments.map((x) => `${x.projectId}\u0000${x.day}\u0000`));
    this.forget((k) => days.has(k));
  }

  /**
   * Replaces segments of one project-day by their merge, stored under the last of their numbers (a segment started
   * meanwhile has a higher number, so it neither collides nor moves before the merge).
   */
  async replaceDay(projectId: string, day: string, segNos: readonly number[], bytes: Uint8Array): Promise<void> {
    await this.settled();
    const last = Math.max(...segNos);
    await this.root.transaction(() => {
      for (const n of segNos) if (n !== last) this.segs.removeSync([projectId, day, n]);
      this.segs.putSync([projectId, day, last], Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    });
    const prefix = `${projectId}\u0000${day}\u0000`;
    this.forget((k) => k.startsWith(prefix));
  }

  /**
   * Removes every segment of a project (in transactions of ERASE_SLICE keys), then compacts the file online so none
   * of its bytes stay in freed pages.
   */
  async eraseProject(projectId: string): Promise<number> {
    while (this.copyGate) await this.copyGate;
    await this.settled();
    let n = 0;
    for (;;) {
      const part: SegKey[] = [];
      for (const k of this.segs.getKeys({ start: [projectId], limit: ERASE_SLICE })) {
        if (k[0] !== projectId) break;
        part.push(k);
      }
      if (part.length === 0) break;
      await this.settled();
      await this.root.transaction(() => {
        for (const k of part) this.segs.removeSync(k);
      });
      n += part.length;
      await new Promise((resolve) => setImmediate(resolve));
    }
    this.forget((k) => k.startsWith(`${projectId}\u0000`));
    if (n > 0) await this.compact();
    return n;
  }

  /**
   * Rebuild: removes every segment that starts at or after `fromSeq` (the log still has all of it) and sets the marker
   * below it. Segments that start before (retention trimmed the log there) stay: they are the only history left, and
   * the fold skips the events they already hold.
   */
  async clearFrom(fromSeq: number): Promise<number> {
    while (this.copyGate) await this.copyGate;
    let n = 0;
    await this.root.transaction(() => {
      for (const { key, value } of this.segs.getRange()) {
        if (fromSeq > 1 && decodeSegment(value).firstSeq < fromSeq) continue;
        this.segs.removeSync(key);
        n++;
      }
      this.meta.putSync(MARKER, fromSeq - 1);
    });
    this.forget(() => true);
    return n;
  }

  /** Every stored segment, verified (check): its checksum and header, and that it decodes. */
  *verifyAll(): Generator<{ projectId: string; day: string; segNo: number; events: number; bytes: number; problem?: string }> {
    for (const { key, value } of this.segs.getRange()) {
      const [projectId, day, segNo] = key;
      let problem = verifySegment(value, crc);
      let events = 0;
      if (!problem) {
        try {
          const v = decodeSegment(value);
          events = v.n;
          for (const c of ['name', 'path'] as const) v.dict(c);
          v.userDict();
          v.visitDict();
        } catch (err) {
          problem = err instanceof Error ? err.message : String(err);
        }
      }
      yield { projectId, day, segNo, events, bytes: value.byteLength, problem };
    }
  }

  /** Stored segment bytes and events (bench: bytes per event). */
  size(): { segments: number; events: number; bytes: number } {
    let segments = 0;
    let events = 0;
    let bytes = 0;
    for (const { value } of this.segs.getRange()) {
      segments++;
      bytes += value.byteLength;
      events += decodeSegment(value).n;
    }
    return { segments, events, bytes };
  }

  private forget(which: (key: string) => boolean): void {
    for (const [k, v] of this.cache) {
      if (!which(k)) continue;
      this.cache.delete(k);
      this.cacheBytes -= v.bytes;
    }
  }

  /**
   * Copies the environment with compaction (live pages only) while segments are still written, then, under the gate
   * for a few milliseconds, copies the segments written meanwhile (and the marker) into the copy and swaps it in.
   */
  private async compact(): Promise<void> {
    let releaseCopy!: () => void;
    this.copyGate = new Promise<void>((r) => (releaseCopy = r));
    const tmp = `${this.file}.compact`;
    let target: RootDatabase | undefined;
    let freed: Promise<void> | undefined;
    try {
      await Promise.all([rm(tmp, { force: true }), rm(`${tmp}-lock`, { force: true })]);
      await this.root.transaction(() => {});
      await this.root.flushed;
      this.copying = [];
      await this.root.backup(tmp, true);
      target = open({ path: tmp, mapSize: MAP_SIZE, maxDbs: 4, noSubdir: true });
      const segs = target.openDB<Buffer, SegKey>({ name: 'segments', encoding: 'binary' });
      const meta = target.openDB<unknown, string>({ name: 'meta' });
      const catchUp = (): Promise<unknown> =>
        target!.transaction(() => {
          for (const k of this.copying!.splice(0)) {
            const bytes = this.segs.get(k);
            if (bytes === undefined) segs.removeSync(k);
            else segs.putSync(k, bytes);
          }
          meta.putSync(MARKER, this.marker());
        });
      await catchUp();
      let release!: () => void;
      this.gate = new Promise<void>((r) => (release = r));
      try {
        await this.root.transaction(() => {}); // writes that passed the gate are committed
        await catchUp();
        await target.close();
        target = undefined;
        await this.root.close();
        freed = replaceFile(tmp, this.file);
        this.openEnv();
      } finally {
        this.gate = undefined;
        release();
      }
      await freed;
    } finally {
      this.copying = undefined;
      if (target) await target.close().catch(() => {});
      await Promise.all([rm(tmp, { force: true }), rm(`${tmp}-lock`, { force: true })]);
      this.copyGate = undefined;
      releaseCopy();
    }
  }

  async close(): Promise<void> {
    await this.settled();
    await this.root.close();
  }
}

