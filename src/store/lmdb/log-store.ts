import { mkdirSync } from 'node:fs';
import path from 'node:path';
import type { LogRecord } from '../../core/types.ts';
import { holdDataDir, releaseDataDir } from '../files/data-dir-lock.ts';
import type { KeyRecord, ProjectRecord, Salt } from '../records.ts';
import { CatalogTables } from './catalog-tables.ts';
import { containLmdbRejections } from './commit-failures.ts';
import { HistoryIds } from './history-ids.ts';
import { LogAppender, type Durability } from './log-append.ts';
import { LogCompaction } from './log-compaction.ts';
import { LogDictionaries } from './log-dictionaries.ts';
import { LmdbEnv, type StoreFaults } from './log-env.ts';
import { LogErasure, type EraseOptions } from './log-erasure.ts';
import { describeWriteFailure, probeSpace, probeWrite } from './log-health.ts';
import { LogReader, storedEntries, type StoredEntries } from './log-read.ts';
import { LogRetention } from './log-retention.ts';
import { RememberedIds, type LoggedId } from './remembered-ids.ts';
import { SealedStore } from './sealed-store.ts';
import { removeReplaced } from './replace-file.ts';

export type { Durability } from './log-append.ts';
export { LogDamage } from './log-entry-format.ts';
export type { StoreFault, StoreFaults } from './log-env.ts';
export type { StoredEntries } from './log-read.ts';

/**
 * The single-node store: one LMDB environment (`<dataDir>/analytics.lmdb`, see log-env.ts) holding the event log (the
 * truth), projects, key hashes, salts, the remembered eventIds and sealed days. This class only composes its parts,
 * each in a file of its own and all sharing one LmdbEnv, whose handles a compaction swaps:
 *   log-entry-format.ts (the entry bytes), log-dictionaries.ts (their compression dictionaries), log-append.ts and
 *   log-read.ts (append, verified read), log-retention.ts, log-erasure.ts and log-compaction.ts (maintenance),
 *   catalog-tables.ts (projects, keys, salts, meta), log-health.ts (health probes), commit-failures.ts (how a failed
 *   commit is reported once).
 */
export class LogStore {
  private readonly env: LmdbEnv;
  private readonly dicts: LogDictionaries;
  private readonly appender: LogAppender;
  private readonly reader: LogReader;
  private readonly retention: LogRetention;
  private readonly compaction: LogCompaction;
  private readonly erasure: LogErasure;
  private readonly catalog: CatalogTables;
  /** opened once; given the new handles when a compaction reopens the environment */
  private rememberedIds: RememberedIds | undefined;
  private historyIds: HistoryIds | undefined;
  private sealedStore: SealedStore | undefined;
  /** the writer's hold on the data directory (see data-dir-lock.ts), released by close */
  private hold: string | undefined;

  private constructor(dataDir: string, durability: Durability, readOnly: boolean, writeFormat: 2 | 4, faults: StoreFaults | undefined) {
    if (!readOnly) mkdirSync(dataDir, { recursive: true });
    const env = (this.env = new LmdbEnv(path.join(dataDir, 'analytics.lmdb'), readOnly, faults));
    this.dicts = new LogDictionaries(env);
    this.appender = new LogAppender(env, this.dicts, durability, writeFormat);
    this.reader = new LogReader(env, this.dicts, () => this.appender.lastSeq());
    this.retention = new LogRetention(env, this.reader, this.appender);
    this.compaction = new LogCompaction(env, this.reader);
    this.catalog = new CatalogTables(env);
    this.erasure = new LogErasure(env, this.dicts, this.reader, this.compaction, this.catalog, {
      historyIds: () => this.openHistoryIds(),
      sealed: () => this.openSealedStore(),
    });
    env.onOpen(() => {
      this.rememberedIds?.reopen(env.eventIds, env.eventIdsRaw);
      this.historyIds?.reopen(env.historyIdsDb);
      this.sealedStore?.reopen(env.root);
    });
  }

