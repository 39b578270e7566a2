import { mkdirSync, renameSync, rmSync } from 'node:fs';
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
/** Erasure rewrites entries in transactions of this many, so one delete never holds a giant transaction. */
const ERASE_BATCH = 10_000;

export class LogStore {
  private root!: RootDatabase;
  private log!: Database<LogRecord, number>;
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
    let last = 0;
    for (const key of this.log.getKeys({ reverse: true, limit: 1 })) last = key;
    this.nextSeq = last + 1;
  }

  private openEnv(): void {
    this.root = open({ path: this.file, mapSize: MAP_SIZE, maxDbs: 8, noSubdir: true, readOnly: this.readOnly });
    this.log = this.root.openDB<LogRecord, number>({ name: 'log', sharedStructuresKey: STRUCTURES_KEY });
    this.projects = this.root.openDB<ProjectRecord, string>({ name: 'projects' });
    this.keys = this.root.openDB<KeyRecord, string>({ name: 'keys' });
    this.meta = this.root.openDB<unknown, string>({ name: 'meta' });
  }

  /** `readOnly` opens an existing data directory for tools (export, check) while the service may be running. */
  static open(dataDir: string, durability: Durability, opts: { readOnly?: boolean } = {}): LogStore {
    return new LogStore(dataDir, durability, opts.readOnly === true);
  }

  /** Sequence number of the newest record in the log (0 when empty). */
  lastSeq(): number {
    return this.nextSeq - 1;
  }

  /**
   * Appends records as one transaction and resolves with their first sequence number once they are committed
   * (and, in `flush` mode, on disk). Sequence numbers are assigned synchronously, in call order.
   */
  async append(records: readonly LogRecord[]): Promise<number> {
    const first = this.nextSeq;
    this.nextSeq += records.length;
    if (this.gate) await this.gate;
    await this.log.transaction(() => {
      for (let i = 0; i < records.length; i++) void this.log.put(first + i, records[i]!);
    });
    if (this.durability === 'flush') await this.root.flushed;
    return first;
  }

  /** Records after `afterSeq`, in order. */
  *readAfter(afterSeq: number): Generator<{ seq: number; record: LogRecord }> {
    for (const { key, value } of this.log.getRange({ start: afterSeq + 1 })) yield { seq: key, record: value };
  }

  /** Every entry key of the log in order (without the shared-structures entry), for continuity checks. */
  *sequences(): Generator<number> {
    for (const key of this.log.getKeys({ start: STRUCTURES_KEY + 1 })) yield key;
  }

  countAfter(afterSeq: number): number {
    return this.log.getCount({ start: afterSeq + 1 });
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
   * Replaces each log entry of a project with an ERASED marker (the sequence stays continuous, the data goes).
   * LMDB is copy-on-write: the old pages stay in the file, on its free list, until they are reused, so the
   * environment is then compacted into a fresh file (only live pages are copied) that replaces the old one.
   * Returns how many log entries were erased.
   */
  async eraseProjectEvents(projectId: string, onProgress?: (done: number) => void): Promise<number> {
    if (this.gate) await this.gate;
    const seqs: number[] = [];
    for (const { key, value } of this.log.getRange({ start: STRUCTURES_KEY + 1 })) {
      if (value.t !== 'x' && value.p === projectId) seqs.push(key);
    }
    for (let i = 0; i < seqs.length; i += ERASE_BATCH) {
      const part = seqs.slice(i, i + ERASE_BATCH);
      await this.root.transaction(() => {
        for (const seq of part) void this.log.put(seq, ERASED);
      });
      onProgress?.(i + part.length);
    }
    await this.meta.put(PENDING_ERASURES, this.pendingErasures().filter((id) => id !== projectId));
    await this.root.flushed;
    await this.compact();
    return seqs.length;
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
    await this.meta.put('probe', now);
  }

  async close(): Promise<void> {
    await this.root.close();
  }
}
