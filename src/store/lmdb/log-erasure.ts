import { crc32 } from 'node:zlib';
import type { LogRecord } from '../../core/types.ts';
import { ERASED } from '../records.ts';
import { PENDING_ERASURES, type CatalogTables } from './catalog-tables.ts';
import type { HistoryIds } from './history-ids.ts';
import type { LogCompaction } from './log-compaction.ts';
import type { LogDictionaries } from './log-dictionaries.ts';
import { encodePacked, entryCount, tombstone } from './log-entry-format.ts';
import { STRUCTURES_KEY, TRANSIENT_ENCODING, yieldTurn, type LmdbEnv } from './log-env.ts';
import type { LogReader } from './log-read.ts';
import type { IdKey } from './remembered-ids.ts';
import type { SealedStore } from './sealed-store.ts';

/**
 * Erasure works in slices of this long (a scan step, one rewrite transaction, one batch of eventId removals) and
 * yields between them. An append waits for the slice under way at each of its turns on the main thread (its
 * transaction's callback, its commit, its flush, the answer): about four slices, so 2 ms keeps that under 10 ms of CPU,
 * while the yields between slices cost about 1 % of the erasure's time.
 */
const ERASE_SLICE_MS = 2;

export interface EraseOptions {
  onProgress?: (done: number) => void;
  stopped?: () => boolean;
}

/** Erases a deleted project from the environment: its log records, dictionaries, eventIds and sealed days. */
export class LogErasure {
  constructor(
    private readonly env: LmdbEnv,
    private readonly dicts: LogDictionaries,
    private readonly reader: LogReader,
    private readonly compaction: LogCompaction,
    private readonly catalog: CatalogTables,
    /** the opened-once tables of the environment the erasure also clears */
    private readonly tables: { historyIds(): HistoryIds; sealed(): SealedStore },
  ) {}

  /**
   * Erases a project's records from the log. An entry holding only the project's records (every entry the service
   * writes: one request is one project) becomes a tombstone of the same count; an entry that mixes projects (only
   * tools write those) keeps its other records and gets ERASED markers in place of the project's; a record of a log
   * written before format 2 becomes a tombstone of one. Sequences, continuity and checksums stay valid. Log
   * dictionaries that hold the project's records are dropped, and the entries compressed with them are compressed
   * again with a new dictionary built without the project's records.
   * The work runs in slices of ERASE_SLICE_MS (the scan, each rewrite transaction, the remembered eventIds), yielding
   * between them, so appends of other projects interleave and no write transaction is long. LMDB is copy-on-write:
   * the old pages stay in the file, on its free list, until they are reused, so the environment is then compacted
   * online (LogCompaction). The project stays on the pending list until the caller says every file is clean
   * (erasureDone): a crash anywhere before resumes the erasure at the next start. `stopped` ends it early between
   * slices (shutdown).
   * Returns how many records were erased.
   */
  eraseProjectEvents(projectId: string, opts: EraseOptions = {}): Promise<number> {
    return this.compaction.serially(() => this.eraseNow(projectId, opts));
  }

