import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/config.ts';
import type { ClusterBackend } from '../src/cluster/cluster-backend.ts';
import { startService } from '../src/service.ts';
import { clusterNodeEnv, startNatsCluster } from '../test/nats-cluster.ts';

/**
 * `npx tsx bench/cluster-erase.ts [batches]`: what DELETE /projects/{id} costs in cluster mode. A real 3-server
 * nats-server cluster and one node (ANALYTICS_FOLD=all, 4 partitions); `batches` batches of 100 events of the project
 * to delete and as many of a kept one, then the delete is timed from outside (HTTP), and the node's log line
 * splits it (scan, message deletes). Not part of `npm run bench`.
 */

const BATCHES = Number(process.argv[2] ?? 1_000);
const BATCH = 100;
/** Requests in flight while filling. */
const FILL_CONCURRENCY = 16;

const cluster = await startNatsCluster();
const dataDir = mkdtempSync(path.join(tmpdir(), 'erase-bench-'));
const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
const logs: string[] = [];
const svc = await startService(loadConfig({ ...clusterNodeEnv({ id: 'a', urls: cluster.urls, dataDir, adminKey, fold: 'all', streamBytes: 2 * 1024 ** 3 }), ANALYTICS_QUIET: '1' }), {
  log: (l) => logs.push(l),
  cluster: { tag: `bench${process.pid}` },
});
try {
  const call = async (route: string, key: string, init: { method?: string; body?: unknown } = {}) => {
    const res = await fetch(svc.url + route, {
      method: init.method ?? (init.body ? 'POST' : 'GET'),
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      ...(init.body ? { body: JSON.stringify(init.body) } : {}),
    });
    const body = (await res.json()) as any;
    if (res.status !== 200) throw new Error(`${route}: ${res.status} ${JSON.stringify(body)}`);
    return body;
  };
  const mk = async () => call('/projects', adminKey, { body: { allowed_origins: [], allowed_referrers: [], monthly_quota: 100_000_000 } });
  const backend = (svc.engine as unknown as { backend: ClusterBackend }).backend;
  const doomed = await mk();
  let kept = await mk();
  while (backend.partitionOfProject(kept.project.id) !== backend.partitionOfProject(doomed.project.id)) kept = await mk();
  const fillStarted = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: FILL_CONCURRENCY }, async () => {
      for (let i = next++; i < 2 * BATCHES; i = next++) {
        const p = i % 2 === 0 ? doomed : kept;
        const events = Array.from({ length: BATCH }, (_, j) => ({ event: 'page_view', url: `https://shop.example/p/${(i * BATCH + j) % 5000}`, sessionId: `s${j % 50}` }));
        await call('/analytics', p.keys.secret, { body: { events } });
      }
    }),
  );
  console.log(`filled ${2 * BATCHES} batches of ${BATCH} events (half the project to delete, one partition) in ${((performance.now() - fillStarted) / 1000).toFixed(1)} s`);
  await backend.snapshotNow();
  const started = performance.now();
  await call(`/projects/${doomed.project.id}`, adminKey, { method: 'DELETE' });
  const ms = performance.now() - started;
  console.log(`DELETE answered after ${(ms / 1000).toFixed(2)} s: ${BATCHES} stream messages (${BATCHES * BATCH} events) erased, ${((BATCHES / ms) * 1000).toFixed(0)} messages/s`);
  for (const l of logs) if (l.includes(doomed.project.id)) console.log(`  node: ${l}`);
} finally {
  await svc.stop();
  await cluster.stop();
  rmSync(dataDir, { recursive: true, force: true });
}
