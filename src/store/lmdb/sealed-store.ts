import type { Database, RootDatabase } from 'lmdb';
import type { RangePart } from '../../core/day-view.ts';
import { SEALED_VERSION, SealedPart, type SealedDay, type SealedMonth } from '../../core/sealed-day.ts';
import type { SealedLookup, SealedSegment } from '../../core/sealed-source.ts';

/**
 * Sealed history in LMDB, in the same environment as the log: sealed days keyed [project, date, firstSeq] (a day
 * normally has one segment) and month rollups keyed [project, 'YYYY-MM']. Written once by the engine when the
 * reducer hands a day over; read memory-mapped through a cache bounded in bytes, so reads of old ranges cost a few
 * cursor steps and no heap that grows with history.
 */

/** Decoded sealed parts kept for reads: ~1,000 large days or ~100k small ones; beyond it the least recent go. */
const CACHE_BYTES = 64 * 2 ** 20;

type DayKey = [string, string, number];
type MonthKey = [string, string];

/** Typed arrays go to LMDB as bytes (msgpack keeps a Uint8Array exactly) and come back as a fresh aligned copy. */
interface StoredSealed {
  hashes?: Uint8Array;
  sketch?: Uint8Array;
}

function encode<T extends SealedDay | SealedMonth>(s: T): Omit<T, 'userHashes' | 'sketch'> & StoredSealed {
  const { userHashes, sketch, ...rest } = s;
  const out: Omit<T, 'userHashes' | 'sketch'> & StoredSealed = rest;
  if (userHashes) out.hashes = new Uint8Array(userHashes.buffer, userHashes.byteOffset, userHashes.byteLength);
  if (sketch) out.sketch = sketch;
  return out;
}

function decode<T extends SealedDay | SealedMonth>(stored: Omit<T, 'userHashes' | 'sketch'> & StoredSealed): T {
  const { hashes, sketch, ...rest } = stored;
  const out = rest as T;
  if (hashes) out.userHashes = new Float64Array(new Uint8Array(hashes).buffer);
  if (sketch) out.sketch = new Uint8Array(sketch);
  return out;
}

/**
 * Days whose sealed form cannot be stored (cluster mode: a row bigger than a stream message). Nothing of the write was
 * stored; the sealer keeps these days live for good and writes the rest.
 */
export class UnsealableDays extends Error {
  constructor(
    message: string,
    /** `${projectId}\u0000${date}\u0000${firstSeq}` of each day */
    readonly days: ReadonlySet<string>,
  ) {
    super(message);
    this.name = 'UnsealableDays';
  }
}

export function unsealableKey(projectId: string, date: string, firstSeq: number): string {
  return `${projectId}\u0000${date}\u0000${firstSeq}`;
}

export interface SealedWrite {
  days: Array<{ projectId: string; day: SealedDay }>;
  months: Array<{ projectId: string; month: SealedMonth }>;
}

export class SealedStore implements SealedLookup {
  private dayDb!: Database<ReturnType<typeof encode<SealedDay>>, DayKey>;
  private monthDb!: Database<ReturnType<typeof encode<SealedMonth>>, MonthKey>;
  private readonly cache = new Map<string, SealedPart | null>();
  private cacheBytes = 0;
  private root!: RootDatabase;

  /**
   * `gate`: set while the environment is being compacted (LogStore.compact); a write must wait for it, or it would
   * land in the old file after the copy was taken and be lost in the swap.
   */
  constructor(
    root: RootDatabase,
    private readonly gate: () => Promise<void> | undefined = () => undefined,
  ) {
    this.reopen(root);
  }

  /** The environment was reopened (after a compaction): use its handles. */
  reopen(root: RootDatabase): void {
    this.root = root;
    this.dayDb = root.openDB({ name: 'sealed_days' });
    this.monthDb = root.openDB({ name: 'sealed_months' });
  }

  /** Sealed day segments stored, every project (operator metrics). */
  dayCount(): number {
    return (this.dayDb.getStats() as { entryCount: number }).entryCount;
  }

  /**
   * Queues the removal of every sealed day and month of a project; call inside a transaction of this environment
   * (erasure). The read cache forgets the project.
   */
  removeProject(projectId: string): number {
    let n = 0;
    for (const k of this.dayDb.getKeys({ start: [projectId], end: [`${projectId}\u0000`] })) {
      if (k[0] !== projectId) continue;
      void this.dayDb.remove(k);
      n++;
    }
    for (const k of this.monthDb.getKeys({ start: [projectId], end: [`${projectId}\u0000`] })) {
      if (k[0] !== projectId) continue;
      void this.monthDb.remove(k);
      n++;
    }
    for (const key of [...this.cache.keys()]) if (key.startsWith(`${projectId}\u0000`)) this.forget(key);
    return n;
  }

  /** Every sealed segment of every project, in key order, decoded or with why it cannot be (check, rebuild). */
  *allDays(): Generator<{ projectId: string; date: string; firstSeq: number; day?: SealedDay; problem?: string }> {
    if (!this.dayDb) return; // a read-only open of a directory that never sealed a day
    for (const key of this.dayDb.getKeys()) {
      const [projectId, date, firstSeq] = key;
      try {
        const v = this.dayDb.get(key);
        if (!v) continue;
        const day = decode<SealedDay>(v);
        if (day.v !== SEALED_VERSION || day.date !== date || day.firstSeq !== firstSeq || typeof day.figures?.pageviews !== 'number') {
          throw new Error('not a sealed day of this version and key');
        }
        yield { projectId, date, firstSeq, day };
      } catch (err) {
        yield { projectId, date, firstSeq, problem: err instanceof Error ? err.message : String(err) };
      }
    }
  }

