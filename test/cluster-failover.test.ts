import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import type { ClusterBackend } from '../src/cluster/cluster-backend.ts';
import { startService, type RunningService } from '../src/service.ts';
import { api, createProject } from './helpers.ts';
import { clusterNodeEnv, startNatsCluster, waitForValue, type NatsCluster } from './nats-cluster.ts';

/**
 * Cluster mode with partition owners (ANALYTICS_FOLD=owner, the default), CLUSTER.md §11 test 5: partitions move when
 * their owner dies (no release: its leases expire) or stops on SIGTERM (release: successors claim at once), reads
 * through any node give the same answers, and no partition is ever served by two nodes at once. Serial: it faults
 * the cluster's members.
 */

/** CLUSTER.md §11: a dead owner's partitions are served again within this (lease 5 s + claim + catch-up). */
const TAKEOVER_DEADLINE_MS = 8_000;
/**
 * After a graceful stop (release): the goal, 2 s (docs/CLUSTER.md §11). Until issue 15t this test allowed 4 s: a node
 * that joined within LEASE_MS of the crash above took the crashed node's last heartbeat for a live member and waited
 * ~2 s for it to age out (1.9–2.0 s in 3 of 6 runs, 2.18 s once in the whole suite). Since then 74–234 ms in 6 runs.
 */
const HANDOVER_DEADLINE_MS = 2_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let cluster: NatsCluster;
const dirs: string[] = [];
const running = new Set<RunningService>();

interface Node {
  id: string;
  svc: RunningService;
  url: string;
  backend: ClusterBackend;
  logs: string[];
  /** dies as a kill -9 would leave the cluster (ClusterBackendOptions.crashable) */
  crash: () => Promise<void>;
}

async function startNode(id: string, tag: string, adminKey: string, fold: 'owner' | 'all' = 'owner'): Promise<Node> {
  const dataDir = mkdtempSync(path.join(tmpdir(), `owner-${id}-`));
  dirs.push(dataDir);
  const logs: string[] = [];
  const config = loadConfig({ ...clusterNodeEnv({ id, urls: cluster.urls, dataDir, adminKey, fold }), ANALYTICS_QUIET: '1' });
  let crash = (): Promise<void> => Promise.reject(new Error('the backend did not hand over its crash'));
  const svc = await startService(config, { log: (l) => logs.push(`${Date.now()} ${l}`), cluster: { tag, crashable: (fn) => (crash = fn) } });
  running.add(svc);
  const backend = (svc.engine as unknown as { backend: ClusterBackend }).backend;
  return { id, svc, url: svc.url, backend, logs, crash: () => crash() };
}

async function stop(n: Node): Promise<void> {
  await n.svc.stop();
  running.delete(n.svc);
}

before(async () => {
  cluster = await startNatsCluster();
});

