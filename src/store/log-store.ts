import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import type { LogRecord } from '../core/types.ts';

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
}

export type KeyKind = 'admin' | 'secret' | 'publishable';

export interface KeyRecord {
  kind: KeyKind;
  /** absent for admin keys */
  projectId?: string;
  ownerId: string;
  createdAt: number;
}

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

export class LogStore {
  private readonly root: RootDatabase;
  private readonly log: Database<LogRecord, number>;
  private readonly projects: Database<ProjectRecord, string>;
  private readonly keys: Database<KeyRecord, string>;
  private readonly meta: Database<unknown, string>;
  private nextSeq: number;

  private constructor(dataDir: string, private readonly durability: Durability) {
    mkdirSync(dataDir, { recursive: true });
    this.root = open({ path: path.join(dataDir, 'analytics.lmdb'), mapSize: MAP_SIZE, maxDbs: 8, noSubdir: true });
    this.log = this.root.openDB<LogRecord, number>({ name: 'log', sharedStructuresKey: STRUCTURES_KEY });
    this.projects = this.root.openDB<ProjectRecord, string>({ name: 'projects' });
    this.keys = this.root.openDB<KeyRecord, string>({ name: 'keys' });
    this.meta = this.root.openDB<unknown, string>({ name: 'meta' });
    let last = 0;
    for (const key of this.log.getKeys({ reverse: true, limit: 1 })) last = key;
    this.nextSeq = last + 1;
  }

  static open(dataDir: string, durability: Durability): LogStore {
    return new LogStore(dataDir, durability);
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
    return this.keys.get(hash);
  }

  /** Stores a project and its key hashes in one transaction. */
  async putProject(project: ProjectRecord, keyHashes: Array<[string, KeyRecord]>): Promise<void> {
    await this.root.transaction(() => {
      void this.projects.put(project.id, project);
      for (const [h, rec] of keyHashes) void this.keys.put(h, rec);
    });
    await this.root.flushed;
  }

  async putKey(hash: string, record: KeyRecord): Promise<void> {
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
    await this.meta.put(key, value);
    await this.root.flushed;
  }

  loadSalts(): Salt[] {
    return (this.meta.get('salts') as Salt[] | undefined) ?? [];
  }

  async saveSalts(salts: Salt[]): Promise<void> {
    await this.meta.put('salts', salts);
    await this.root.flushed;
  }

  /** A tiny write that proves the store still accepts writes (health). */
  async probeWrite(now: number): Promise<void> {
    await this.meta.put('probe', now);
  }

  async close(): Promise<void> {
    await this.root.close();
  }
}