  /**
   * `readOnly` opens an existing data directory for tools (export, check, backup) while the service may be running.
   * `log` is kept for callers; failures lmdb-js reports on its own are contained (see containLmdbRejections) and
   * reported once by whoever awaits the write.
   * `writeFormat: 2` writes entries in format 2 (for tests that a log of that release is read). `faults`: tests of
   * failing disks make writes fail inside the real transaction (StoreFaults). `entries`: tests that damage an entry
   * on purpose are handed its stored bytes (StoredEntries).
   */
  static open(
    dataDir: string,
    durability: Durability,
    opts: {
      readOnly?: boolean;
      log?: (line: string) => void;
      writeFormat?: 2 | 4;
      faults?: StoreFaults | undefined;
      entries?: ((entries: StoredEntries) => void) | undefined;
    } = {},
  ): LogStore {
    containLmdbRejections();
    const hold = opts.readOnly === true ? undefined : holdDataDir(dataDir); // one writing process per data directory
    try {
      const store = new LogStore(dataDir, durability, opts.readOnly === true, opts.writeFormat ?? 4, opts.faults);
      store.hold = hold;
      opts.entries?.(storedEntries(store.env));
      // an old file a crash left under its second name mid-swap (it may hold an erased project): off the main thread
      if (hold !== undefined) void removeReplaced(store.env.file).catch((err: unknown) => opts.log?.(`could not remove an old copy of ${store.env.file}: ${err instanceof Error ? err.message : String(err)}`));
      return store;
    } catch (err) {
      if (hold !== undefined) releaseDataDir(hold);
      throw err;
    }
  }

  // The log: append and verified read (log-append.ts, log-read.ts).

  /** Sequence number of the newest record in the log (0 when empty). */
  lastSeq(): number {
    return this.appender.lastSeq();
  }

  /** Appends records as one transaction; resolves with their first sequence once committed (see LogAppender.append). */
  append(records: readonly LogRecord[], extra?: (firstSeq: number) => void, admit?: (records: readonly LogRecord[]) => readonly LogRecord[]): Promise<number> {
    return this.appender.append(records, extra, admit);
  }

  /** Records after `afterSeq`, in order, each entry verified as it is read (see LogReader.readAfter). */
  readAfter(afterSeq: number, countVerified = true): Generator<{ seq: number; record: LogRecord }> {
    return this.reader.readAfter(afterSeq, countVerified);
  }

  /** Every record from where events received at or after `since` begin, with its eventId (see LogReader). */
  eventIdsSince(since: number, afterSeq?: number): Generator<LoggedId> {
    return this.reader.eventIdsSince(since, afterSeq);
  }

  /** First sequences of the log's entries (one appended batch each) from `fromSeq` on: LmdbEventLog groups by them. */
  entryStarts(fromSeq: number): Generator<number> {
    return this.reader.entryStarts(fromSeq);
  }

  /** Entries, records and stored bytes of the log, and the bytes of its dictionaries (bench: bytes per event). */
  logSize(): { entries: number; records: number; bytes: number; dictionaryBytes: number } {
    return this.reader.logSize();
  }

  /** Records verified by readAfter since the store was opened (health reports the last verification). */
  get verified(): number {
    return this.reader.verified;
  }

  /** Where the log starts: 1, or the first sequence kept after a deliberate retention cut (meta `logStart`). */
  logStart(): number {
    return this.reader.logStart();
  }

  countAfter(afterSeq: number): number {
    return Math.max(0, this.lastSeq() - afterSeq);
  }

  // Maintenance: retention, repair, erasure, compaction (log-retention.ts, log-erasure.ts, log-compaction.ts).

  /** Retention: removes the entries wholly below `seq` (see LogRetention.deleteBelow). Returns the records removed. */
  deleteBelow(seq: number): Promise<number> {
    return this.retention.deleteBelow(seq);
  }

  /** Repair: removes the entry at `seq` and every one after it, forgetting their eventIds (see LogRetention.cutFrom). */
  cutFrom(seq: number): Promise<{ from: number; to: number; forgottenIds: number }> {
    return this.retention.cutFrom(seq);
  }

  /** Erases a project's records, eventIds and sealed days, then compacts (see LogErasure). Returns the records erased. */
  eraseProjectEvents(projectId: string, opts: EraseOptions = {}): Promise<number> {
    return this.erasure.eraseProjectEvents(projectId, opts);
  }

  /** Takes a project off the pending-erasure list once every file is clean of it (see LogErasure.erasureDone). */
  erasureDone(projectId: string): Promise<void> {
    return this.erasure.erasureDone(projectId);
  }

  /** Projects deleted whose events are not erased yet (a crash interrupted the erasure). */
  pendingErasures(): string[] {
    return this.catalog.pendingErasures();
  }

