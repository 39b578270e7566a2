import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import type { ClusterBackend } from '../src/cluster/cluster-backend.ts';
import { loadConfig } from '../src/config.ts';
import { preferredOwner } from '../src/core/hrw.ts';
import { startService, type RunningService } from '../src/service.ts';
import { clusterNodeEnv, startNatsCluster, type NatsCluster } from './nats-cluster.ts';

/** A cluster node started in this process in owner mode (ANALYTICS_FOLD=owner), with its log lines and data directory. */
export interface OwnerNode {
  id: string;
  svc: RunningService;
  url: string;
  backend: ClusterBackend;
  logs: string[];
  dataDir: string;
}

/** The preferred owner of partition n as `node` last decided it (undefined while it has settled no member). */
export function preferredBy(node: OwnerNode, n: number): string | undefined {
  return (node.backend as unknown as { ownership: { preferred(n: number): string | undefined } }).ownership.preferred(n);
}

/**
 * The node that owns partition n for good among `nodes`: the preferred owner over all their ids (rendezvous hashing),
 * serving n, with every node preferring it; undefined until then. A node serving n while every node prefers it is not
 * enough: each node settles a member SETTLE_MS after it first saw it, so just after a start every node can prefer, for
 * a moment, the owner among the members settled so far (the first node alone), which then hands n over.
 */
export function settledOwner(nodes: readonly OwnerNode[], n: number): OwnerNode | undefined {
  const want = preferredOwner(n, nodes.map((x) => x.id));
  const owner = nodes.find((x) => x.id === want);
  if (!owner?.backend.serving().includes(n) || !nodes.every((x) => preferredBy(x, n) === want)) return undefined;
  return owner;
}

/**
 * Owner-mode nodes over one 3-server cluster for a test file: the cluster starts before its tests, and every node,
 * the cluster and every directory (`dirs`; a test adds its own) go after them. `now` is every node's clock.
 */
export function ownerNodes(prefix: string, now: () => number) {
  const h = {
    cluster: undefined as unknown as NatsCluster,
    dirs: [] as string[],
    running: new Set<RunningService>(),
    async start(id: string, tag: string, adminKey: string, dataDir?: string): Promise<OwnerNode> {
      const dir = dataDir ?? mkdtempSync(path.join(tmpdir(), `${prefix}-${id}-`));
      if (!dataDir) h.dirs.push(dir);
      const logs: string[] = [];
      const config = loadConfig({ ...clusterNodeEnv({ id, urls: h.cluster.urls, dataDir: dir, adminKey, fold: 'owner' }), ANALYTICS_QUIET: '1' });
      const svc = await startService(config, { log: (l) => logs.push(l), cluster: { tag }, now });
      h.running.add(svc);
      const backend = (svc.engine as unknown as { backend: ClusterBackend }).backend;
      return { id, svc, url: svc.url, backend, logs, dataDir: dir };
    },
    /** A single-node service (LMDB) with the same admin key and clock: the reference the cluster must equal. */
    async single(adminKey: string): Promise<RunningService> {
      const dir = mkdtempSync(path.join(tmpdir(), `${prefix}-single-`));
      h.dirs.push(dir);
      const svc = await startService(loadConfig({ PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: dir, ANALYTICS_ADMIN_KEY: adminKey, ANALYTICS_QUIET: '1' }), { now });
      h.running.add(svc);
      return svc;
    },
    async stop(n: { svc: RunningService }): Promise<void> {
      await n.svc.stop();
      h.running.delete(n.svc);
    },
  };
  before(async () => {
    h.cluster = await startNatsCluster();
  });
  after(async () => {
    for (const s of h.running) await s.stop().catch(() => {});
    await h.cluster?.stop();
    for (const d of h.dirs) rmSync(d, { recursive: true, force: true });
  });
  return h;
}
