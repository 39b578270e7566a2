import { rm } from 'node:fs/promises';
import { open, type Database, type RootDatabase } from 'lmdb';
import { MAP_SIZE, MAX_DBS, STRUCTURES_KEY, yieldTurn, type LmdbEnv } from './log-env.ts';
import type { LogReader } from './log-read.ts';
import { replaceFile } from './replace-file.ts';
import type { IdKey } from './remembered-ids.ts';

/** A compaction's catch-up transactions (writes made during the copy, copied into it) hold the copy's writer this long. */
const CATCH_UP_SLICE_MS = 20;
/** Catch-up rounds before the swap: each copies what the one before left; writes keep coming, so it is bounded. */
const CATCH_UP_ROUNDS = 5;
/** Entries left after which the last catch-up runs under the gate: a few hundred copy in a few milliseconds. */
const CATCH_UP_FINAL = 500;

/** The tables of the compacted copy a catch-up writes into, all as stored bytes. */
interface CopyTables {
  raw: Database<Buffer, number>;
  eventIds: Database<number, IdKey>;
  historyIds: Database<number, IdKey>;
  projects: Database<Buffer, string>;
  keys: Database<Buffer, string>;
  meta: Database<Buffer, string>;
}

/**
 * Online compaction of the environment, and the queue it shares with erasure: erasures and compactions run one at a
 * time, and an erasure ends with a compaction (LMDB keeps freed pages in the file until they are reused).
 */
