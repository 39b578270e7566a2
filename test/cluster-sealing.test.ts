import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { startService, type RunningService } from '../src/service.ts';
import { api, createProject } from './helpers.ts';
import { clusterNodeEnv, startNatsCluster, type NatsCluster } from './nats-cluster.ts';

/**
 * Sealing in cluster mode: days whose window closed leave every node's heap and partition snapshots for the shared
 * sealed-rows bucket and each node's local copy of it, and answers stay those of a single node: on the nodes that
 * sealed, after the owner leaves, and on a node that starts with an empty data directory from a snapshot that no
 * longer carries the sealed days.
 */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const DAY_MS = 86_400_000;
/** Days of history sent (the oldest 24 days back: inside the 31 days an event may be late). */
const HISTORY_DAYS = 24;

let cluster: NatsCluster;
const dirs: string[] = [];
const running: RunningService[] = [];

/** Every service's clock: days seal ~33.5 days after their midnight (31 days late events + margins), so the test moves it. */
let clock = Date.now();
const now = () => clock;

async function startNode(id: string, tag: string, adminKey: string, fold: 'all' | 'owner'): Promise<RunningService> {
  const dataDir = mkdtempSync(path.join(tmpdir(), `seal-${id}-`));
  dirs.push(dataDir);
  const config = loadConfig({ ...clusterNodeEnv({ id, urls: cluster.urls, dataDir, adminKey, fold }), ANALYTICS_QUIET: '1' });
  const svc = await startService(config, { cluster: { tag }, now });
  running.push(svc);
  return svc;
}

async function stop(svc: RunningService): Promise<void> {
  await svc.stop();
  running.splice(running.indexOf(svc), 1);
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, ms: number): Promise<T> {
  const started = Date.now();
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() - started > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(50);
  }
}

function comparable(body: Record<string, unknown>): unknown {
  const { projectId: _p, ...rest } = body;
  return rest;
}

before(async () => {
  cluster = await startNatsCluster();
});

after(async () => {
  for (const s of [...running].reverse()) await s.stop().catch(() => {});
  await cluster?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

test('cluster nodes seal closed days into the shared bucket: the heap keeps only live days, and every node (even a new one) answers like a single node', async () => {
  const tag = `s${process.pid}`;
  const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
  const a = await startNode('a', tag, adminKey, 'owner');
  const b = await startNode('b', tag, adminKey, 'owner');
  const singleDir = mkdtempSync(path.join(tmpdir(), 'seal-single-'));
  dirs.push(singleDir);
  const single = await startService(loadConfig({ PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: singleDir, ANALYTICS_ADMIN_KEY: adminKey, ANALYTICS_QUIET: '1' }), { now });
  running.push(single);
  const pc = await createProject(a.url, adminKey, { name: 'history' });
  const ps = await createProject(single.url, adminKey, { name: 'history' });

  const t0 = clock;
  const events = [];
  for (let d = HISTORY_DAYS; d >= 0; d--) {
    for (let i = 0; i < 12; i++) {
      events.push({
        event: i % 5 === 4 ? 'signup' : 'page_view',
        url: `https://site.example/${['', 'pricing', 'docs'][i % 3]}`,
        ...(i % 4 === 0 ? { referrer: 'https://news.example/x' } : {}),
        sessionId: `d${d}s${i % 4}`,
        timestamp: new Date(t0 - d * DAY_MS - (i + 1) * 60_000).toISOString(),
        eventId: `ev-${d}-${i}`,
      });
    }
  }
  const send = async (batch: typeof events) => {
    for (const [url, key] of [[b.url, pc.keys.secret], [single.url, ps.keys.secret]] as const) {
      const r = await api(url, '/analytics', { key, body: { events: batch } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
  };
  for (let i = 0; i < events.length; i += 100) await send(events.slice(i, i + 100));
  // Forty days on: one more event, and every day of the history is past its seal time.
  clock += 40 * DAY_MS;
  await send([{ event: 'page_view', url: 'https://site.example/', sessionId: 'later', timestamp: new Date(clock - 60_000).toISOString(), eventId: 'ev-later' }]);

  const to = new Date(clock).toISOString().slice(0, 10);
  const from = new Date(t0 - (HISTORY_DAYS + 2) * DAY_MS).toISOString().slice(0, 10);
  const mid = new Date(t0 - 10 * DAY_MS).toISOString().slice(0, 10);
  const queries = [`from=${from}&to=${to}`, `from=${mid}&to=${mid}`, `from=${from}&to=${mid}`];
  await single.engine.sealingIdle();
  const want = await Promise.all(queries.map((q) => api(single.url, `/metrics?${q}`, { key: ps.keys.secret })));
  for (const w of want) assert.equal(w.status, 200);
  assert.ok(want[0]!.body.pageviews > 200, 'the single node counted the history');
  assert.ok(single.engine.stats().sealedDays > HISTORY_DAYS, 'the single node sealed the history');

  /** Every node answers every query as the single node does (reads retried while the partition moves). */
  const sameAsSingle = async (svc: RunningService, who: string) => {
    for (let i = 0; i < queries.length; i++) {
      const got = await waitFor(`${who}: ${queries[i]}`, async () => {
        const r = await api(svc.url, `/metrics?${queries[i]}`, { key: pc.keys.secret });
        return r.status === 200 ? r : undefined;
      }, 20_000);
      assert.deepEqual(comparable(got.body), comparable(want[i]!.body), `${who} answers ${queries[i]} as a single node`);
    }
  };

  // The owner sealed the closed days: its heap holds about today's (and the still-open yesterday's), both nodes'
  // copies hold the sealed ones.
  await sameAsSingle(a, 'node a');
  await sameAsSingle(b, 'node b');
  await Promise.all([a.engine.sealingIdle(), b.engine.sealingIdle()]);
  const live = a.engine.stats().liveDays + b.engine.stats().liveDays;
  await waitFor('both copies hold the sealed days', async () => (a.engine.stats().sealedDays > HISTORY_DAYS && b.engine.stats().sealedDays > HISTORY_DAYS ? true : undefined), 10_000);
  assert.ok(live <= 2, `live days after sealing: ${live} (owner and standby hold only the one recent day)`);

  // Snapshots are written without the sealed days; then both nodes go, and a node with an empty data directory
  // restores that snapshot and takes the sealed days from the bucket.
  await a.engine.snapshotNow();
  await b.engine.snapshotNow();
  await stop(a);
  await sameAsSingle(b, 'node b after a left');
  await stop(b);
  const c = await startNode('c', tag, adminKey, 'all');
  await sameAsSingle(c, 'a new node c');
  assert.ok(c.engine.stats().liveDays <= 1, `node c restored ${c.engine.stats().liveDays} live days from the snapshot`);
  assert.ok(c.engine.stats().sealedDays > HISTORY_DAYS, 'node c mirrored the sealed days');
});
