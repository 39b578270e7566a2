import { mkdirSync, renameSync, rmSync } from 'node:fs';
import { crc32 } from 'node:zlib';
import path from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import type { ErasedRecord, LogRecord } from '../core/types.ts';

/**
 * The LMDB environment: the event log (the truth), projects, key hashes and salts. This folder is the only code
 * that imports lmdb.
 *
 * The log is keyed by an increasing integer sequence, so LMDB's key order is log order and a replay is one range
 * scan. Writes are asynchronous and lmdb-js groups every write of one event-loop turn into one transaction, so
 * durability costs one commit (and one fsync) per turn, not per event.
 */

export type Durability = 'flush' | 'commit';

export interface ProjectRecord {
  id: string;
  name: string;
  ownerId: string;
  allowedOrigins: string[];
  allowedReferrers: string[];
  timezone: string;
  monthlyQuota: number;
  createdAt: number;
  /** per-project token-bucket overrides (requests/s and burst); absent = service defaults */
  rate?: { perKey?: number; burstPerKey?: number; perIp?: number; burstPerIp?: number };
  /** eventParams keys counted per value (PATCH or create) */
  trackedProps?: string[];
}

export type KeyKind = 'admin' | 'secret' | 'publishable' | 'read';

export interface KeyRecord {
  kind: KeyKind;
  /** absent for admin keys */
  projectId?: string;
  ownerId: string;
  createdAt: number;
  /** public id of the key (`key_...`); keys stored before ids existed get one derived from their hash */
  id?: string;
  /** `sk_…abcd`: the prefix and last four characters, to tell keys apart in a list */
  hint?: string;
  /** ms since epoch after which the key answers 401; absent = never */
  expiresAt?: number;
}

/** A log entry whose event was erased (its project was deleted): it keeps the sequence, not the data. */
export const ERASED: ErasedRecord = { t: 'x' };

export interface Salt {
  day: string;
  key: string;
}

/** 1 TiB of address space: LMDB maps lazily, so this costs nothing until used and never needs a resize. */
const MAP_SIZE = 2 ** 40;
/**
 * Sequence numbers start at 1, so key 0 of the log holds msgpackr's shared structures: records are then written as
 * a structure id plus values instead of a map with every field name. A log record shrinks from ~330 to ~200 bytes
 * and decodes about twice as fast, which is what bounds a full replay (bench: `npm run bench`, startup.replay).
 * Logs written before this still decode (plain msgpack maps are always readable).
 */
const STRUCTURES_KEY = 0;
/** Meta entry listing deleted projects whose events are still to be erased. */
const PENDING_ERASURES = 'pending_erasures';
/** Erasure rewrites log entries in transactions of this many, so one delete never holds a giant transaction. */
const ERASE_BATCH = 10_000;

/**
 * lmdb-js rejects a failed commit's writes with 'Commit failed' and hangs the real cause on `error.commitError`, a
 * second promise rejected a moment later. Nobody awaited that one, so a full disk ended the process with an
 * unhandled rejection. This takes it over and returns the error with the cause in its message.
 */
function commitFailure(err: unknown): Error {
  const e = err instanceof Error ? err : new Error(String(err));
  const cause = (e as Error & { commitError?: Promise<unknown> }).commitError;
  if (cause && typeof cause.then === 'function') {
    cause.then(
      () => {},
      (why: unknown) => {
        e.message = `${e.message}: ${why instanceof Error ? why.message : String(why)}`;
      },
    );
  }
  return e;
}

/**
 * lmdb-js also writes on its own inside our transactions (msgpackr's shared structures, through a put whose promise
 * nobody holds), so a failed commit leaves rejections we cannot reach. Our own writes report the failure through the
 * promises we await, so these are noise; anything else still ends the process as Node would.
 */
let lmdbRejectionsContained = false;
function containLmdbRejections(log: (line: string) => void): void {
  if (lmdbRejectionsContained) return;
  lmdbRejectionsContained = true;
  process.on('unhandledRejection', (reason) => {
    const stack = reason instanceof Error ? (reason.stack ?? '') : '';
    if (/[\\/]lmdb[\\/]write\.js/.test(stack)) {
      log(`storage write failed (already reported to its caller): ${(reason as Error).message}`);
      return;
    }
    throw reason;
  });
}