after(async () => {
  for (const s of running) await s.stop().catch(() => {});
  await cluster?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('partition owners', () => {
  test('partitions move: an owner killed without release is replaced within 8 s, one stopped by SIGTERM within 2 s, same answers, never two servers', async (t) => {
    const tag = `o${process.pid}`;
    const key = `ak_${randomBytes(24).toString('base64url')}`;
    const a = await startNode('a', tag, key);
    const b = await startNode('b', tag, key);
    const nodes = [a, b];
    // Safety, sampled all along: no partition served by two nodes at the same instant.
    let worst = 0;
    const sampler = setInterval(() => {
      const count = new Map<number, number>();
      for (const n of nodes) for (const p of n.backend.serving()) count.set(p, (count.get(p) ?? 0) + 1);
      for (const c of count.values()) worst = Math.max(worst, c);
    }, 10);
    try {
      const p = await createProject(a.url, key);
      const k = p.keys.secret;
      const n = a.backend.partitionOfProject(p.project.id);
      const firstDay = new Date().toISOString().slice(0, 10); // to today when read: the test may run over midnight
      const events = Array.from({ length: 30 }, (_, i) => ({ event: 'page_view', url: `/p${i % 4}`, sessionId: `s${i % 7}`, eventId: `e${i}` }));
      // Reads wait for an owner of the partition (both nodes settle first: SETTLE_MS).
      const answer = async (url: string) => api(url, `/metrics?from=${firstDay}&to=${new Date().toISOString().slice(0, 10)}`, { key: k });
      let first: Awaited<ReturnType<typeof answer>> | undefined;
      for (const started = Date.now(); Date.now() - started < 15_000; await sleep(50)) {
        const r = await api(b.url, '/analytics', { key: k, body: { events } });
        if (r.status === 200) {
          first = await answer(a.url);
          if (first.status === 200) break;
        }
      }
      assert.equal(first?.status, 200, JSON.stringify(first?.body));
      assert.equal(first.body.pageviews, 30);
      assert.deepEqual((await answer(b.url)).body, first.body, 'a read through either node gives the same answer');

      // A read can be answered while the partition is between owners (the nodes settle on its preferred owner after
      // SETTLE_MS, which may hand it over just then): wait until one serves it.
      const owner = await waitForValue(`an owner of partition ${n}`, () => nodes.find((x) => x.backend.serving().includes(n)), 10_000);
      const other = owner === a ? b : a;

      // 1. The owner dies (no release): its leases expire, the other node claims, replays and serves.
      await owner.crash();
      const killedAt = Date.now();
      let took = -1;
      while (Date.now() - killedAt < TAKEOVER_DEADLINE_MS + 4_000) {
        const r = await answer(other.url);
        if (r.status === 200) {
          assert.deepEqual(r.body, first.body, 'the new owner answers as the old one did');
          took = Date.now() - killedAt;
          break;
        }
        assert.equal(r.status, 503, JSON.stringify(r.body));
        await sleep(50);
      }
      assert.ok(took >= 0 && took < TAKEOVER_DEADLINE_MS, `served again after ${took} ms (goal < ${TAKEOVER_DEADLINE_MS})`);
      await stop(owner);
      nodes.splice(nodes.indexOf(owner), 1);

      // 2. A third node joins; whoever owns the partition then stops gracefully (SIGTERM path: release).
      const c = await startNode('c', tag, key);
      nodes.push(c);
      await sleep(3_000); // c settles and may take partitions over (hand-over after its standby fold is ready)
      let owner2: Node | undefined;
      for (const started = Date.now(); !owner2 && Date.now() - started < 10_000; await sleep(50)) owner2 = nodes.find((x) => x.backend.serving().includes(n));
      assert.ok(owner2, 'the partition has an owner');
      const survivor = owner2 === c ? other : c;
      assert.deepEqual((await answer(survivor.url)).body, first.body);
      const stoppedAt = Date.now();
      await stop(owner2);
      nodes.splice(nodes.indexOf(owner2), 1);
      let took2 = -1;
      while (Date.now() - stoppedAt < HANDOVER_DEADLINE_MS + 6_000) {
        const r = await answer(survivor.url);
        if (r.status === 200) {
          assert.deepEqual(r.body, first.body);
          took2 = Date.now() - stoppedAt;
          break;
        }
        await sleep(25);
      }
      t.diagnostic(`killed owner replaced after ${took} ms (goal < ${TAKEOVER_DEADLINE_MS}); after SIGTERM served again in ${took2} ms (goal < ${HANDOVER_DEADLINE_MS})`);
      assert.ok(took2 >= 0 && took2 < HANDOVER_DEADLINE_MS, `after SIGTERM served again in ${took2} ms (goal < ${HANDOVER_DEADLINE_MS}, from the start of the stop at ${stoppedAt}); survivor: ${survivor.logs.join(' | ')}`);
      assert.equal(worst, 1, 'never two servers of one partition');
    } finally {
      clearInterval(sampler);
    }
  });
});