  /** Compacts the environment online (see LogCompaction.compactNow), after any erasure under way. */
  compact(): Promise<void> {
    return this.compaction.compact();
  }

  /** Whether LMDB can be read now: false while a compaction swaps the file (a few ms). */
  readable(): boolean {
    return this.compaction.readable();
  }

  /** Resolves once no compaction is under way (writes wait for it anyway; a reader of event_ids waits here first). */
  settled(): Promise<void> {
    return this.compaction.settled();
  }

  /**
   * A consistent online copy of the LMDB environment (LMDB's copy with compaction: a read transaction, so writers
   * go on meanwhile). Other processes may hold the environment open.
   */
  async backup(destFile: string): Promise<void> {
    await this.env.root.backup(destFile, true);
  }

  // Projects, keys, salts and meta entries (catalog-tables.ts).

  getProject(id: string): ProjectRecord | undefined {
    return this.catalog.getProject(id);
  }

  listProjects(): ProjectRecord[] {
    return this.catalog.listProjects();
  }

  projectIds(): string[] {
    return this.catalog.projectIds();
  }

  /** Stores a project and its key hashes in one transaction. */
  putProject(project: ProjectRecord, keyHashes: Array<[string, KeyRecord]>): Promise<void> {
    return this.catalog.putProject(project, keyHashes);
  }

  updateProject(project: ProjectRecord): Promise<void> {
    return this.catalog.updateProject(project);
  }

  /** Deletes a project and all its keys in one transaction, and lists it for erasure. */
  deleteProject(projectId: string): Promise<void> {
    return this.catalog.deleteProject(projectId);
  }

  getKey(hash: string): KeyRecord | undefined {
    return this.catalog.getKey(hash);
  }

  /** Every key of a project with its hash. */
  listKeys(projectId: string): Array<[string, KeyRecord]> {
    return this.catalog.listKeys(projectId);
  }

  putKey(hash: string, record: KeyRecord): Promise<void> {
    return this.catalog.putKey(hash, record);
  }

  deleteKey(hash: string): Promise<void> {
    return this.catalog.deleteKey(hash);
  }

  /** Makes `hash` the only admin key: every other admin key record is deleted, in one transaction. */
  replaceAdminKeys(hash: string, record: KeyRecord): Promise<void> {
    return this.catalog.replaceAdminKeys(hash, record);
  }

  /** Whether any admin key is stored. */
  hasAdminKey(): boolean {
    return this.catalog.hasAdminKey();
  }

  getMeta<T>(key: string): T | undefined {
    return this.catalog.getMeta<T>(key);
  }

  putMeta(key: string, value: unknown): Promise<void> {
    return this.catalog.putMeta(key, value);
  }

  loadSalts(): Salt[] {
    return this.catalog.loadSalts();
  }

  saveSalts(salts: Salt[]): Promise<void> {
    return this.catalog.saveSalts(salts);
  }

  // Health (log-health.ts).

  /** A tiny write that proves the store still accepts writes (health). */
  probeWrite(now: number): Promise<void> {
    return probeWrite(this.env, now);
  }

  /** Writes and removes a megabyte beside the environment; throws (ENOSPC) when the device is full. */
  probeSpace(): void {
    probeSpace(this.env);
  }

  /** One line for a failed write, saying whether the device is full. */
  describeWriteFailure(err: unknown): string {
    return describeWriteFailure(this.env, err);
  }

  // The other tables of the environment, opened once.

  /** The remembered eventIds (see remembered-ids.ts). */
  openRememberedIds(): RememberedIds {
    const env = this.env;
    return (this.rememberedIds ??= new RememberedIds(env.eventIds, env.eventIdsRaw, () => env.copyGate ?? env.gate, (since, after) => this.reader.eventIdsSince(since, after), env.file));
  }

  /** The eventIds of history, kept for good (see history-ids.ts). */
  openHistoryIds(): HistoryIds {
    return (this.historyIds ??= new HistoryIds(this.env.historyIdsDb));
  }

  /** Sealed days and month rollups, in this environment (see sealed-store.ts). */
  openSealedStore(): SealedStore {
    const env = this.env;
    return (this.sealedStore ??= new SealedStore(env.root, () => env.copyGate ?? env.gate));
  }

  async close(): Promise<void> {
    try {
      await this.env.root.close();
    } finally {
      if (this.hold !== undefined) releaseDataDir(this.hold);
      this.hold = undefined;
    }
  }
}
