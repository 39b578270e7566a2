import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { loadConfig } from '../../src/config.ts';
import { toSnapshot } from '../../src/core/snapshot.ts';
import { AnalyticsState, apply } from '../../src/core/state.ts';
import type { LogRecord } from '../../src/core/types.ts';
import { generateKey, hashKey } from '../../src/engine/keys.ts';
import { Sealer } from '../../src/engine/sealer.ts';
import { startService, type RunningService } from '../../src/service.ts';
import { ColumnProjection } from '../../src/engine/column-projection.ts';
import { ColumnStore } from '../../src/store/lmdb/column-store.ts';
import { LogStore } from '../../src/store/lmdb/log-store.ts';
import { SnapshotFiles } from '../../src/store/files/snapshot-files.ts';
import { serveCommands } from '../lib/child.ts';
import { traffic } from './traffic.ts';

/**
 * The growth child of bench/growth.ts, one process per step so heaps and RSS do not carry over:
 * - `build`: N events over D days for P projects (Zipf traffic), in receive-time order, appended to a real log and
 *   folded by the real reducer, with the real Sealer writing days as their windows close (day by day, as a year of
 *   traffic would), then a snapshot of what is left live.
 * - `serve` / `memory` / `stop`: the service on that data directory, from a fresh process.
 * - `ping`: GET /health every 5 ms from outside the service; the longest wait is the longest event-loop block.
 */

/** Open column events before the build seals them (the service seals every minute; a bulk build in larger steps). */
const COLUMN_FLUSH_EVENTS = 200_000;
/** Records per append: one LMDB transaction of a few MB. */
const APPEND_BATCH = 20_000;
/** Reads and loads are measured back to back: the default per-key bucket would answer 429. */
const UNLIMITED = { perKey: 1e9, burstPerKey: 1e9, perIp: 1e9, burstPerIp: 1e9 };

export interface BuildArgs {
  dir: string;
  projects: number;
  events: number;
  days: number;
  /** the last day of traffic (UTC, YYYY-MM-DD) */
  lastDay: string;
}

export interface BuildResult {
  seconds: number;
  events: number;
  projects: number;
  liveDays: number;
  sealedDays: number;
  logBytesPerEvent: number;
  dataBytes: number;
  snapshotBytes: number;
  /** the busiest project (Zipf rank 1), for reads */
  projectId: string;
  secretKey: string;
  adminKey: string;
}

function dirBytes(dir: string): number {
  let n = 0;
  for (const f of readdirSync(dir, { recursive: true, withFileTypes: true })) if (f.isFile()) n += statSync(path.join(f.parentPath ?? (f as { path: string }).path, f.name)).size;
  return n;
}

