import type { LogRecord } from '../../core/types.ts';
import { KvCatalog } from './catalog.ts';
import { connectNats, type NatsConnection } from './connect.ts';
import { batchIdFor, JetStreamEventLog, PARTITIONS_PER_FOLLOW_CONNECTION } from './event-log.ts';
import { ensureResources, partitionOf, type ResourceNames } from './resources.ts';
import { KvSalts } from './salts.ts';
import { ObjectSnapshotStore } from './snapshots.ts';
import { NatsLeaseStore } from './owners.ts';
import { ReadRpc } from './read-rpc.ts';
import { KvSealedStore } from './sealed.ts';
import { KvUsage } from './usage.ts';
import { KvErasures } from './erasures.ts';

/**
 * Everything a cluster node holds on NATS, opened in the order the design needs (CLUSTER.md §2, §4): the resources
 * (the first node creates them), an ingest connection (appends, read barriers, catalog, leases) and separate follower
 * connections (ordered consumers pull up to 5 MiB each: a connection carries PARTITIONS_PER_FOLLOW_CONNECTION).
 */

export interface ClusterStoreOptions {
  urls: readonly string[];
  nodeId: string;
  /** partitions if this start creates the cluster */
  partitions: number;
  dataDir: string;
  publishDeadlineMs: number;
  retentionDays?: number | undefined;
  maxStreamBytes?: number | undefined;
  /** tests: a suffix for every resource name, so each test has its own stream and buckets */
  tag?: string | undefined;
  log: (line: string) => void;
}

export interface ClusterStore {
  names: ResourceNames;
  partitions: number;
  log: JetStreamEventLog;
  catalog: KvCatalog;
  salts: KvSalts;
  snapshots: ObjectSnapshotStore;
  leases: NatsLeaseStore;
  reads: ReadRpc;
  usage: KvUsage;
  sealed: KvSealedStore;
  erasures: KvErasures;
  nc: NatsConnection;
  partitionOf(projectId: string): number;
  batchIdFor(projectId: string, records: readonly LogRecord[]): string;
  close(): Promise<void>;
}

export async function openClusterStore(o: ClusterStoreOptions): Promise<ClusterStore> {
  const nc = await connectNats(o.urls, `analytics-${o.nodeId}-ingest`);
  const follows: NatsConnection[] = [];
  try {
    const res = await ensureResources(nc, {
      ...(o.tag !== undefined ? { tag: o.tag } : {}),
      partitions: o.partitions,
      ...(o.maxStreamBytes !== undefined ? { maxStreamBytes: o.maxStreamBytes } : {}),
      ...(o.retentionDays !== undefined ? { retentionDays: o.retentionDays } : {}),
    });
    const P = res.partitions;
    for (let i = 0; i < Math.ceil(P / PARTITIONS_PER_FOLLOW_CONNECTION); i++) follows.push(await connectNats(o.urls, `analytics-${o.nodeId}-follow-${i}`));
    const log = await JetStreamEventLog.open(nc, follows, res.names, P, {
      publishDeadlineMs: o.publishDeadlineMs,
      log: o.log,
      consumerPrefix: `analytics_${o.nodeId}`,
    });
    const erasures = await KvErasures.open(res.catalog, o.log);
    const catalog = await KvCatalog.open(res.catalog, { log: o.log, beforeDeleteProject: (id) => erasures.begin(id), onOtherKey: (e) => erasures.applyEntry(e) });
    const snapshots = await ObjectSnapshotStore.open(nc, res.names.snapshots, o.dataDir, { log: o.log });
    // Every node drops its local snapshot copies below an erasure's floor as soon as it is raised (or at start).
    erasures.onFloor((n, seq) => snapshots.setFloor(n, seq));
    const usage = await KvUsage.open(res.usage, o.log);
    const sealed = await KvSealedStore.open(res.sealed, res.names.sealed, o.dataDir, { log: o.log });
    const reads = new ReadRpc(nc, { subjectPrefix: res.names.readSubjectPrefix, onError: (err) => o.log(`forwarded read: ${err instanceof Error ? err.message : String(err)}`) });
    return {
      names: res.names,
      partitions: P,
      log,
      catalog,
      salts: new KvSalts(res.catalog),
      snapshots,
      leases: new NatsLeaseStore(res.owners),
      reads,
      usage,
      sealed,
      erasures,
      nc,
      partitionOf: (projectId) => partitionOf(projectId, P),
      batchIdFor,
      async close() {
        reads.close();
        usage.close();
        erasures.close();
        await catalog.close();
        await sealed.close();
        for (const c of [...follows, nc]) await c.drain().catch(() => c.close());
      },
    };
  } catch (err) {
    for (const c of [...follows, nc]) await c.close().catch(() => {});
    throw err;
  }
}

