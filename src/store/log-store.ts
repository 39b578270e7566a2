import { mkdirSync, renameSync, rmSync } from 'node:fs';
import { crc32 } from 'node:zlib';
import path from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import type { ErasedRecord, LogRecord } from '../core/types.ts';
import { RememberedIds, type IdKey } from './remembered-ids.ts';
import { SealedStore } from './sealed-store.ts';

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
/** Records removed per retention transaction: keeps each commit short. */
const DELETE_SLICE = 10_000;
/** Meta entry: the first sequence kept after a retention cut (absent: the log starts at 1). */
const LOG_START = 'logStart';

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

/** How many sequences an entry covers (a record of a log written before format 2 covers one). */
function entryCount(value: unknown): number {
  return Buffer.isBuffer(value) && value.length >= HEADER_BYTES ? value.readUInt32BE(1) : 1;
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
  /** [project, eventId] -> receive time, written with the events (see remembered-ids.ts) */
  private eventIds!: Database<number, IdKey>;
  /** opened once; given the new handles when a compaction reopens the environment */
  private rememberedIds: RememberedIds | undefined;
  private sealedStore: SealedStore | undefined;
  private nextSeq: number;
  private readonly file: string;
  /** set while the environment is being compacted: writes wait for it */
  private gate: Promise<void> | undefined;
  /** true for the few milliseconds the environment is closed during a swap: LMDB reads would throw */
  private swapping = false;
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
    this.root = open({ path: this.file, mapSize: MAP_SIZE, maxDbs: 16, noSubdir: true, readOnly: this.readOnly });
    this.log = this.root.openDB<Buffer | LogRecord, number>({ name: 'log', sharedStructuresKey: STRUCTURES_KEY });
    this.codec = (this.log as unknown as { encoder: { encode(v: unknown): Buffer; decode(b: Buffer): unknown } }).encoder;
    this.projects = this.root.openDB<ProjectRecord, string>({ name: 'projects' });
    this.keys = this.root.openDB<KeyRecord, string>({ name: 'keys' });
    this.meta = this.root.openDB<unknown, string>({ name: 'meta' });
    this.eventIds = this.root.openDB<number, IdKey>({ name: 'event_ids' });
    this.rememberedIds?.reopen(this.eventIds);
    this.sealedStore?.reopen(this.root);
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
    // a log that retention emptied still continues after its start
    const floor = this.logStart() - 1;
    for (const { key, value } of this.log.getRange({ reverse: true, limit: 1 })) {
      if (key === STRUCTURES_KEY) return floor;
      return Math.max(floor, key + entryCount(value) - 1);
    }
    return floor;
  }

  /**
   * Records after `afterSeq`, in order, each entry verified as it is read: its checksum, and that it starts where the
   * previous one ended (or where the log starts: 1, or the retention marker `logStart`). The first problem throws a
   * LogDamage naming the first sequence that cannot be trusted; `verified` counts what passed.
   */
  *readAfter(afterSeq: number): Generator<{ seq: number; record: LogRecord }> {
    // the entry holding afterSeq + 1 starts at or before it
    // (never below the log's start: entries a crashed retention cut left there are not part of the log)
    const logStart = this.logStart();
    const from = Math.max(afterSeq + 1, logStart);
    let start = from;
    for (const key of this.log.getKeys({ start: from, reverse: true, limit: 1 })) if (key !== STRUCTURES_KEY && key >= logStart) start = key;
    let expected = start;
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

  /** First sequences of the log's entries (one appended batch each) from `fromSeq` on: LmdbEventLog groups by them. */
  *entryStarts(fromSeq: number): Generator<number> {
    for (const key of this.log.getKeys({ start: Math.max(fromSeq, STRUCTURES_KEY + 1) })) yield key;
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
    return (this.meta.get(LOG_START) as number | undefined) ?? 1;
  }

  /**
   * Retention: removes the entries wholly below `seq` (a format 2 entry holds a batch and goes whole, so the log
   * then starts at the first entry reaching `seq` or beyond), in slices. The `logStart` marker is written first, so a
   * crash midway leaves a log that says where it starts (entries left below it are skipped and removed next time).
   * Key 0 (msgpackr's shared structures) stays. Returns how many records were removed.
   */
  async deleteBelow(seq: number): Promise<number> {
    if (this.gate) await this.gate;
    const start = this.logStart();
    if (seq <= start) return 0;
    let cut = start;
    for (const { key, value } of this.log.getRange({ start })) {
      if (key === STRUCTURES_KEY) continue;
      const end = key + entryCount(value);
      if (end > seq) break;
      cut = end;
    }
    if (cut <= start) return 0;
    await this.meta.put(LOG_START, cut);
    await this.root.flushed;
    for (;;) {
      const keys = [...this.log.getKeys({ start: STRUCTURES_KEY + 1, end: cut, limit: DELETE_SLICE })];
      if (keys.length === 0) break;
      await this.log.transaction(() => {
        for (const key of keys) this.log.removeSync(key);
      });
    }
    await this.root.flushed;
    return cut - start;
  }

  /**
   * Repair (`analytics repair`, an explicit operator action on a stopped service): removes the log entry at `seq`
   * (the first one that failed verification) and every entry after it, in one transaction, so the log ends where it
   * was last trustworthy and stays continuous. The eventIds those records carried are forgotten in the same
   * transaction (a resend must count again, not be taken for a duplicate): those of every removed entry that still
   * decodes, and every remembered id received after the newest kept record (covers the damaged entry's own ids,
   * which cannot be read). Returns the removed sequence range (`from` > `to` when nothing went).
   */
  async cutFrom(seq: number): Promise<{ from: number; to: number; forgottenIds: number }> {
    if (this.gate) await this.gate;
    const before = this.lastSeq();
    let forgottenIds = 0;
    await this.root.transaction(() => {
      // the newest receive time the kept log holds (the entry just before the cut; the log is in receive order)
      let keptRt = -Infinity;
      for (const { key, value } of this.log.getRange({ start: seq - 1, reverse: true, limit: 1 })) {
        if (key === STRUCTURES_KEY) break;
        const recs = Buffer.isBuffer(value) ? (this.codec.decode(decodeEntry(value, key).payload) as LogRecord[]) : [value];
        for (const r of recs) if ('rt' in r && typeof r.rt === 'number') keptRt = Math.max(keptRt, r.rt);
      }
      const forget = new Set<string>();
      const ids: IdKey[] = [];
      for (const { key, value } of this.log.getRange({ start: Math.max(seq, STRUCTURES_KEY + 1) })) {
        let recs: LogRecord[] = [];
        try {
          recs = Buffer.isBuffer(value) ? (this.codec.decode(decodeEntry(value, key).payload) as LogRecord[]) : [value];
        } catch {
          // the damaged entry: its ids are caught by the receive-time sweep below
        }
        for (const r of Array.isArray(recs) ? recs : []) {
          if (r.t === 'e' && r.eventId !== undefined && !forget.has(`${r.p}\u0000${r.eventId}`)) {
            forget.add(`${r.p}\u0000${r.eventId}`);
            ids.push([r.p, r.eventId]);
          }
        }
        this.log.removeSync(key);
      }
      for (const { key, value } of this.eventIds.getRange()) {
        if (value > keptRt && !forget.has(`${key[0]}\u0000${key[1]}`)) ids.push(key);
      }
      for (const k of ids) if (this.eventIds.removeSync(k)) forgottenIds++;
    });
    await this.root.flushed;
    this.nextSeq = this.lastKey() + 1;
    return { from: this.nextSeq, to: before, forgottenIds };
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
    // Its remembered eventIds (keys hold the project id and its event ids), sealed days and month rollups.
    const ids: IdKey[] = [];
    for (const k of this.eventIds.getKeys({ start: [projectId], end: [`${projectId}\u0000`] })) if (k[0] === projectId) ids.push(k);
    for (let i = 0; i < ids.length; i += ERASE_BATCH) {
      const part = ids.slice(i, i + ERASE_BATCH);
      await this.root.transaction(() => {
        for (const k of part) void this.eventIds.remove(k);
      });
    }
    const sealed = this.openSealedStore();
    await this.root.transaction(() => {
      sealed.removeProject(projectId);
    });
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
      this.swapping = true;
      await this.root.close();
      renameSync(tmp, this.file);
      this.openEnv();
    } finally {
      this.swapping = false;
      this.swapKeys = undefined;
      rmSync(tmp, { force: true });
      this.gate = undefined;
      release();
    }
  }

  /**
   * Whether LMDB can be read now: false while a compaction swaps the file (a few ms). Synchronous readers of the
   * sealed store answer "unavailable, retry" then instead of failing.
   */
  readable(): boolean {
    return !this.swapping;
  }

  /** Resolves once no compaction is under way (writes wait for it anyway; a reader of event_ids waits here first). */
  async settled(): Promise<void> {
    while (this.gate) await this.gate;
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

  /** The remembered eventIds (see remembered-ids.ts). */
  openRememberedIds(): RememberedIds {
    return (this.rememberedIds ??= new RememberedIds(this.eventIds, () => this.gate));
  }

  /** Sealed days and month rollups, in this environment (see sealed-store.ts). */
  openSealedStore(): SealedStore {
    return (this.sealedStore ??= new SealedStore(this.root, () => this.gate));
  }

  async close(): Promise<void> {
    await this.root.close();
  }
}
