import { open, type Database, type RootDatabase } from 'lmdb';
import type { LogRecord } from '../../core/types.ts';
import type { KeyRecord, ProjectRecord } from '../records.ts';
import { entryCount } from './log-entry-format.ts';
import type { IdKey } from './remembered-ids.ts';

/**
 * The LMDB environment of a data directory (`analytics.lmdb`): the event log (the truth), projects, key hashes, salts
 * and meta entries, the remembered and history eventIds, sealed days. This folder is the only code that imports lmdb.
 *
 * The log is keyed by an increasing integer sequence, so LMDB's key order is log order and a replay is one range
 * scan. Writes are asynchronous and lmdb-js groups every write of one event-loop turn into one transaction, so
 * durability costs one commit (and one fsync) per turn, not per event.
 *
 * LmdbEnv is the one handle the parts of the log store share (append and read, dictionaries, retention, erasure,
 * compaction, catalog tables, health): a compaction swaps the file and reopens every table here, so each part reads
 * the current table from this holder instead of keeping its own, and waits at the gates set here.
 */

/** 1 TiB of address space: LMDB maps lazily, so this costs nothing until used and never needs a resize. */
export const MAP_SIZE = 2 ** 40;
/** Named tables of the environment (log, projects, keys, meta, both eventId tables, sealed days and months), with room. */
export const MAX_DBS = 16;
/**
 * Sequence numbers start at 1, so key 0 of the log holds msgpackr's shared structures: records are then written as
 * a structure id plus values instead of a map with every field name. A log record shrinks from ~330 to ~200 bytes
 * and decodes about twice as fast, which is what bounds a full replay (bench: `npm run bench`, startup.replay).
 * Logs written before this still decode (plain msgpack maps are always readable).
 */
export const STRUCTURES_KEY = 0;
/** Meta entry: the first sequence kept after a retention cut (absent: the log starts at 1). */
export const LOG_START = 'logStart';

export const yieldTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** A fault injected into the store's writes, for tests of failing disks: return an error to make the write fail. */
export type StoreFault = (op: 'append' | 'write') => Error | undefined;

/**
 * What tests of failing disks pass to LogStore.open: while `fault` is set, every write asks it inside the real LMDB
 * transaction, and an error it returns aborts that transaction, exactly as ENOSPC does. Not a mock: everything else
 * runs for real.
 */
export interface StoreFaults {
  fault: StoreFault | undefined;
}

/**
 * msgpackr's RESET_BUFFER_MODE: the next encode writes over these bytes, so its buffer is reused instead of moving on
 * and allocating a new one each time it fills. For bytes read at once (an entry is compressed right after): without
 * it an import left ~100 bytes of array buffers an event for the garbage collector.
 */
export const TRANSIENT_ENCODING = 1024;

/**
 * Thrown out of an encode while the log codec defers structure saves (LmdbEnv.deferStructures): the records need a
 * shared structure not stored yet. Nothing is saved; the encode is redone inside a write transaction.
 */
export class StructureSaveDeferred extends Error {
  constructor() {
    super('a new shared structure is saved inside a write transaction');
  }
}

/** msgpackr's side of the codec that structure saves go through (lmdb-js gives it saveStructures). */
interface SharedStructures {
  saveStructures?: (structures: unknown, isCompatible: unknown) => unknown;
  structures?: { uninitialized?: boolean };
}

/** The log db's msgpack encoder (with its shared structures): a batch's records are one msgpack array. */
export interface LogCodec {
  /** `mode` TRANSIENT_ENCODING: the bytes are read before the next encode (see there) */
  encode(v: unknown, mode?: number): Buffer;
  decode(b: Buffer, end?: number): unknown;
}

