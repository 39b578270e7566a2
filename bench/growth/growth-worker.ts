import { readFileSync } from 'node:fs';
import { monitorEventLoopDelay, performance, type IntervalHistogram } from 'node:perf_hooks';
import { loadConfig } from '../../src/config.ts';
import { startService, tuneHeap, type RunningService } from '../../src/service.ts';
import { serveCommands } from '../lib/child.ts';
import { buildBulk, bulkColumns, bulkState } from './build-bulk.ts';
import type { BuildArgs, BuildResult } from './build-common.ts';
import { buildReplay } from './build-replay.ts';

export type { BuildArgs, BuildResult } from './build-common.ts';

/**
 * The growth child of bench/growth.ts, one process per step so heaps and RSS do not carry over:
 * - `build`: N events over D days for P projects (Zipf traffic), in receive-time order: the log, sealed days, month
 *   rollups, column segments and the snapshot of what is left live, as a service that took that traffic would hold
 *   them. In bulk by default (build-bulk.ts, with `bulkState` and `bulkColumns` in two more processes); `mode: 'replay'` through the
 *   service's own per-batch path with the real Sealer (build-replay.ts), which the bulk build is tested against.
 * - `serve` / `memory` / `stop`: the service on that data directory, from a fresh process.
 * - `ping`: GET /health every 5 ms from outside the service; the longest wait is the longest event-loop block, or
 *   the pinging process waiting for a core.
 * - `loopDelayStart` / `loopDelayStop`: the service process's own event-loop delay meanwhile (monitorEventLoopDelay),
 *   which no other process's share of the cores enters.
 */

async function build(a: BuildArgs): Promise<BuildResult> {
  return a.mode === 'replay' ? buildReplay(a) : buildBulk(a);
}

let service: RunningService | undefined;
let loopDelay: IntervalHistogram | undefined;

/** Anonymous RSS is what the process holds itself; LMDB's mapped pages (file-backed) are the page cache's. */
function anonBytes(): number {
  const anon = /RssAnon:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
  return anon ? Number(anon[1]) * 1024 : 0;
}

function gc(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

async function serve(a: { dir: string; adminKey: string; env?: Record<string, string> }): Promise<{ url: string; startMs: number; rssBytes: number; anonBytes: number }> {
  const config = loadConfig({ PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: a.dir, ANALYTICS_ADMIN_KEY: a.adminKey, ANALYTICS_QUIET: '1', ...a.env });
  const t = performance.now();
  service = await startService(config, { log: () => {} });
  const startMs = performance.now() - t;
  tuneHeap(config); // as src/main.ts does: this child is the service's process
  gc();
  return { url: service.url, startMs, rssBytes: process.memoryUsage().rss, anonBytes: anonBytes() };
}

/**
 * GET /health every `everyMs` for `durationMs`: the longest answer is the longest the service's loop was blocked.
 * One request first, not timed: this process's first fetch loads and compiles its HTTP client and opens the
 * connection (~50 ms of CPU, 300 ms of wall time on two cores a starting service and its load share), which was the
 * slowest ping of every window it began.
 */
async function ping(a: { url: string; durationMs: number; everyMs: number }): Promise<{ pings: number; maxMs: number; over50: number; p99: number }> {
  await (await fetch(`${a.url}/health`)).arrayBuffer();
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
  bulkState,
  bulkColumns,
  serve,
  ping,
  memory() {
    gc();
    const m = process.memoryUsage();
    return { rssBytes: m.rss, anonBytes: anonBytes(), heapUsedBytes: m.heapUsed, arrayBuffersBytes: m.arrayBuffers };
  },
  async snapshotNow() {
    const t = performance.now();
    await service?.engine.snapshotNow();
    return performance.now() - t;
  },
  loopDelayStart() {
    loopDelay = monitorEventLoopDelay({ resolution: 5 });
    loopDelay.enable();
    return true;
  },
  loopDelayStop() {
    const h = loopDelay;
    loopDelay = undefined;
    if (!h) return { maxMs: 0, p99Ms: 0 };
    h.disable();
    return { maxMs: h.max / 1e6, p99Ms: h.percentile(99) / 1e6 };
  },
  async stop() {
    await service?.stop();
    service = undefined;
    return true;
  },
});
