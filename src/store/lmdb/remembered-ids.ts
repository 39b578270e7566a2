import * as lmdb from 'lmdb';
import type { Database } from 'lmdb';
import { hash53 } from '../../core/hash.ts';
import { DEDUP_WINDOW_MS } from '../../core/limits.ts';
import { FingerprintSet } from '../../core/fingerprint-set.ts';
import type { LogRecord } from '../../core/types.ts';

/**
 * The eventIds of the last 48 hours (the exactly-once promise), durable by construction: [project, eventId] ->
 * receive time goes into LMDB inside the log append's transaction of the events that carry them (writeWith), so they never
 * ride in a snapshot. In front of LMDB, a set of 32-bit fingerprints of hash53(project, eventId) (4 bytes a slot at
 * ≤ 70 % load, ~6–11 bytes an id, nothing for the GC to trace: 3M ids in 32 MiB) answers "never seen" without
 * touching LMDB; a hit (a repeat, or a fingerprint shared by chance: ~0.1 % of lookups) is confirmed there, so a
 * collision can never drop an event.
 */

/**
 * Main-thread time per slice of the expiry pass and of the startup check against the log, requests running between
 * slices: well under the 50 ms a request may wait (by count they took 82 ms per 10,000 ids and 114 ms per 20,000
 * log records, which held /health for up to 140 ms after a restart).
 */
const PASS_SLICE_MS = 8;
/** Records between two looks at the clock inside a slice. */
const CLOCK_EVERY = 64;
/** Damaged records named one by one in the log before the rest are only counted. */
const DAMAGE_NAMED = 5;

export type IdKey = [string, string];

/** A decoded key is a remembered id's: [project, eventId]. */
function isIdKey(k: unknown): k is IdKey {
  return Array.isArray(k) && k.length === 2 && typeof k[0] === 'string' && typeof k[1] === 'string';
}

/** lmdb's own key decoder (exported, not in its typings): a stored key's bytes back to [project, eventId]. */
const bufferToKeyValue = (lmdb as unknown as { bufferToKeyValue(b: Buffer): unknown }).bufferToKeyValue;

/** A log record as the startup check reads it: its sequence, and its eventId when it carries one inside the window. */
export interface LoggedId {
  seq: number;
  id: { p: string; eventId: string; rt: number } | undefined;
}

/** One stored record: its key as decoded, and its [project, eventId] and receive time, or why it cannot be used. */
interface StoredId {
  stored: unknown;
  key: IdKey | undefined;
  rt: number;
  problem: string | undefined;
}

export class RememberedIds {
  private table = new FingerprintSet();
  /** fingerprints remembered while an expiry pass runs: its new table lacks those behind where it read */
  private addedDuringPass: number[] | undefined;
  /** false while the table is being filled from LMDB at startup: lookups then go to LMDB directly (~2.4 µs) */
  private ready = true;
  /** set by stop(): background passes end at their next slice */
  private stopped = false;
  private running: Promise<unknown> = Promise.resolve();
  /**
   * set from the start until the startup check against the log is done: a write that carries eventIds waits for it,
   * since until then a remembered id that is damaged or lost cannot be told from a new one (a resend would count twice)
   */
  private checking: Promise<void> | undefined;
  /** damaged records met by the passes so far (named in the log by start) */
  private damaged: string[] = [];
  private damagedCount = 0;

  /**
   * `raw`: the same table as bytes, to remove a damaged record by its bytes (its key may not decode to them again).
   * `gate`: set while the environment is being compacted; a write waits for it (see SealedStore).
   * `fromLog`: the log's records from where the window starts (see LogStore.eventIdsSince); `file` names the store.
   */
  constructor(
    private db: Database<number, IdKey>,
    private raw: Database<Buffer, Buffer>,
    private readonly gate: () => Promise<void> | undefined = () => undefined,
    private readonly fromLog: (since: number, afterSeq?: number) => Iterable<LoggedId> = () => [],
    private readonly file = 'analytics.lmdb',
  ) {}

  /** The environment was reopened (after a compaction): use its handles. */
  reopen(db: Database<number, IdKey>, raw: Database<Buffer, Buffer>): void {
    this.db = db;
    this.raw = raw;
  }

  /**
   * Startup: drops expired ids and fills the table from LMDB in slices, in the background, so starting does not wait
   * for a scan of 48 hours of ids (nor map every page of the file at once); until then lookups ask LMDB. Then the
   * table is checked against the log's last 48 hours (the log holds every eventId it stored) and what is missing,
   * damaged or lost, is written again; when damaged records were found, writes wait for that check (`settled`).
   */
  start(now: number, log: (line: string) => void = () => {}): Promise<void> {
    const run = this.startNow(now, log);
    this.checking = run;
    return run.finally(() => {
      if (this.checking === run) this.checking = undefined;
    });
  }