export class LmdbEnv {
  root!: RootDatabase;
  /** the log through the msgpack encoder: msgpackr's shared structures (key 0), first-format records */
  log!: Database<Buffer | LogRecord, number>;
  /** the same database read and written as bytes: entries as stored */
  raw!: Database<Buffer, number>;
  codec!: LogCodec;
  projects!: Database<ProjectRecord, string>;
  keys!: Database<KeyRecord, string>;
  meta!: Database<unknown, string>;
  /** [project, eventId] -> receive time, written with the events (see remembered-ids.ts) */
  eventIds!: Database<number, IdKey>;
  /** the same table as stored bytes (keys and values), so one damaged record is named and skipped, not fatal */
  eventIdsRaw!: Database<Buffer, Buffer>;
  /** [project, eventId] -> 1 for history, kept for good (see history-ids.ts) */
  historyIdsDb!: Database<number, IdKey>;
  /** the meta `logStart` marker, read once (only this store moves it) */
  start = 1;
  /** set for the few milliseconds a compaction copies the last writes and swaps the file: writes wait for it */
  gate: Promise<void> | undefined;
  /** set while a compaction copies the environment: writes off the request path (sealing, upkeep, retention) wait */
  copyGate: Promise<void> | undefined;
  /** while a compaction copies: the last log entry in the copy, and the projects, keys and meta keys written since */
  copying: { touched: Set<string>; copied: number } | undefined;
  /**
   * Set around an encode outside any write transaction (LogAppender's early encode): a new shared structure is then
   * not saved in a write transaction of its own, which would wait on the main thread behind the commit in flight
   * (its sync takes 100–700 ms on a slow disk at times); the encode throws StructureSaveDeferred instead.
   */
  deferStructures = false;
  /** true for the few milliseconds the environment is closed during a swap: LMDB reads would throw */
  swapping = false;
  /** the keys, held in memory for the few milliseconds the environment is closed during a swap (auth keeps working) */
  swapKeys: Map<string, KeyRecord> | undefined;
  /** what else holds this environment's handles, told after each open (see onOpen) */
  private readonly reopened: Array<() => void> = [];

  constructor(
    /** the environment's file, `<dataDir>/analytics.lmdb` */
    readonly file: string,
    readonly readOnly: boolean,
    /** tests of failing disks: asked before each write (absent in service) */
    readonly faults?: StoreFaults | undefined,
  ) {
    this.open();
  }

  /** Opens the file and every table (again, after a compaction swapped the file), then tells whoever asked (onOpen). */
  open(): void {
    this.root = open({ path: this.file, mapSize: MAP_SIZE, maxDbs: MAX_DBS, noSubdir: true, readOnly: this.readOnly });
    this.log = this.root.openDB<Buffer | LogRecord, number>({ name: 'log', sharedStructuresKey: STRUCTURES_KEY });
    this.raw = this.root.openDB<Buffer, number>({ name: 'log', encoding: 'binary' });
    this.codec = (this.log as unknown as { encoder: LogCodec }).encoder;
    this.deferStructureSaves(this.codec as unknown as SharedStructures);
    this.projects = this.root.openDB<ProjectRecord, string>({ name: 'projects' });
    this.keys = this.root.openDB<KeyRecord, string>({ name: 'keys' });
    this.meta = this.root.openDB<unknown, string>({ name: 'meta' });
    this.eventIds = this.root.openDB<number, IdKey>({ name: 'event_ids' });
    this.eventIdsRaw = this.root.openDB<Buffer, Buffer>({ name: 'event_ids', encoding: 'binary', keyEncoding: 'binary' });
    this.historyIdsDb = this.root.openDB<number, IdKey>({ name: 'history_ids' });
    this.start = (this.meta.get(LOG_START) as number | undefined) ?? 1;
    for (const fn of this.reopened) fn();
  }

  /**
   * While deferStructures is set, a structure save declines as msgpackr's own declined save does (its structures are
   * marked uninitialized, so the next encode reloads the stored ones and mints the new one again) and throws.
   */
  private deferStructureSaves(codec: SharedStructures): void {
    const save = codec.saveStructures;
    if (!save) return;
    codec.saveStructures = (structures, isCompatible) => {
      if (!this.deferStructures) return save.call(codec, structures, isCompatible);
      if (codec.structures) codec.structures.uninitialized = true;
      throw new StructureSaveDeferred();
    };
  }

  /** Runs `fn` after every later open: holders of handles or of state read from the file take the new ones. */
  onOpen(fn: () => void): void {
    this.reopened.push(fn);
  }

  /** Records a write of projects, keys or meta while a compaction copies (see LogCompaction). */
  touch(db: 'projects' | 'keys' | 'meta', key: string): void {
    this.copying?.touched.add(`${db}\u0000${key}`);
  }

  /** The last sequence in the log (0 when empty): the last entry's first sequence plus its count, less one. */
  lastKey(): number {
    // a log that retention emptied still continues after its start
    const floor = this.start - 1;
    for (const { key, value } of this.raw.getRange({ reverse: true, limit: 1 })) {
      if (key === STRUCTURES_KEY) return floor;
      return Math.max(floor, key + entryCount(value) - 1);
    }
    return floor;
  }
}
