import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { storedEvents } from '../state/generate-events.ts';
import { serveCommands } from './child.ts';

/**
 * A child of bench/compare-checkouts.ts: runs the service or the log of another checkout of this repository (its own
 * src/, imported by path), so two commits can be measured side by side under the same machine load. Only the
 * long-lived entry points are used (loadConfig, startService, engine.createProject, LogStore.open/append/readAfter,
 * AnalyticsState/apply), which every commit since the bench existed has.
 */

type Mod = Record<string, any>;
const load = (repo: string, file: string): Promise<Mod> => import(pathToFileURL(path.join(repo, file)).href) as Promise<Mod>;

let service: { url: string; stop(): Promise<void> } | undefined;
let dataDir: string | undefined;

async function start(a: { repo: string; durability: 'flush' | 'commit' }): Promise<{ url: string; grpcAddress: string; secret: string; projectId: string }> {
  const { loadConfig } = await load(a.repo, 'src/config.ts');
  const { startService } = await load(a.repo, 'src/service.ts');
  dataDir = mkdtempSync(path.join(tmpdir(), 'analytics-ab-'));
  const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
  const config = loadConfig({
    PORT: '0',
    GRPC_PORT: '0',
    HOST: '127.0.0.1',
    ANALYTICS_DATA_DIR: dataDir,
    ANALYTICS_ADMIN_KEY: adminKey,
    ANALYTICS_QUIET: '1',
    ANALYTICS_DURABILITY: a.durability,
    ANALYTICS_RATE_PER_KEY: '1000000000',
    ANALYTICS_BURST_PER_KEY: '1000000000',
  });
  service = await startService(config, { log: () => {} });
  const created = await (service as any).engine.createProject(
    { authorization: `Bearer ${adminKey}`, ip: '127.0.0.1', userAgent: '' },
    { name: 'bench', allowed_origins: [], allowed_referrers: [], monthly_quota: 0 },
  );
  if (!created.ok) throw new Error(`createProject: ${created.error.message}`);
  return { url: service!.url, grpcAddress: (service as unknown as { grpcAddress: string }).grpcAddress, secret: created.value.keys.secret, projectId: created.value.project.id };
}

/**
 * Writes `events` typical records with the checkout's own LogStore.append in batches of `batch` (many appends in
 * flight, as concurrent requests are), then times a full replay (readAfter + apply) in this fresh process.
 */
async function replay(a: { repo: string; events: number; batch: number }): Promise<{ eventsPerSec: number; decodePerSec: number; bytes: number }> {
  // where the checkout keeps its log store: src/store/lmdb/, or src/store/ in checkouts older than that folder
  const logStore = ['src/store/lmdb/log-store.ts', 'src/store/log-store.ts'].find((f) => existsSync(path.join(a.repo, f)))!;
  const { LogStore } = await load(a.repo, logStore);
  const { AnalyticsState, apply } = await load(a.repo, 'src/core/state.ts');
  const dir = mkdtempSync(path.join(tmpdir(), 'analytics-ab-replay-'));
  try {
    const store = LogStore.open(dir, 'commit');
    const lastDay = new Date().toISOString().slice(0, 10);
    let batch: unknown[] = [];
    let inFlight: Promise<unknown>[] = [];
    for (const e of storedEvents({ projectId: 'p_bench', events: a.events, lastDay, days: 30 })) {
      batch.push(e);
      if (batch.length === a.batch) {
        inFlight.push(store.append(batch));
        batch = [];
        if (inFlight.length >= 256) {
          await Promise.all(inFlight);
          inFlight = [];
        }
      }
    }
    if (batch.length > 0) inFlight.push(store.append(batch));
    await Promise.all(inFlight);
    await store.close();
    const r = LogStore.open(dir, 'commit');
    // CPU time of this process (one thread does the work), so other work on a shared machine counts less
    const cpu = () => {
      const u = process.cpuUsage();
      return (u.user + u.system) / 1e6;
    };
    let t = cpu();
    let n = 0;
    for (const { record } of r.readAfter(0)) if (record.t === 'e') n++;
    const decodePerSec = n / (cpu() - t);
    t = cpu();
    const state = new AnalyticsState();
    let m = 0;
    for (const { seq, record } of r.readAfter(0)) {
      apply(state, seq, record);
      m++;
    }
    const eventsPerSec = m / (cpu() - t);
    await r.close();
    const { statSync } = await import('node:fs');
    return { eventsPerSec, decodePerSec, bytes: statSync(path.join(dir, 'analytics.lmdb')).size };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

serveCommands({
  start,
  replay,
  /** CPU seconds this process (the service and lmdb-js's writer thread) has used */
  cpu() {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1e6;
  },
  async stop() {
    await service?.stop();
    service = undefined;
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    return true;
  },
});
