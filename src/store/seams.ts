import type { SnapshotData } from '../core/snapshot.ts';
import type { FoldRecord } from '../core/types.ts';
import type { KeyRecord, ProjectRecord, Salt } from './records.ts';

/**
 * The storage seam of both modes (CLUSTER.md §3). The engine codes against these interfaces; `src/store/` holds an
 * LMDB implementation of each (single node, the default) and a NATS JetStream one (`ANALYTICS_MODE=cluster`).
 * Nothing outside `src/store/` imports `lmdb` or `@nats-io/*`.
 */

/** One LMDB log entry or one stream message: the records of one ingest batch (one project, so one partition). */
export interface LogEntry {
  /** LMDB: the first record's sequence (records are numbered on); JetStream: the message's stream sequence */
  seq: number;
  /** JetStream: a partition's clock tick is a message of one ClockRecord */
  records: FoldRecord[];
  /** JetStream: the message's `Nats-Msg-Id` (a snapshot remembers the last one, checked on resume); LMDB: absent */
  batchId?: string;
  /**
   * JetStream: an erase marker (no records): the project of this id was deleted, and the fold drops everything it
   * holds of it at this sequence (cluster erasure, src/cluster/cluster-erasure.ts); LMDB: absent
   */
  erase?: string;
}

export interface Appended {
  /** where the entry landed (see LogEntry.seq) */
  seq: number;
  /** JetStream answered that this batchId was stored before (a transport retry): nothing new was stored */
  duplicate: boolean;
}

/** Stops a live follower; resolves when no further `onEntry` call will happen. */
export interface Follower {
  stop(): Promise<void>;
  /** sequence of the last entry handed to onEntry (0 before the first) */
  readonly lastSeq: number;
  /** a reader saw the stream end at `seq`, ahead of this follower: a follower that looks stalled may restart now */
  behind?(seq: number): void;
}

export interface EventLog {
  /** LMDB: 1 */
  readonly partitions: number;
  /** Durable when the promise resolves (LMDB: committed; JetStream: PubAck from a quorum). */
  append(partition: number, records: readonly FoldRecord[], batchId: string): Promise<Appended>;
  /**
   * where the newest entry ends, 0 when empty: the sequence a fold holds once it folded everything (JetStream: the
   * last message's, via last_by_subj; LMDB: the last record's, since an entry covers seq … seq + records − 1)
   */
  lastSeq(partition: number): Promise<number>;
  /** entries after `afterSeq` up to the end as of the call, in chunks, in order */
  read(partition: number, afterSeq: number): AsyncIterable<LogEntry[]>;
  /** live tail after `afterSeq`; entries arrive in order, each exactly once (JetStream only: LMDB folds inline) */
  follow(partition: number, afterSeq: number, onEntry: (e: LogEntry) => void): Follower;
  close(): Promise<void>;
}

/** Projects, key hashes and salts, shared by every node (cluster: a KV bucket mirrored into memory by a watch). */
export interface Catalog {
  project(id: string): ProjectRecord | undefined;
  projects(): ProjectRecord[];
  key(hash: string): KeyRecord | undefined;
  keys(projectId: string): Array<[string, KeyRecord]>;
  /** creates or replaces a project together with key hashes (create: keys first, so an orphan key answers 401) */
  putProject(project: ProjectRecord, keyHashes: Array<[string, KeyRecord]>): Promise<void>;
  putKey(hash: string, record: KeyRecord): Promise<void>;
  deleteKey(hash: string): Promise<void>;
  deleteProject(projectId: string): Promise<void>;
  /** cluster: one lookup past the mirror for a key just created on another node (and its project); LMDB: same as key() */
  refreshKey(hash: string): Promise<KeyRecord | undefined>;
  /** called after any change made here or on another node */
  onChange(fn: (what: { kind: 'project' | 'key'; id: string }) => void): () => void;
}

/** Daily salts: every node must derive the same anonymous session ids, so the first writer of a day wins. */
export interface SharedSalts {
  load(): Promise<Salt[]>;
  /** stores `salt` for its day unless one exists; returns the salt that is stored (the winner's) */
  createOrGet(salt: Salt): Promise<Salt>;
  remove(day: string): Promise<void>;
}

/** Snapshots of one partition's state, named by the log sequence they cover. */
export interface SnapshotStore {
  /** `lastBatchId`: the id of the last folded entry (JetStream resume check) */
  write(partition: number, data: SnapshotData, lastBatchId?: string): Promise<{ bytes: number }>;
  /** newest readable snapshot covering at most `maxSeq`; a damaged one is skipped (reported) for an older one */
  loadNewest(partition: number, maxSeq: number, onSkip: (name: string, why: string) => void): Promise<{ data: SnapshotData; lastBatchId?: string } | undefined>;
  close(): Promise<void>;
}