/**
 * The log's on-disk format (2): one LMDB entry per appended batch, keyed by the batch's first sequence:
 *   [u8 kind: 2 = records, 3 = tombstone][u32 count][u32 crc32 of payload][payload: msgpack array of the records]
 * The count makes the sequence continuous (an entry must start where the previous one ended), the checksum catches
 * changed bytes. A tombstone keeps the count and drops the payload: erasing a deleted project's events replaces
 * each of its entries (one request = one project = one entry) with a tombstone of the same count, so continuity and
 * checksums still hold; readers see its sequences as ERASED markers.
 * One entry per batch shares msgpack's per-entry overhead and LMDB's per-key overhead across the batch.
 */
const FORMAT2_FROM_KEY = 'logFormat2From';
const KIND_RECORDS = 2;
const KIND_TOMBSTONE = 3;
const HEADER_BYTES = 9;

function encodeEntry(payload: Buffer, count: number, kind = KIND_RECORDS): Buffer {
  const out = Buffer.allocUnsafe(HEADER_BYTES + payload.length);
  out[0] = kind;
  out.writeUInt32BE(count, 1);
  out.writeUInt32BE(crc32(payload), 5);
  payload.copy(out, HEADER_BYTES);
  return out;
}

function decodeEntry(value: unknown, seq: number): { count: number; payload: Buffer; tombstone: boolean } {
  if (!Buffer.isBuffer(value) || value.length < HEADER_BYTES) throw new LogDamage(seq, 'entry is not a log entry (no header)');
  const kind = value[0];
  if (kind !== KIND_RECORDS && kind !== KIND_TOMBSTONE) throw new LogDamage(seq, `entry has an unknown kind ${kind}`);
  const count = value.readUInt32BE(1);
  const payload = value.subarray(HEADER_BYTES);
  if (count === 0) throw new LogDamage(seq, 'entry claims no records');
  if (crc32(payload) !== value.readUInt32BE(5)) throw new LogDamage(seq, 'checksum mismatch');
  return { count, payload, tombstone: kind === KIND_TOMBSTONE };
}

/** The log cannot be trusted from `seq` on. */
export class LogDamage extends Error {
  constructor(
    readonly seq: number,
    readonly reason: string,
  ) {
    super(`the event log is damaged at sequence ${seq}: ${reason}`);
  }
}

/** A fault injected into the store's writes, for tests of failing disks: return an error to make the write fail. */
export type StoreFault = (op: 'append' | 'write') => Error | undefined;

export class LogStore {
  /**
   * Set by tests to make writes fail inside the real LMDB transaction (the transaction aborts, exactly as on ENOSPC).
   * Not a mock: everything else runs for real.
   */
  fault: StoreFault | undefined;

  private root!: RootDatabase;
  private log!: Database<Buffer | LogRecord, number>;
  /** the log db's msgpack encoder (with its shared structures): a batch's records are one msgpack array */
  private codec!: { encode(v: unknown): Buffer; decode(b: Buffer): unknown };
  private projects!: Database<ProjectRecord, string>;
  private keys!: Database<KeyRecord, string>;
  private meta!: Database<unknown, string>;
  private nextSeq: number;
  private readonly file: string;
  /** set while the environment is being compacted: writes wait for it */
  private gate: Promise<void> | undefined;
  /** the keys, held in memory for the few milliseconds the environment is closed during a swap (auth keeps working) */
  private swapKeys: Map<string, KeyRecord> | undefined;

  private constructor(dataDir: string, private readonly durability: Durability, private readonly readOnly: boolean) {
    if (!readOnly) mkdirSync(dataDir, { recursive: true });
    this.file = path.join(dataDir, 'analytics.lmdb');
    this.openEnv();
    this.nextSeq = this.lastKey() + 1;
    // Entries below this sequence were written before format 2 (one msgpack record each, no checksum) and are read
    // as such; from here on every entry must be a checked format 2 entry. Recorded once, on the first open that
    // may write (a read-only tool on an old log only reads it).
    const recorded = this.meta.get(FORMAT2_FROM_KEY) as number | undefined;
    this.format2From = recorded ?? this.nextSeq;
    if (recorded === undefined && !readOnly) this.meta.putSync(FORMAT2_FROM_KEY, this.format2From);
  }

  private readonly format2From: number;

  private openEnv(): void {
    this.root = open({ path: this.file, mapSize: MAP_SIZE, maxDbs: 8, noSubdir: true, readOnly: this.readOnly });
    this.log = this.root.openDB<Buffer | LogRecord, number>({ name: 'log', sharedStructuresKey: STRUCTURES_KEY });
    this.codec = (this.log as unknown as { encoder: { encode(v: unknown): Buffer; decode(b: Buffer): unknown } }).encoder;
    this.projects = this.root.openDB<ProjectRecord, string>({ name: 'projects' });
    this.keys = this.root.openDB<KeyRecord, string>({ name: 'keys' });
    this.meta = this.root.openDB<unknown, string>({ name: 'meta' });
  }