async function build(a: BuildArgs): Promise<BuildResult> {
  const started = performance.now();
  const store = LogStore.open(a.dir, 'commit');
  const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
  const secretKey = generateKey('secret');
  const ids = Array.from({ length: a.projects }, (_, i) => `p_g${i.toString().padStart(6, '0')}`);
  const now = Date.now();
  // All at once: lmdb-js commits the writes of one turn together, so 10,000 projects cost one flush, not 10,000.
  await Promise.all(
    ids.map((id, i) =>
      store.putProject(
        { id, name: `growth ${i}`, ownerId: 'o_bench', allowedOrigins: [], allowedReferrers: [], timezone: 'UTC', monthlyQuota: 0, createdAt: now, rate: UNLIMITED },
        i === 0 ? [[hashKey(secretKey), { kind: 'secret', projectId: id, ownerId: 'o_bench', createdAt: now }]] : [],
      ),
    ),
  );
  const state = new AnalyticsState();
  const sealer = new Sealer(state, store.openSealedStore(), (line) => process.stderr.write(`${line}\n`));
  const rememberedIds = store.openRememberedIds();
  // The column store is a projection of the same log: a service that ran all along has it folded up to the end, so
  // a start replays only what came after its last seal (the build writes it as the service would).
  const columns = new ColumnProjection(ColumnStore.open(a.dir), (line) => process.stderr.write(`${line}\n`));
  let seq = store.lastSeq();
  let batch: LogRecord[] = [];
  let inFlight: Promise<number> = Promise.resolve(0);
  let sealedDays = 0;
  const flush = async () => {
    await inFlight;
    const appending = batch;
    inFlight = store.append(appending, () => rememberedIds.writeWith(appending));
    columns.fold(seq + 1, appending);
    for (const r of batch) apply(state, ++seq, r);
    if (columns.openCount() >= COLUMN_FLUSH_EVENTS) await columns.flush();
    sealedDays += state.sealQueue.length;
    sealer.kick();
    await sealer.idle();
    batch = [];
  };
  for (const e of traffic(a, ids)) {
    batch.push(e);
    if (batch.length === APPEND_BATCH) await flush();
  }
  if (batch.length > 0) await flush();
  await inFlight;
  await columns.flush();
  await columns.close();
  let liveDays = 0;
  for (const p of state.projects.values()) liveDays += p.days.size;
  // The service forgets eventIds older than 48 h every hour; a year of traffic would have had them expired.
  await store.openRememberedIds().expire(Date.now());
  const files = new SnapshotFiles(a.dir);
  const { file } = await files.write(toSnapshot(state));
  await files.close();
  await store.close();
  const dataBytes = dirBytes(a.dir);
  return {
    seconds: (performance.now() - started) / 1000,
    events: a.events,
    projects: a.projects,
    liveDays,
    sealedDays,
    logBytesPerEvent: statSync(path.join(a.dir, 'analytics.lmdb')).size / a.events,
    dataBytes,
    snapshotBytes: statSync(file).size,
    projectId: ids[0]!,
    secretKey,
    adminKey,
  };
}

let service: RunningService | undefined;

function gc(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

async function serve(a: { dir: string; adminKey: string; env?: Record<string, string> }): Promise<{ url: string; startMs: number; rssBytes: number }> {
  const config = loadConfig({ PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: a.dir, ANALYTICS_ADMIN_KEY: a.adminKey, ANALYTICS_QUIET: '1', ...a.env });
  const t = performance.now();
  service = await startService(config, { log: () => {} });
  const startMs = performance.now() - t;
  gc();
  return { url: service.url, startMs, rssBytes: process.memoryUsage().rss };
}

/** GET /health every `everyMs` for `durationMs`: the longest answer is the longest the service's loop was blocked. */
async function ping(a: { url: string; durationMs: number; everyMs: number }): Promise<{ pings: number; maxMs: number; over50: number; p99: number }> {
  const times: number[] = [];
  const end = performance.now() + a.durationMs;
  while (performance.now() < end) {
    const t = performance.now();
    const r = await fetch(`${a.url}/health`);
    await r.arrayBuffer();
    times.push(performance.now() - t);
    await new Promise((resolve) => setTimeout(resolve, a.everyMs));
  }
  times.sort((x, y) => x - y);
  return { pings: times.length, maxMs: times.at(-1) ?? 0, over50: times.filter((x) => x > 50).length, p99: times[Math.floor(times.length * 0.99)] ?? 0 };
}

serveCommands({
  build,
  serve,
  ping,
  memory() {
    gc();
    // Anonymous RSS is what the process holds itself; LMDB's mapped pages (file-backed) are the page cache's.
    const anon = /RssAnon:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
    const m = process.memoryUsage();
    return { rssBytes: m.rss, anonBytes: anon ? Number(anon[1]) * 1024 : 0, heapUsedBytes: m.heapUsed, arrayBuffersBytes: m.arrayBuffers };
  },
  async snapshotNow() {
    const t = performance.now();
    await service?.engine.snapshotNow();
    return performance.now() - t;
  },
  async stop() {
    await service?.stop();
    service = undefined;
    return true;
  },
});
