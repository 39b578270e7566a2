import type { Config } from '../config.ts';
import type { QueryEngine } from '../core/query/types.ts';
import type { LogRecord, MetricsResponse, RealtimeResponse, StoredEvent } from '../core/types.ts';
import type { Enricher } from '../enrich/index.ts';
import type { Catalog } from '../store/seams.ts';
import type { OpenColumnStats } from './open-columns.ts';
import type { ReadQuery } from './read-query.ts';
import type { HealthView } from './types.ts';

/**
 * What differs between the two modes, behind one interface, so the rules of ingest and reads stay one piece of code in
 * Engine. Single node (LmdbBackend): InlineFold, today's append → fold → ack over LMDB. Cluster (ClusterBackend):
 * StreamFold, publish to the JetStream partition → ack, the followers fold with applyOnce.
 */

export type { ReadView } from './read-query.ts';

export type ReadRefusal = { unavailable: string };

/** What the operator metrics read of a backend's state at each scrape. */
export interface BackendStats {
  liveDays: number;
  awakeDays: number;
  sealedDays: number;
  /** the open column segments of every projection here (cluster: the partitions folded here, summed) */
  columns: OpenColumnStats;
}

export interface Backend {
  readonly catalog: Catalog;
  readonly enricher: Enricher;
  /** answers POST /query and /query/funnel (the column store); absent where it is not wired yet: those answer 503 */
  readonly questions?: QueryEngine | undefined;
  /** false after a storage write failed (health answers 503 until one succeeds); the engine sets it on a failed catalog write */
  storageOk: boolean;
  /**
   * ingest waits for this before its eventId checks (LMDB: a compaction swapping files after a deletion; with `withIds`,
   * a batch that carries eventIds, also the startup check of the remembered ids against the log)
   */
  settled(withIds?: boolean): Promise<void>;
  /** was `eventId` stored (or is it in flight) for the project? A pre-check: cluster mode's fold is the authority */
  seen(projectId: string, eventId: string, now: number): boolean;
  /**
   * History (POST /projects/{id}/history): was `eventId` stored for the project as history at any time, or live within
   * 48 h, or is it in flight? A pre-check: on a single node the append's transaction claims history ids (a repeat the
   * pre-check let through is dropped there, see commit), in cluster mode the fold is the authority (cluster-history.ts).
   */
  seenForGood(projectId: string, eventId: string, now: number): boolean;
  /** GET /projects/{id}/export: the project's stored events of [from, to], in time order, in bounded chunks */
  exportEvents(projectId: string, from: string, to: string): AsyncGenerator<StoredEvent[]>;
  /** old days kept live for history past their seal time (tests, benches: sealed seconds after an import leaves them) */
  historyDaysLive?(): number;
  /** events stored (or in flight) for the project this UTC month, as far as this node knows (the quota) */
  usedThisMonth(projectId: string, now: number): number;
  /**
   * Makes the records durable (LMDB commit or JetStream PubAck) before resolving with how many were stored: all of
   * them, less history events the commit found stored before (single node: their ids are claimed in the append's
   * transaction). false = nothing stored, 503.
   */
  commit(projectId: string, records: LogRecord[], ids: Set<string>, stored: number): Promise<number | false>;
  /** answers an admitted read: from local state (cluster: after the read barrier) or from the partition's owner */
  read(q: ReadQuery): Promise<{ value: MetricsResponse | RealtimeResponse } | ReadRefusal>;
  /** runs with the project's catalog entry already removed: erase its events, state and snapshots */
  eraseProject(projectId: string): Promise<void>;
  /** before serving: deletions a crash interrupted (project and keys gone, events not yet) are finished */
  finishInterruptedErasures(): Promise<void>;
  /** ANALYTICS_ADMIN_KEY (or a generated one on a single node) is the admin key */
  bootstrapAdminKey(config: Readonly<Config>, now: number): Promise<void>;
  health(startedAt: number): Pick<HealthView, 'log'> & { ready: boolean };
  /** this node's share of every rate bucket is 1 / rateShare() (cluster: the live members; one node: 1) */
  rateShare(): number;
  /** the backend's timers (snapshots, prunes, probes); `every` unrefs and logs failures */
  startTimers(every: (ms: number, fn: () => void | Promise<void>) => void): void;
  /** waits for in-flight writes, writes the final snapshot(s), closes storage */
  close(): Promise<void>;
  stats(): BackendStats;
  /** single node only (0 elsewhere): see Engine.applyRetention */
  applyRetention(): Promise<number>;
  sealingIdle(): Promise<void>;
  snapshotNow(): Promise<void>;
}