export class LogCompaction {
  /** erasures and compactions, one at a time */
  private serial: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly env: LmdbEnv,
    private readonly reader: LogReader,
  ) {}

  /** Runs `fn` after every erasure and compaction queued before it. */
  serially<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.serial.then(fn);
    this.serial = run.catch(() => {});
    return run;
  }

  /** Compacts the environment online (see compactNow), after any erasure under way. */
  compact(): Promise<void> {
    return this.serially(() => this.compactNow());
  }

  /**
   * Copies the environment with compaction (live pages only, so nothing freed survives) while writes go on, then
   * swaps the copy in. LMDB's copy reads one snapshot, in a thread of its own; appends meanwhile go to the old file and
   * are copied over afterwards (their entries, from the sequence the copy began at, and the eventIds they carry), as
   * are the projects, keys and meta entries written meanwhile (each write records its key in `copying`). Writes that
   * are not on a request's path (sealed days, remembered-id upkeep, retention) wait for `copyGate` instead. Only the
   * last catch-up and the swap run under `gate`: appends wait for a few milliseconds, not for the copy.
   * Runs inside `serially` only (compact, or at the end of an erasure).
   */
  async compactNow(): Promise<void> {
    const env = this.env;
    const tmp = `${env.file}.compact`;
    let releaseCopy!: () => void;
    env.copyGate = new Promise<void>((r) => (releaseCopy = r));
    let target: RootDatabase | undefined;
    let freed: Promise<void> | undefined;
    try {
      // a copy a crash left behind: removed off the main thread (it can be as large as the log)
      await Promise.all([rm(tmp, { force: true }), rm(`${tmp}-lock`, { force: true })]);
      await env.root.transaction(() => {}); // every queued write is committed first
      await env.root.flushed;
      env.copying = { touched: new Set(), copied: env.lastKey() };
      await env.root.backup(tmp, true);
      target = open({ path: tmp, mapSize: MAP_SIZE, maxDbs: MAX_DBS, noSubdir: true });
      const to: CopyTables = {
        raw: target.openDB<Buffer, number>({ name: 'log', encoding: 'binary' }),
        eventIds: target.openDB<number, IdKey>({ name: 'event_ids' }),
        historyIds: target.openDB<number, IdKey>({ name: 'history_ids' }),
        projects: target.openDB<Buffer, string>({ name: 'projects', encoding: 'binary' }),
        keys: target.openDB<Buffer, string>({ name: 'keys', encoding: 'binary' }),
        meta: target.openDB<Buffer, string>({ name: 'meta', encoding: 'binary' }),
      };
      // catch up without the gate until what is left is small
      for (let round = 0; round < CATCH_UP_ROUNDS; round++) {
        if ((await this.catchUp(target, to, CATCH_UP_SLICE_MS)) <= CATCH_UP_FINAL) break;
      }
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      while (env.gate) await env.gate;
      env.gate = gate;
      try {
        await env.root.transaction(() => {}); // appends that passed the gate before it closed are committed
        await this.catchUp(target, to, Infinity);
        await target.close();
        target = undefined;
        // lmdb-js cannot open a path again while it is open in this process: close, swap the file, reopen.
        env.swapKeys = new Map([...env.keys.getRange()].map(({ key, value }) => [key, value]));
        env.swapping = true;
        await env.root.close();
        freed = replaceFile(tmp, env.file);
        env.open();
      } finally {
        env.swapping = false;
        env.swapKeys = undefined;
        env.gate = undefined;
        release();
      }
      // the old file (with what an erasure removed) is gone from the disk once this resolves
      await freed;
    } finally {
      env.copying = undefined;
      if (target) await target.close().catch(() => {});
      await Promise.all([rm(tmp, { force: true }), rm(`${tmp}-lock`, { force: true })]);
      env.copyGate = undefined;
      releaseCopy();
    }
  }

  /**
   * Copies into the compacted copy what was written to the live environment since the copy began (or since the last
   * catch-up): log entries after `copying.copied` with their eventIds, msgpackr's shared structures, and the projects,
   * keys and meta entries recorded in `copying.touched`. Transactions of at most `sliceMs` of work. Returns how many
   * entries and keys it copied.
   */
  private async catchUp(target: RootDatabase, to: CopyTables, sliceMs: number): Promise<number> {
    const env = this.env;
    const copying = env.copying!;
    let n = 0;
    for (let more = true; more; ) {
      more = false;
      await target.transaction(() => {
        const until = performance.now() + sliceMs;
        const structures = env.raw.get(STRUCTURES_KEY);
        if (structures !== undefined) to.raw.putSync(STRUCTURES_KEY, structures);
        for (const { key, value } of env.raw.getRange({ start: copying.copied + 1 })) {
          to.raw.putSync(key, value);
          const { records } = this.reader.entryRecords(key, value);
          for (const r of records ?? []) {
            if (r.t !== 'e' || r.eventId === undefined) continue;
            // history ids are kept for good in their own table; live ones in the 48-hour table, as the append wrote them
            if (r.h === 1) to.historyIds.putSync([r.p, r.eventId], 1);
            else to.eventIds.putSync([r.p, r.eventId], r.rt);
          }
          copying.copied = key;
          n++;
          if (performance.now() >= until) {
            more = true;
            return;
          }
        }
        const dbs = { projects: [env.projects, to.projects], keys: [env.keys, to.keys], meta: [env.meta, to.meta] } as const;
        for (const t of copying.touched) {
          const [db, key] = t.split('\u0000') as [keyof typeof dbs, string];
          const [from, into] = dbs[db];
          const bytes = (from as Database<unknown, string>).getBinary(key);
          if (bytes === undefined) into.removeSync(key);
          else into.putSync(key, bytes);
          n++;
        }
        copying.touched.clear();
      });
      if (more) await yieldTurn();
    }
    return n;
  }

  /**
   * Whether LMDB can be read now: false while a compaction swaps the file (a few ms). Synchronous readers of the
   * sealed store answer "unavailable, retry" then instead of failing.
   */
  readable(): boolean {
    return !this.env.swapping;
  }

  /** Resolves once no compaction is under way (writes wait for it anyway; a reader of event_ids waits here first). */
  async settled(): Promise<void> {
    while (this.env.gate) await this.env.gate;
  }
}
