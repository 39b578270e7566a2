import { randomBytes } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { loadConfig } from '../src/config.ts';
import { startService, type RunningService } from '../src/service.ts';
import { jetstreamManager } from '@nats-io/jetstream';
import { connectNats } from '../src/store/nats/connect.ts';
import { resourceNames } from '../src/store/nats/resources.ts';
import type { NatsCluster } from '../test/nats-cluster.ts';
import type { Progress } from './lib/progress.ts';
import { wireEvents } from './state/generate-events.ts';

/**
 * Cluster mode with history (part of `npm run bench -- --cluster`): in-process cluster nodes with an injected clock
 * (days seal ~33.5 days after their midnight), so a month of history for many projects is sent and then sealed in one
 * run. Before/after in the same run: what a node holds while every day is live (as cluster mode held it forever before
 * sealing) and once the closed days are sealed: live days, heap after full GC (the node runs in this process, so the change is the figure), the newest
 * partition snapshots' bytes; then a node with an empty data directory: until it answers a month's range as the first.
 */

export interface HistoryParams {
  projects: number;
  days: number;
  eventsPerDay: number;
}

export const HISTORY_QUICK: HistoryParams = { projects: 100, days: 30, eventsPerDay: 10 };
export const HISTORY_FULL: HistoryParams = { projects: 1000, days: 30, eventsPerDay: 10 };

export interface HistoryResults {
  events: number;
  live: { liveDays: number; heapBytes: number; snapshotBytes: number };
  sealed: { liveDays: number; sealedDays: number; heapBytes: number; snapshotBytes: number; sealSeconds: number };
  freshNode: { seconds: number; liveDays: number; sealedDays: number };
}

const DAY_MS = 86_400_000;
/** Events per request: the API's batch limit is 500; a project's history goes in a few requests. */
const BATCH = 300;
/** Projects sent to at once. */
const PARALLEL = 8;
/** A fresh node on a loaded 2-core machine: mirror, restore, fold. */
const FRESH_DEADLINE_MS = 180_000;

/** Stream room per event sent (batches of ~400 B events, with headroom): the bench's servers cap file storage at 4 GB. */
const STREAM_BYTES_PER_EVENT = 1024;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function call(url: string, route: string, key: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(url + route, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, body: await res.json().catch(() => undefined) };
}

/** Heap in use after full collections (the node runs in this process: the figure is the difference of two). */
function heap(): number {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

/** Bytes of the newest local snapshot copy per partition under a node's data directory. */
function snapshotBytes(dataDir: string): number {
  let total = 0;
  const walk = (dir: string): void => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    const snaps = entries.filter((e) => e.isFile() && /^snapshot-\d+\.bin$/.test(e.name)).map((e) => e.name).sort();
    if (snaps.length > 0) total += statSync(path.join(dir, snaps.at(-1)!)).size;
    for (const e of entries) if (e.isDirectory()) walk(path.join(dir, e.name));
  };
  walk(dataDir);
  return total;
}