  /** Every month rollup of every project, in key order (check). */
  *allMonths(): Generator<{ projectId: string; month: string; rollup?: SealedMonth; problem?: string }> {
    if (!this.monthDb) return;
    for (const key of this.monthDb.getKeys()) {
      try {
        const v = this.monthDb.get(key);
        if (v) yield { projectId: key[0], month: key[1], rollup: decode<SealedMonth>(v) };
      } catch (err) {
        yield { projectId: key[0], month: key[1], problem: err instanceof Error ? err.message : String(err) };
      }
    }
  }

  /**
   * Rebuild: removes every month rollup and every day segment whose records the log still holds (first sequence at
   * or after `logStart`), so they are sealed again from the log. Segments older than the log stay (retention).
   */
  async clearFrom(logStart: number): Promise<void> {
    for (let g = this.gate(); g; g = this.gate()) await g;
    await this.root.transaction(() => {
      for (const { key, value } of this.dayDb.getRange()) if (value.firstSeq >= logStart) void this.dayDb.remove(key);
      for (const k of this.monthDb.getKeys()) void this.monthDb.remove(k);
    });
    await this.root.flushed;
    this.cache.clear();
    this.cacheBytes = 0;
  }

  /** Writes sealed days and rollups in one transaction; resolves once they are on disk (the live days may then go). */
  async write(w: SealedWrite): Promise<void> {
    for (let g = this.gate(); g; g = this.gate()) await g;
    await this.root.transaction(() => {
      for (const { projectId, day } of w.days) void this.dayDb.put([projectId, day.date, day.firstSeq], encode(day));
      for (const { projectId, month } of w.months) void this.monthDb.put([projectId, month.month], encode(month));
    });
    await this.root.flushed;
    for (const { projectId, day } of w.days) this.forget(`${projectId}\u0000${day.date}\u0000${day.firstSeq}`);
    for (const { projectId, month } of w.months) this.forget(`${projectId}\u0000${month.month}`);
  }

  /**
   * One row from elsewhere (cluster mode: the sealed-rows bucket's watch): queued in LMDB's next batched transaction,
   * not awaited, so a mirror catching up writes thousands per commit. `flushed()` resolves once they are on disk.
   */
  putDay(projectId: string, day: SealedDay): void {
    void this.dayDb.put([projectId, day.date, day.firstSeq], encode(day));
    this.forget(`${projectId}\u0000${day.date}\u0000${day.firstSeq}`);
  }

  putMonth(projectId: string, month: SealedMonth): void {
    void this.monthDb.put([projectId, month.month], encode(month));
    this.forget(`${projectId}\u0000${month.month}`);
  }

  removeDay(projectId: string, date: string, firstSeq: number): void {
    void this.dayDb.remove([projectId, date, firstSeq]);
    this.forget(`${projectId}\u0000${date}\u0000${firstSeq}`);
  }

  removeMonth(projectId: string, month: string): void {
    void this.monthDb.remove([projectId, month]);
    this.forget(`${projectId}\u0000${month}`);
  }

  async flushed(): Promise<void> {
    await this.root.flushed;
  }

  /** Every sealed segment of a project's days in [from, to], decoded (for rollups and checks). */
  readDays(projectId: string, from: string, to: string): SealedDay[] {
    const out: SealedDay[] = [];
    if (!this.dayDb) return out;
    for (const { value } of this.dayDb.getRange({ start: [projectId, from], end: [projectId, `${to}~`] })) out.push(decode<SealedDay>(value));
    return out;
  }

  hasMonth(projectId: string, month: string): boolean {
    return this.monthDb.doesExist([projectId, month]);
  }

  // SealedLookup: what metrics reads.

  month(projectId: string, month: string): RangePart | undefined {
    const key = `${projectId}\u0000${month}`;
    const hit = this.cached(key);
    if (hit !== undefined) return hit ?? undefined;
    const v = this.monthDb.get([projectId, month]);
    const part = v ? new SealedPart(decode<SealedMonth>(v)) : null;
    this.remember(key, part);
    return part ?? undefined;
  }

  days(projectId: string, from: string, to: string): SealedSegment[] {
    const out: SealedSegment[] = [];
    for (const k of this.dayDb.getKeys({ start: [projectId, from], end: [projectId, `${to}~`] })) {
      const [, date, firstSeq] = k;
      const key = `${projectId}\u0000${date}\u0000${firstSeq}`;
      let part = this.cached(key);
      if (!part) {
        const v = this.dayDb.get(k);
        if (!v) continue;
        part = new SealedPart(decode<SealedDay>(v));
        this.remember(key, part);
      }
      out.push({ date, firstSeq, part });
    }
    return out;
  }

  private cached(key: string): SealedPart | null | undefined {
    const v = this.cache.get(key);
    if (v === undefined) return undefined;
    this.cache.delete(key); // most recent last
    this.cache.set(key, v);
    return v;
  }

  private remember(key: string, part: SealedPart | null): void {
    this.cache.set(key, part);
    this.cacheBytes += part?.bytes ?? 64;
    for (const [k, v] of this.cache) {
      if (this.cacheBytes <= CACHE_BYTES) break;
      this.cache.delete(k);
      this.cacheBytes -= v?.bytes ?? 64;
    }
  }

  private forget(key: string): void {
    const v = this.cache.get(key);
    if (v === undefined) return;
    this.cache.delete(key);
    this.cacheBytes -= v?.bytes ?? 64;
  }
}
