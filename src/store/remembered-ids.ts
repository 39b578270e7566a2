import type { Database } from 'lmdb';
import { hash53 } from '../core/hash.ts';
import { DEDUP_WINDOW_MS } from '../core/limits.ts';
import { NumberCounts } from '../core/number-table.ts';
import type { LogRecord } from '../core/types.ts';

/**
 * The eventIds of the last 48 hours (the exactly-once promise), durable by construction: [project, eventId] ->
 * receive time goes into LMDB inside the log append's transaction of the events that carry them (writeWith), so they never
 * ride in a snapshot. In front of LMDB, an open-addressing table of hash53(project, eventId) -> receive second
 * (12 bytes a slot at ≤ 70 % load, ~17–34 bytes an id, nothing for the GC to trace) answers "never seen" without
 * touching LMDB; a hit is confirmed there, so a hash collision can never drop an event.
 */

/** Ids removed per expiry slice: keeps each slice a few ms, yielding to requests between slices. */
const EXPIRE_SLICE = 10_000;

export type IdKey = [string, string];

export class RememberedIds {
  private table = new NumberCounts();
  /** false while the table is being filled from LMDB at startup: lookups then go to LMDB directly (~2.4 µs) */
  private ready = true;
  /** set by stop(): background passes end at their next slice */
  private stopped = false;
  private running: Promise<unknown> = Promise.resolve();

  /** `gate`: set while the environment is being compacted; a write waits for it (see SealedStore). */
  constructor(
    private db: Database<number, IdKey>,
    private readonly gate: () => Promise<void> | undefined = () => undefined,
  ) {}

  /** The environment was reopened (after a compaction): use its handle. */
  reopen(db: Database<number, IdKey>): void {
    this.db = db;
  }

  /**
   * Startup: drops expired ids and fills the table from LMDB in slices, in the background, so starting does not wait
   * for a scan of 48 hours of ids (nor map every page of the file at once); until then lookups ask LMDB.
   */
  async start(now: number): Promise<void> {
    this.ready = false;
    try {
      await this.expire(now, true);
    } finally {
      this.ready = true;
    }
  }

  /** Ends background passes (before the store closes). */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.running.catch(() => {});
  }

  /** Fills the table from LMDB at once: only ids still inside the window at `now`. */
  load(now: number): number {
    const table = new NumberCounts((this.db.getStats() as { entryCount: number }).entryCount);
    for (const { key, value } of this.db.getRange()) {
      if (now - value < DEDUP_WINDOW_MS) table.set(hash53(`${key[0]}\u0000${key[1]}`), Math.floor(value / 1000));
    }
    this.table = table;
    return table.size;
  }

  /**
   * Writes the ids of these records to LMDB; call inside the log append's transaction (LogStore.append's `extra`), so
   * an id is durable exactly when its event is.
   */
  writeWith(records: readonly LogRecord[]): void {
    // History ids are kept for good elsewhere (history-ids.ts): here they would fill the 48-hour table.
    for (const r of records) if (r.t === 'e' && r.eventId !== undefined && r.h !== 1) this.db.putSync([r.p, r.eventId], r.rt);
  }

  /** Called once the events carrying these ids are committed (with the ids, in the same transaction). */
  remember(projectId: string, eventId: string, rt: number): void {
    this.table.set(hash53(`${projectId}\u0000${eventId}`), Math.floor(rt / 1000));
  }

  /** Was `eventId` stored for the project within the de-duplication window at `now`? */
  has(projectId: string, eventId: string, now: number): boolean {
    if (!this.ready) {
      const rt = this.db.get([projectId, eventId]);
      return rt !== undefined && now - rt < DEDUP_WINDOW_MS;
    }
    const seconds = this.table.get(hash53(`${projectId}\u0000${eventId}`));
    if (seconds < 0 || now - seconds * 1000 >= DEDUP_WINDOW_MS + 1000) return false;
    const rt = this.db.get([projectId, eventId]);
    return rt !== undefined && now - rt < DEDUP_WINDOW_MS;
  }

  get size(): number {
    return this.table.size;
  }

  /** Heap bytes of the in-memory table. */
  get bytes(): number {
    return this.table.byteLength;
  }

  /**
   * Removes ids older than the window from LMDB, in slices that yield between them, then rebuilds the table from
   * what is left (a table has no delete; rebuilding ~10M entries is a few hundred ms of typed-array work, sliced too).
   */
  async expire(now: number, rebuild = false): Promise<number> {
    const pass = this.expirePass(now, rebuild);
    this.running = pass;
    return pass;
  }

  private async expirePass(now: number, rebuild: boolean): Promise<number> {
    let removed = 0;
    let start: IdKey | undefined;
    for (;;) {
      const dead: IdKey[] = [];
      let last: IdKey | undefined;
      let seen = 0;
      for (const { key, value } of this.db.getRange(start ? { start } : {})) {
        if (seen++ >= EXPIRE_SLICE) break;
        last = key;
        if (now - value >= DEDUP_WINDOW_MS) dead.push(key);
      }
      if (dead.length > 0) {
        for (let g = this.gate(); g; g = this.gate()) await g;
        await this.db.transaction(() => {
          for (const k of dead) void this.db.remove(k);
        });
      }
      removed += dead.length;
      if (seen <= EXPIRE_SLICE || !last || this.stopped) break;
      start = last;
      await new Promise((resolve) => setImmediate(resolve));
    }
    if ((removed > 0 || rebuild) && !this.stopped) await this.rebuild(now);
    return removed;
  }

  private async rebuild(now: number): Promise<void> {
    const table = new NumberCounts();
    // Slice by key like expire(): no read transaction is held across turns.
    let start: IdKey | undefined;
    for (;;) {
      let seen = 0;
      let last: IdKey | undefined;
      for (const { key, value } of this.db.getRange(start ? { start } : {})) {
        if (seen++ >= EXPIRE_SLICE) break;
        last = key;
        if (now - value < DEDUP_WINDOW_MS) table.set(hash53(`${key[0]}\u0000${key[1]}`), Math.floor(value / 1000));
      }
      if (seen <= EXPIRE_SLICE || !last) break;
      if (this.stopped) return; // keep the table we have
      start = last;
      await new Promise((resolve) => setImmediate(resolve));
    }
    // Ids committed while rebuilding are in LMDB but may be missing here: add what the old table knew past `now`.
    this.table.forEachEntry((k, s) => {
      if (s * 1000 >= now - 1000 && table.get(k) < 0) table.set(k, s);
    });
    this.table = table;
  }
}