  private async startNow(now: number, log: (line: string) => void): Promise<void> {
    this.ready = false;
    try {
      await this.expire(now, true);
      const damaged = this.damagedCount;
      if (damaged > 0) {
        log(
          `remembered eventIds: ${damaged} damaged record(s) in ${this.file} (table event_ids) skipped: ${this.damaged.join('; ')}` +
            `${damaged > this.damaged.length ? `; ${damaged - this.damaged.length} more` : ''}; rebuilding the table from the log's last 48 h`,
        );
      }
      const { rebuilt, records } = await this.checkWithLog(now);
      if (damaged > 0 || rebuilt > 0) log(`remembered eventIds: checked against ${records} log records of the last 48 h; ${rebuilt} missing id(s) rebuilt from the log`);
    } catch (err) {
      log(`remembered eventIds: ${err instanceof Error ? err.message : String(err)} (in ${this.file}); eventIds are looked up in the store one by one`);
    } finally {
      this.ready = true;
    }
  }

  /** Until the startup check against the log is done, a write with eventIds waits for it (it might be a resend). */
  settled(): Promise<void> | undefined {
    return this.checking;
  }

  /** Writes to LMDB (and the table) every eventId of the log's window that the table lacks. */
  private async checkWithLog(now: number): Promise<{ rebuilt: number; records: number }> {
    const since = now - DEDUP_WINDOW_MS;
    let rebuilt = 0;
    let records = 0;
    let after: number | undefined;
    for (;;) {
      const missing: Array<{ p: string; eventId: string; rt: number }> = [];
      let n = 0;
      let more = false;
      const sliceEnd = performance.now() + PASS_SLICE_MS;
      for (const { seq, id } of this.fromLog(since, after)) {
        after = seq;
        // a fingerprint shared by chance could hide a missing id: after damage, a hit is confirmed in LMDB (ids are
        // written in the log append's transaction, so without damage none is missing)
        if (id && (!this.table.has(hash53(`${id.p}\u0000${id.eventId}`)) || (this.damagedCount > 0 && this.storedAt(id.p, id.eventId, now) === undefined))) missing.push(id);
        if (++n % CLOCK_EVERY === 0 && performance.now() > sliceEnd) {
          more = true;
          break;
        }
      }
      records += n;
      if (missing.length > 0) {
        for (let g = this.gate(); g; g = this.gate()) await g;
        await this.db.transaction(() => {
          for (const m of missing) this.db.putSync([m.p, m.eventId], m.rt);
        });
        for (const m of missing) this.remember(m.p, m.eventId);
        rebuilt += missing.length;
      }
      if (!more || this.stopped) break;
      await new Promise((resolve) => setImmediate(resolve));
    }
    return { rebuilt, records };
  }

  /**
   * Records from `start` on, each value decoded on its own: a damaged one carries its problem. Through the typed
   * handle: lmdb-js's binary-keyed handle mis-encoded a range start (and a lookup key) shorter than the key it wrote
   * before, so an expiry pass resumed there skipped ids (2,830 of 30,000 in a test), and they fell out of the table.
   */
  private *stored(start: IdKey | undefined): Generator<StoredId> {
    // Keys and values together (a lookup per key cost ~1.7 µs an id: 1.7 s of every start at 1M ids); a value that
    // does not decode stops the range, and the rest is read key by key from the last good one, so it is named.
    let last: IdKey | undefined;
    try {
      for (const { key, value } of this.db.getRange(start ? { start } : {}) as Iterable<{ key: unknown; value: unknown }>) {
        if (!isIdKey(key) || typeof value !== 'number' || !Number.isFinite(value)) {
          yield* this.storedOneByOne(key as IdKey);
          return;
        }
        last = key;
        yield { stored: key, key, rt: value, problem: undefined };
      }
    } catch {
      yield* this.storedOneByOne(last ?? start, last);
    }
  }

  /** `stored`, each value read on its own (after `skip`, the last record already handed out). */
  private *storedOneByOne(start: IdKey | undefined, skip?: IdKey): Generator<StoredId> {
    for (const stored of this.db.getKeys(start ? { start } : {}) as Iterable<unknown>) {
      if (skip && isIdKey(stored) && stored[0] === skip[0] && stored[1] === skip[1]) continue;
      let rt: unknown;
      let problem: string | undefined;
      if (!isIdKey(stored)) problem = 'its key is not a [project, eventId] pair';
      else {
        try {
          rt = this.db.get(stored);
        } catch (err) {
          problem = err instanceof Error ? err.message : String(err);
        }
      }
      if (!problem && (typeof rt !== 'number' || !Number.isFinite(rt))) problem = 'its receive time is not a number';
      if (problem) {
        if (this.damaged.length < DAMAGE_NAMED) this.damaged.push(`key ${JSON.stringify(stored)?.slice(0, 96)}: ${problem}`);
        this.damagedCount++;
        yield { stored, key: undefined, rt: Number.NaN, problem };
      } else yield { stored, key: stored as IdKey, rt: rt as number, problem: undefined };
    }
  }