  /**
   * `readOnly` opens an existing data directory for tools (export, check, backup) while the service may be running.
   * `log` receives storage write failures lmdb-js reports on its own (see containLmdbRejections).
   */
  static open(dataDir: string, durability: Durability, opts: { readOnly?: boolean; log?: (line: string) => void } = {}): LogStore {
    containLmdbRejections(opts.log ?? (() => {}));
    return new LogStore(dataDir, durability, opts.readOnly === true);
  }

  /** Sequence number of the newest record in the log (0 when empty). */
  lastSeq(): number {
    return this.nextSeq - 1;
  }

  /**
   * Appends records as one transaction and resolves with their first sequence number once they are committed
   * (and, in `flush` mode, on disk). Transactions run in call order, so sequence numbers follow call order too.
   * `extra` runs inside the same transaction (more writes that must commit with the records, or not at all).
   *
   * The sequence is taken from the log itself inside the transaction, not counted ahead: a commit that fails (a
   * full disk) leaves no gap for the next one. Writes inside use putSync: the transaction's one promise carries
   * the outcome (per-put promises of a failed commit used to reject with nobody listening, which killed the process).
   */
  async append(records: readonly LogRecord[], extra?: (firstSeq: number) => void): Promise<number> {
    let first = 0;
    if (this.gate) await this.gate; // a compaction is swapping the environment
    try {
      await this.log.transaction(() => {
        const fault = this.fault?.('append');
        if (fault) throw fault;
        first = this.lastKey() + 1;
        this.log.putSync(first, encodeEntry(this.codec.encode(records), records.length));
        extra?.(first);
        this.nextSeq = first + records.length;
      });
    } catch (err) {
      this.nextSeq = this.lastKey() + 1; // what is committed, whatever the failed transaction counted
      throw commitFailure(err);
    }
    if (this.durability === 'flush') await this.root.flushed;
    return first;
  }

  /** The last sequence in the log (0 when empty): the last entry's first sequence plus its count, less one. */
  private lastKey(): number {
    for (const { key, value } of this.log.getRange({ reverse: true, limit: 1 })) {
      if (key === STRUCTURES_KEY) return 0;
      return Buffer.isBuffer(value) && value.length >= HEADER_BYTES ? key + value.readUInt32BE(1) - 1 : key;
    }
    return 0;
  }

  /**
   * Records after `afterSeq`, in order, each entry verified as it is read: its checksum, and that it starts where the
   * previous one ended (or where the log starts: 1, or the retention marker `logStart`). The first problem throws a
   * LogDamage naming the first sequence that cannot be trusted; `verified` counts what passed.
   */
  *readAfter(afterSeq: number): Generator<{ seq: number; record: LogRecord }> {
    // the entry holding afterSeq + 1 starts at or before it
    let start = afterSeq + 1;
    for (const key of this.log.getKeys({ start: afterSeq + 1, reverse: true, limit: 1 })) if (key !== STRUCTURES_KEY) start = key;
    let expected = start === afterSeq + 1 && afterSeq === 0 ? this.logStart() : start;
    for (const { key, value } of this.log.getRange({ start })) {
      if (key === STRUCTURES_KEY) continue;
      if (key !== expected) {
        throw new LogDamage(Math.min(key, expected), `the log jumps from sequence ${expected - 1} to ${key}: ${key > expected ? key - expected : 'overlapping'} records missing`);
      }
      if (key < this.format2From && !Buffer.isBuffer(value)) {
        // a record of a log written before format 2: readable, not checkable
        expected = key + 1;
        if (key > afterSeq) yield { seq: key, record: value };
        continue;
      }
      const entry = decodeEntry(value, key);
      expected = key + entry.count;
      if (entry.tombstone) {
        // an erased batch: its sequences stay (as ERASED markers, so a fold moves past them), its records are gone
        this.verified += entry.count;
        for (let i = 0; i < entry.count; i++) if (key + i > afterSeq) yield { seq: key + i, record: ERASED };
        continue;
      }
      let records: LogRecord[];
      try {
        records = this.codec.decode(entry.payload) as LogRecord[];
      } catch (err) {
        throw new LogDamage(key, `entry does not decode: ${err instanceof Error ? err.message : String(err)}`);
      }
      if (!Array.isArray(records) || records.length !== entry.count) throw new LogDamage(key, 'entry holds a different number of records than its header says');
      this.verified += entry.count;
      for (let i = 0; i < records.length; i++) if (key + i > afterSeq) yield { seq: key + i, record: records[i]! };
    }
  }

