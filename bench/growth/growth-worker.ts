import { randomBytes } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { loadConfig } from '../../src/config.ts';
import { toSnapshot } from '../../src/core/snapshot.ts';
import { AnalyticsState, apply } from '../../src/core/state.ts';
import type { LogRecord, StoredEvent } from '../../src/core/types.ts';
import { generateKey, hashKey } from '../../src/engine/keys.ts';
import { Sealer } from '../../src/engine/sealer.ts';
import { startService, type RunningService } from '../../src/service.ts';
import { LogStore } from '../../src/store/log-store.ts';
import { SnapshotFiles } from '../../src/store/snapshot-files.ts';
import { serveCommands } from '../lib/child.ts';
import { COUNTRIES, DEVICES, PATHS, SITE, SOURCES, rng } from '../state/generate-events.ts';

/**
 * The growth child of bench/growth.ts, one process per step so heaps and RSS do not carry over:
 * - `build`: N events over D days for P projects (Zipf traffic), in receive-time order, appended to a real log and
 *   folded by the real reducer, with the real Sealer writing days as their windows close (day by day, as a year of
 *   traffic would), then a snapshot of what is left live.
 * - `serve` / `memory` / `stop`: the service on that data directory, from a fresh process.
 * - `ping`: GET /health every 5 ms from outside the service; the longest wait is the longest event-loop block.
 */

const DAY_MS = 86_400_000;
/** Records per append: one LMDB transaction of a few MB. */
const APPEND_BATCH = 20_000;
/** Mean events per session ≈ 3.3, as in bench/state. */
const MEAN_EXTRA_EVENTS = 2.3;
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

/** Zipf(1) over `n` ranks: cumulative weights for a binary search. */
function zipf(n: number): Float64Array {
  const c = new Float64Array(n);
  let s = 0;
  for (let i = 0; i < n; i++) c[i] = s += 1 / (i + 1);
  for (let i = 0; i < n; i++) c[i]! /= s;
  return c;
}

function pick(c: Float64Array, x: number): number {
  let lo = 0;
  let hi = c.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (c[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function* traffic(a: BuildArgs, ids: string[]): Generator<StoredEvent> {
  const rand = rng(1234);
  const weights = zipf(ids.length);
  const first = Date.parse(`${a.lastDay}T00:00:00Z`) - (a.days - 1) * DAY_MS;
  let made = 0;
  let sessions = 0;
  for (let d = 0; d < a.days; d++) {
    const target = Math.round(((d + 1) * a.events) / a.days);
    // A day's sessions start in time order, so receive times only move forward (as the log would have them).
    const starts: number[] = [];
    let planned = made;
    const counts: number[] = [];
    while (planned < target) {
      const n = Math.min(target - planned, 1 + Math.floor(-Math.log(1 - rand()) * MEAN_EXTRA_EVENTS));
      counts.push(n);
      planned += n;
      starts.push(first + d * DAY_MS + Math.floor(rand() * (DAY_MS - 600_000)));
    }
    starts.sort((x, y) => x - y);
    for (let s = 0; s < counts.length; s++) {
      const p = ids[pick(weights, rand())]!;
      const sessionId = `s${(sessions++).toString(36)}`;
      const [referrer, source] = SOURCES[Math.floor(rand() * SOURCES.length)]!;
      const country = COUNTRIES[Math.floor(rand() ** 2 * COUNTRIES.length)]!;
      const device = DEVICES[Math.floor(rand() * DEVICES.length)]!;
      let ts = starts[s]!;
      for (let k = 0; k < counts[s]!; k++) {
        const pathName = PATHS[Math.floor(rand() ** 1.5 * PATHS.length)]!;
        yield {
          t: 'e', p, ts, rt: ts + 150, day: new Date(ts).toISOString().slice(0, 10), event: k === 0 || rand() < 0.8 ? 'page_view' : 'click',
          url: SITE + pathName, path: pathName, referrer: k === 0 ? referrer : `${SITE}/`, source: k === 0 ? source : 'Direct', sessionId,
          user: `s:${sessionId}`, country, device, params: {}, eventId: `${(made + k).toString(36)}`,
        };
        ts += 1000;
      }
      made += counts[s]!;
    }
  }
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
  let seq = store.lastSeq();
  let batch: LogRecord[] = [];
  let inFlight: Promise<number> = Promise.resolve(0);
  let sealedDays = 0;
  const flush = async () => {
    await inFlight;
    const appending = batch;
    inFlight = store.append(appending, () => rememberedIds.writeWith(appending));
    for (const r of batch) apply(state, ++seq, r);
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
    return { rssBytes: process.memoryUsage().rss, heapUsedBytes: process.memoryUsage().heapUsed };
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