  private async eraseNow(projectId: string, opts: EraseOptions): Promise<number> {
    const env = this.env;
    if (env.gate) await env.gate;
    const stopped = opts.stopped ?? (() => false);
    const ofProject = (r: LogRecord) => r.t !== 'x' && r.p === projectId;
    const tainted = this.dicts.holding(projectId);
    // 0. a dictionary without the project first, so appends from now on and the rewrites below use it
    if (tainted.size > 0) await this.dicts.replaceWithout(projectId, ERASE_SLICE_MS);
    // 1. which entries hold the project's records or use a dictionary that does (verified as read: erasure never
    // rewrites a damaged entry); a fresh range per slice, so no read transaction is held across turns
    const keys: number[] = [];
    // per key: the crc32 and length of the stored bytes when every record of the entry is the project's (the rewrite
    // then writes its tombstone after checking the bytes are unchanged, without decoding them again), else -1
    const whole: number[] = [];
    const lengths: number[] = [];
    let scanned = STRUCTURES_KEY;
    for (let done = false; !done; ) {
      if (stopped()) return 0;
      const until = performance.now() + ERASE_SLICE_MS;
      done = true;
      for (const { key, value } of env.raw.getRange({ start: scanned + 1 })) {
        scanned = key;
        const { records, entry } = this.reader.entryRecords(key, value);
        if (records !== undefined && (records.some(ofProject) || (entry !== undefined && tainted.has(entry.dictId)))) {
          keys.push(key);
          const all = records.every(ofProject);
          whole.push(all ? crc32(value) : -1);
          lengths.push(all ? value.length : -1);
        }
        if (performance.now() >= until) {
          done = false;
          break;
        }
      }
      if (!done) await yieldTurn();
    }
    // 2. rewrite them in transactions of at most ERASE_SLICE_MS of work each, each entry re-read inside its transaction:
    // one the scan found wholly the project's becomes a tombstone if its bytes are still those (crc32 and length, a few
    // microseconds), any other is decoded again
    let erased = 0;
    const rewrite = (key: number, sum = -1, length = -1): void => {
      const value = env.raw.get(key);
      if (value === undefined) return;
      if (sum >= 0 && value.length === length && crc32(value) === sum) {
        // the bytes the scan verified and found wholly the project's
        const count = entryCount(value);
        erased += count;
        env.raw.putSync(key, tombstone(count));
        return;
      }
      const { count, records, entry } = this.reader.entryRecords(key, value);
      if (records === undefined) return;
      const mine = records.filter(ofProject).length;
      if (mine === 0 && !(entry !== undefined && tainted.has(entry.dictId))) return;
      erased += mine;
      if (mine === records.length) {
        env.raw.putSync(key, tombstone(count));
        return;
      }
      const { id, dict } = this.dicts.newestWithout(tainted);
      env.raw.putSync(key, encodePacked(env.codec.encode(records.map((r) => (ofProject(r) ? ERASED : r)), TRANSIENT_ENCODING), count, id, dict));
    };
    for (let i = 0; i < keys.length; ) {
      if (stopped()) return erased;
      if (env.gate) await env.gate;
      await env.log.transaction(() => {
        const until = performance.now() + ERASE_SLICE_MS;
        do {
          rewrite(keys[i]!, whole[i]!, lengths[i]!);
          i++;
        } while (i < keys.length && performance.now() < until);
      });
      opts.onProgress?.(i);
      await yieldTurn();
    }
    // 3. in one transaction (no append between): entries appended since the scan, then the dictionaries go
    if (tainted.size > 0) {
      await env.log.transaction(() => {
        for (const key of env.raw.getKeys({ start: scanned + 1 })) rewrite(key);
        this.dicts.drop(tainted);
      });
    }
    // Its remembered eventIds (keys hold the project id and its event ids), sliced the same way, then sealed days and
    // month rollups.
    for (;;) {
      if (stopped()) return erased;
      const part: IdKey[] = [];
      const until = performance.now() + ERASE_SLICE_MS / 2;
      for (const k of env.eventIds.getKeys({ start: [projectId], end: [`${projectId}\u0000`] })) {
        if (k[0] === projectId) part.push(k);
        if (performance.now() >= until) break;
      }
      if (part.length === 0) break;
      if (env.gate) await env.gate;
      await env.root.transaction(() => {
        for (const k of part) env.eventIds.removeSync(k);
      });
      await yieldTurn();
    }
    // Its history ids, in slices (an import may have left millions): no transaction holds them all.
    const history = this.tables.historyIds();
    for (;;) {
      if (stopped()) return erased;
      const part: IdKey[] = [];
      const until = performance.now() + ERASE_SLICE_MS / 2;
      for (const k of history.keysOf(projectId)) {
        part.push(k);
        if (performance.now() >= until) break;
      }
      if (part.length === 0) break;
      if (env.gate) await env.gate;
      await env.root.transaction(() => {
        for (const k of part) void env.historyIdsDb.remove(k);
      });
      await yieldTurn();
    }
    const sealed = this.tables.sealed();
    await env.root.transaction(() => {
      sealed.removeProject(projectId);
    });
    await env.root.flushed;
    if (stopped()) return erased;
    await this.compaction.compactNow();
    return erased;
  }

  /**
   * Takes a project off the pending-erasure list: called once every file is clean of it (log, columns, snapshots), so
   * a crash anywhere before finds it pending and erases (and compacts) again at the next start.
   */
  async erasureDone(projectId: string): Promise<void> {
    const env = this.env;
    if (env.gate) await env.gate;
    env.touch('meta', PENDING_ERASURES);
    await env.meta.put(PENDING_ERASURES, this.catalog.pendingErasures().filter((id) => id !== projectId));
    await env.root.flushed;
  }
}