  /** Entries, records and stored value bytes of the log (bench: bytes per event). */
  logSize(): { entries: number; records: number; bytes: number } {
    let entries = 0;
    let records = 0;
    let bytes = 0;
    for (const { key, value } of this.log.getRange({ start: 1 })) {
      entries++;
      if (Buffer.isBuffer(value) && value.length >= HEADER_BYTES) {
        records += value.readUInt32BE(1);
        bytes += value.length;
      }
      void key;
    }
    return { entries, records, bytes };
  }

  /** Records verified by readAfter since the store was opened (health reports the last verification). */
  verified = 0;

  /** Where the log starts: 1, or the first sequence kept after a deliberate retention cut (meta `logStart`). */
  logStart(): number {
    return (this.meta.get('logStart') as number | undefined) ?? 1;
  }

  countAfter(afterSeq: number): number {
    return Math.max(0, this.lastSeq() - afterSeq);
  }

  /**
   * A consistent online copy of the LMDB environment (LMDB's copy with compaction: a read transaction, so writers
   * go on meanwhile). Other processes may hold the environment open.
   */
  async backup(destFile: string): Promise<void> {
    await this.root.backup(destFile, true);
  }

  getProject(id: string): ProjectRecord | undefined {
    return this.projects.get(id);
  }

  listProjects(): ProjectRecord[] {
    return [...this.projects.getRange()].map((e) => e.value);
  }

  getKey(hash: string): KeyRecord | undefined {
    if (this.swapKeys) return this.swapKeys.get(hash);
    return this.keys.get(hash);
  }

  /** Every key of a project with its hash (a scan: keys are few, and this serves management calls only). */
  listKeys(projectId: string): Array<[string, KeyRecord]> {
    const out: Array<[string, KeyRecord]> = [];
    for (const { key, value } of this.keys.getRange()) if (value.projectId === projectId) out.push([key, value]);
    return out;
  }

  async deleteKey(hash: string): Promise<void> {
    if (this.gate) await this.gate;
    await this.keys.remove(hash);
    await this.root.flushed;
  }

  async updateProject(project: ProjectRecord): Promise<void> {
    if (this.gate) await this.gate;
    await this.projects.put(project.id, project);
    await this.root.flushed;
  }

  /** Deletes a project and all its keys in one transaction (its keys stop working at once). */
  async deleteProject(projectId: string): Promise<void> {
    if (this.gate) await this.gate;
    const keys = this.listKeys(projectId);
    await this.root.transaction(() => {
      void this.projects.remove(projectId);
      for (const [h] of keys) void this.keys.remove(h);
      // Remembered until its events are erased, so a crash in between resumes the erasure at the next start.
      void this.meta.put(PENDING_ERASURES, [...new Set([...this.pendingErasures(), projectId])]);
    });
    await this.root.flushed;
  }

  /** Projects deleted whose events are not erased yet (a crash interrupted the erasure). */
  pendingErasures(): string[] {
    return (this.meta.get(PENDING_ERASURES) as string[] | undefined) ?? [];
  }

  /**
   * Erases a project's records from the log. A format 2 entry holding only the project's records (every entry the
   * service writes: one request is one project) becomes a tombstone of the same count; an entry that mixes projects
   * (only tools write those) keeps its other records and gets ERASED markers in place of the project's; a record of
   * a log written before format 2 becomes a tombstone of one. Sequences, continuity and checksums stay valid.
   * LMDB is copy-on-write: the old pages stay in the file, on its free list, until they are reused, so the
   * environment is then compacted into a fresh file (only live pages are copied) that replaces the old one.
   * Returns how many records were erased.
   */
  async eraseProjectEvents(projectId: string, onProgress?: (done: number) => void): Promise<number> {
    if (this.gate) await this.gate;
    const ofProject = (r: LogRecord) => r.t !== 'x' && r.p === projectId;
    // 1. which entries hold the project's records (verified as read: erasure never rewrites a damaged entry)
    const keys: number[] = [];
    for (const { key, value } of this.log.getRange({ start: STRUCTURES_KEY + 1 })) {
      if (!Buffer.isBuffer(value)) {
        if (key < this.format2From && ofProject(value)) keys.push(key);
        continue;
      }
      const entry = decodeEntry(value, key);
      if (entry.tombstone) continue;
      if ((this.codec.decode(entry.payload) as LogRecord[]).some(ofProject)) keys.push(key);
    }
    // 2. rewrite them, ERASE_BATCH entries per transaction, each re-read inside its transaction
    let erased = 0;
    for (let i = 0; i < keys.length; i += ERASE_BATCH) {
      const part = keys.slice(i, i + ERASE_BATCH);
      await this.log.transaction(() => {
        for (const key of part) {
          const value = this.log.get(key);
          if (value === undefined) continue;
          if (!Buffer.isBuffer(value)) {
            this.log.putSync(key, encodeEntry(Buffer.alloc(0), 1, KIND_TOMBSTONE));
            erased++;
            continue;
          }
          const entry = decodeEntry(value, key);
          if (entry.tombstone) continue;
          const records = this.codec.decode(entry.payload) as LogRecord[];
          const mine = records.filter(ofProject).length;
          if (mine === 0) continue;
          erased += mine;
          const replacement =
            mine === records.length
              ? encodeEntry(Buffer.alloc(0), entry.count, KIND_TOMBSTONE)
              : encodeEntry(this.codec.encode(records.map((r) => (ofProject(r) ? ERASED : r))), entry.count);
          this.log.putSync(key, replacement);
        }
      });
      onProgress?.(i + part.length);
    }
    await this.meta.put(PENDING_ERASURES, this.pendingErasures().filter((id) => id !== projectId));
    await this.root.flushed;
    await this.compact();
    return erased;
  }