export async function runClusterHistory(cluster: NatsCluster, tmp: string, p: HistoryParams, progress: Progress): Promise<HistoryResults> {
  let clock = Date.now();
  const now = () => clock;
  const tag = `hist${process.pid}`;
  const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
  const nodes: RunningService[] = [];
  const start = async (id: string) => {
    const dataDir = path.join(tmp, `history-${id}`);
    const config = loadConfig({
      ANALYTICS_MODE: 'cluster',
      ANALYTICS_NODE_ID: id,
      ANALYTICS_NATS: cluster.urls,
      ANALYTICS_ADMIN_KEY: adminKey,
      ANALYTICS_DATA_DIR: dataDir,
      ANALYTICS_FOLD: 'all',
      ANALYTICS_MAX_STREAM_BYTES: String(Math.max(64 * 2 ** 20, p.projects * p.days * p.eventsPerDay * STREAM_BYTES_PER_EVENT)),
      ANALYTICS_RATE_PER_KEY: '1000000000',
      ANALYTICS_BURST_PER_KEY: '1000000000',
      ANALYTICS_RATE_PER_IP: '1000000000',
      ANALYTICS_BURST_PER_IP: '1000000000',
      PORT: '0',
      GRPC_PORT: '0',
      HOST: '127.0.0.1',
      ANALYTICS_QUIET: '1',
    });
    const svc = await startService(config, { cluster: { tag }, now });
    nodes.push(svc);
    return { svc, dataDir };
  };
  try {
    const a = await start('a');
    const keys: string[] = [];
    for (let i = 0; i < p.projects; i++) {
      const r = await call(a.svc.url, '/projects', adminKey, { name: `site ${i}`, allowed_origins: [], allowed_referrers: [] });
      if (r.status !== 200) throw new Error(`creating a project: ${r.status} ${JSON.stringify(r.body)}`);
      keys.push(r.body.keys.secret);
    }
    const t0 = clock;
    const template = wireEvents(p.eventsPerDay, 11);
    let sent = 0;
    for (let i = 0; i < keys.length; i += PARALLEL) {
      progress.show(`cluster history: ${i} of ${keys.length} projects sent`);
      await Promise.all(
        keys.slice(i, i + PARALLEL).map(async (key, j) => {
          const events = [];
          for (let d = p.days; d >= 1; d--) {
            for (const [k, e] of template.entries()) {
              events.push({ ...e, sessionId: `p${i + j}d${d}s${k % 4}`, eventId: `e-${i + j}-${d}-${k}`, timestamp: new Date(t0 - d * DAY_MS + k * 60_000).toISOString() });
            }
          }
          for (let k = 0; k < events.length; k += BATCH) {
            const r = await call(a.svc.url, '/analytics', key, { events: events.slice(k, k + BATCH) });
            if (r.status !== 200) throw new Error(`ingest: ${r.status} ${JSON.stringify(r.body)}`);
            sent += r.body.accepted ?? 0;
          }
        }),
      );
    }
    const probe = keys[0]!;
    const from = new Date(t0 - (p.days + 1) * DAY_MS).toISOString().slice(0, 10);
    const range = (to: number) => `/metrics?from=${from}&to=${new Date(to).toISOString().slice(0, 10)}`;
    const want = await waitForOk(a.svc.url, range(t0), probe);
    await a.svc.engine.snapshotNow();
    const live = { liveDays: a.svc.engine.stats().liveDays, heapBytes: heap(), snapshotBytes: snapshotBytes(a.dataDir) };

    progress.show('cluster history: 40 days later, sealing');
    clock += 40 * DAY_MS;
    const sealStarted = performance.now();
    // No event arrives: the partitions' lease holder ticks their clocks (as its timer would within a minute).
    await (a.svc.engine as unknown as { backend: { tickIdle(): Promise<void> } }).backend.tickIdle();
    for (;;) {
      await a.svc.engine.sealingIdle();
      if (a.svc.engine.stats().liveDays === 0) break;
      if (performance.now() - sealStarted > 60_000) throw new Error(`sealing: ${a.svc.engine.stats().liveDays} days still live`);
      await sleep(20);
    }
    const sealSeconds = (performance.now() - sealStarted) / 1000;
    await a.svc.engine.snapshotNow();
    const stats = a.svc.engine.stats();
    const sealed = { liveDays: stats.liveDays, sealedDays: stats.sealedDays, heapBytes: heap(), snapshotBytes: snapshotBytes(a.dataDir), sealSeconds };
    const after = await waitForOk(a.svc.url, range(clock), probe);
    if (after.pageviews !== want.pageviews || after.users !== want.users) throw new Error(`sealing changed the answer: ${JSON.stringify([want.pageviews, after.pageviews])}`);

    progress.show('cluster history: a node with an empty data directory');
    const freshStarted = performance.now();
    const c = await start('c');
    for (;;) {
      const r = await call(c.svc.url, range(clock), probe);
      if (r.status === 200 && r.body.pageviews === want.pageviews && r.body.users === want.users) break;
      if (performance.now() - freshStarted > FRESH_DEADLINE_MS) throw new Error('the fresh node did not answer as node a');
      await sleep(50);
    }
    const cs = c.svc.engine.stats();
    const freshNode = { seconds: (performance.now() - freshStarted) / 1000, liveDays: cs.liveDays, sealedDays: cs.sealedDays };
    return { events: sent, live, sealed, freshNode };
  } finally {
    for (const n of nodes.reverse()) await n.stop().catch(() => {});
    // Free its stream's storage reservation on the bench's servers (the later sections create their own).
    const nc = await connectNats(cluster.urlList, 'bench-history-cleanup');
    await (await jetstreamManager(nc)).streams.delete(resourceNames(tag).stream).catch(() => false);
    await nc.close();
  }
}

async function waitForOk(url: string, route: string, key: string): Promise<any> {
  const started = performance.now();
  for (;;) {
    const r = await call(url, route, key);
    if (r.status === 200) return r.body;
    if (performance.now() - started > 60_000) throw new Error(`${route}: ${r.status} ${JSON.stringify(r.body)}`);
    await sleep(50);
  }
}