  /**
   * Removes damaged records by their bytes: one pass over the table as bytes from its first key (a range started
   * elsewhere on that handle can skip keys, see stored), each record decoded on its own. Only after a pass met
   * damage, which is rare: it reads the whole table at once.
   */
  private async removeDamaged(): Promise<number> {
    const dead: Buffer[] = [];
    for (const { key, value } of this.raw.getRange({})) {
      let ok = false;
      try {
        const rt = (this.db as unknown as { encoder: { decode(b: Buffer): unknown } }).encoder.decode(value);
        ok = isIdKey(bufferToKeyValue(Buffer.from(key))) && typeof rt === 'number' && Number.isFinite(rt);
      } catch {
        ok = false;
      }
      if (!ok) dead.push(Buffer.from(key));
    }
    for (let g = this.gate(); g; g = this.gate()) await g;
    // the async remove finds a key by its bytes (removeSync on this handle did not, for most keys)
    for (const k of dead) await this.raw.remove(k);
    return dead.length;
  }

  /** The receive time stored for this id; a record that no longer decodes counts as just seen (never count twice). */
  private storedAt(projectId: string, eventId: string, now: number): number | undefined {
    try {
      return this.db.get([projectId, eventId]);
    } catch {
      return now;
    }
  }

  /** Ends background passes (before the store closes). */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.running.catch(() => {});
  }

  /** Fills the table from LMDB at once: only ids still inside the window at `now`. */
  load(now: number): number {
    const table = new FingerprintSet((this.db.getStats() as { entryCount: number }).entryCount);
    for (const { key, rt } of this.stored(undefined)) {
      if (key && now - rt < DEDUP_WINDOW_MS) table.add(hash53(`${key[0]}\u0000${key[1]}`));
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
  remember(projectId: string, eventId: string): void {
    const h = hash53(`${projectId}\u0000${eventId}`);
    this.table.add(h);
    this.addedDuringPass?.push(h);
  }

  /** Was `eventId` stored for the project within the de-duplication window at `now`? */
  has(projectId: string, eventId: string, now: number): boolean {
    if (!this.ready) {
      const rt = this.storedAt(projectId, eventId, now);
      return rt !== undefined && now - rt < DEDUP_WINDOW_MS;
    }
    if (!this.table.has(hash53(`${projectId}\u0000${eventId}`))) return false;
    const rt = this.storedAt(projectId, eventId, now);
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
   * Removes ids older than the window from LMDB, in slices that yield between them, and fills a new table with the
   * ids that stay in the same pass (a table has no delete); the new table replaces the old one when ids were removed
   * or `rebuild` asks for it (startup). One pass reads the ids once: a second pass to fill the table read every
   * remembered id again (~1 s of CPU after a start with 460,000 of them).
   */
  async expire(now: number, rebuild = false, sliceMs = PASS_SLICE_MS): Promise<number> {
    const pass = this.expirePass(now, rebuild, sliceMs);
    this.running = pass;
    return pass;
  }

  /** `sliceMs`: main-thread time per slice (tests pass 0: a new slice every CLOCK_EVERY records). */
  private async expirePass(now: number, rebuild: boolean, sliceMs: number): Promise<number> {
    let removed = 0;
    let damaged = 0;
    let start: IdKey | undefined;
    const table = new FingerprintSet();
    this.addedDuringPass = [];
    for (;;) {
      // expired ids go, and so do damaged records (they answer nothing; the log check puts their ids back)
      const expired: IdKey[] = [];
      let last: IdKey | undefined;
      let seen = 0;
      let more = false;
      const sliceEnd = performance.now() + sliceMs;
      // Slice by key: no read transaction is held across turns.
      for (const { stored, key, rt, problem } of this.stored(start)) {
        // the next slice starts at the last record handled here (handling it again changes nothing)
        if (++seen % CLOCK_EVERY === 0 && performance.now() > sliceEnd) {
          more = true;
          break;
        }
        last = stored as IdKey;
        if (problem || !key) damaged++;
        else if (now - rt >= DEDUP_WINDOW_MS) expired.push(key);
        else table.add(hash53(`${key[0]}\u0000${key[1]}`));
      }
      if (expired.length > 0) {
        for (let g = this.gate(); g; g = this.gate()) await g;
        // By the typed handle: removeSync on the binary-keyed one found most keys absent (22,533 of 25,000 expired
        // ids stayed in LMDB for good, and every start read them all again).
        await this.db.transaction(() => {
          for (const k of expired) this.db.removeSync(k);
        });
      }
      removed += expired.length;
      if (!more || !last || this.stopped) break;
      start = last;
      await new Promise((resolve) => setImmediate(resolve));
    }
    if (damaged > 0 && !this.stopped) removed += await this.removeDamaged();
    if ((removed > 0 || rebuild) && !this.stopped) {
      // Ids committed during the pass, behind where it read, are in LMDB but not in the new table: add what the old
      // table learned since the pass began.
      for (const h of this.addedDuringPass) table.add(h);
      this.table = table;
    }
    this.addedDuringPass = undefined;
    return removed;
  }
}