  /**
   * Copies the environment with compaction (live pages only, so nothing freed survives) and swaps the copy in.
   * Writes wait meanwhile; synchronous reads keep working on the old environment until the swap.
   */
  async compact(): Promise<void> {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    while (this.gate) await this.gate;
    this.gate = gate;
    const tmp = `${this.file}.compact`;
    try {
      rmSync(tmp, { force: true });
      await this.root.transaction(() => {}); // every queued write is committed first
      await this.root.flushed;
      await this.root.backup(tmp, true);
      // lmdb-js cannot open a path again while it is open in this process: close, swap the file, reopen.
      this.swapKeys = new Map([...this.keys.getRange()].map(({ key, value }) => [key, value]));
      await this.root.close();
      renameSync(tmp, this.file);
      this.openEnv();
    } finally {
      this.swapKeys = undefined;
      rmSync(tmp, { force: true });
      this.gate = undefined;
      release();
    }
  }

  /** Stores a project and its key hashes in one transaction. */
  async putProject(project: ProjectRecord, keyHashes: Array<[string, KeyRecord]>): Promise<void> {
    if (this.gate) await this.gate;
    await this.root.transaction(() => {
      void this.projects.put(project.id, project);
      for (const [h, rec] of keyHashes) void this.keys.put(h, rec);
    });
    await this.root.flushed;
  }

  async putKey(hash: string, record: KeyRecord): Promise<void> {
    if (this.gate) await this.gate;
    await this.keys.put(hash, record);
    await this.root.flushed;
  }

  /** Makes `hash` the only admin key: every other admin key record is deleted, in one transaction. */
  async replaceAdminKeys(hash: string, record: KeyRecord): Promise<void> {
    await this.root.transaction(() => {
      for (const { key, value } of this.keys.getRange()) {
        if (value.kind === 'admin' && key !== hash) void this.keys.remove(key);
      }
      void this.keys.put(hash, record);
    });
    await this.root.flushed;
  }

  /** Whether any admin key is stored. */
  hasAdminKey(): boolean {
    for (const { value } of this.keys.getRange()) if (value.kind === 'admin') return true;
    return false;
  }

  getMeta<T>(key: string): T | undefined {
    return this.meta.get(key) as T | undefined;
  }

  async putMeta(key: string, value: unknown): Promise<void> {
    if (this.gate) await this.gate;
    await this.meta.put(key, value);
    await this.root.flushed;
  }

  loadSalts(): Salt[] {
    return (this.meta.get('salts') as Salt[] | undefined) ?? [];
  }

  async saveSalts(salts: Salt[]): Promise<void> {
    if (this.gate) await this.gate;
    await this.meta.put('salts', salts);
    await this.root.flushed;
  }

  /** A tiny write that proves the store still accepts writes (health). */
  async probeWrite(now: number): Promise<void> {
    if (this.gate) await this.gate;
    try {
      await this.meta.transaction(() => {
        const fault = this.fault?.('write');
        if (fault) throw fault;
        this.meta.putSync('probe', now);
      });
      await this.root.flushed;
    } catch (err) {
      throw commitFailure(err);
    }
  }

  async close(): Promise<void> {
    await this.root.close();
  }
}
