import path from 'node:path';
import { BenchChild, REPO_ROOT } from './lib/child.ts';
import type { Progress } from './lib/progress.ts';
import type { LoadResult } from './load/load-worker.ts';
import type { BuildResult, RangeLatency, ReplayResult, RestoreResult } from './state/state-worker.ts';

/**
 * The big-state section: N events over 30 days built through the reducer and written to a real log, then each
 * measurement in a fresh child process (restore, full replay, the service holding the state), so heaps and RSS
 * figures do not carry over from one measurement to the next.
 */

export interface StateParams {
  events: number;
  days: number;
  metricsIterations: number;
  httpMetricsMs: number;
}

export interface HttpRangeLatency {
  days: number;
  latency: LoadResult['latency'];
  errors?: string;
}

export interface StateResults {
  build: BuildResult;
  restore: RestoreResult;
  replay: ReplayResult;
  serve: { startMs: number; rssBytes: number; heapUsedBytes: number };
  http: HttpRangeLatency[];
}

const WORKER = path.join(REPO_ROOT, 'bench/state/state-worker.ts');
/** The state of 10M events is a few hundred MB; building it also holds one batch of records and the generator. */
const BIG_HEAP = ['--expose-gc', '--max-old-space-size=8192'];

async function inChild<T>(cmd: string, args: object): Promise<T> {
  const child = new BenchChild(WORKER, { nodeArgs: BIG_HEAP });
  try {
    return await child.call<T>(cmd, args);
  } finally {
    await child.stop();
  }
}

export async function runState(tmp: string, p: StateParams, progress: Progress): Promise<StateResults> {
  const dir = path.join(tmp, 'state');
  const lastDay = new Date().toISOString().slice(0, 10);
  progress.next(`state: generating ${p.events.toLocaleString('en-US')} events over ${p.days} days into the log and the reducer`);
  const build = await inChild<BuildResult>('build', { dir, events: p.events, days: p.days, lastDay, metricsIterations: p.metricsIterations });
  progress.next('state: restoring the snapshot in a fresh process');
  const restore = await inChild<RestoreResult>('restore', { dir });
  progress.next(`state: replaying the whole log (${p.events.toLocaleString('en-US')} records) in a fresh process`);
  const replay = await inChild<ReplayResult>('replay', { dir });

  progress.next('state: starting the service on that data directory; GET /metrics latency');
  const svc = new BenchChild(WORKER, { nodeArgs: BIG_HEAP });
  const load = new BenchChild(path.join(REPO_ROOT, 'bench/load/load-worker.ts'));
  try {
    const served = await svc.call<{ url: string; startMs: number; rssBytes: number; heapUsedBytes: number }>('serve', { dir, adminKey: build.adminKey });
    const http: HttpRangeLatency[] = [];
    for (const range of build.core) {
      const spec = {
        origin: served.url,
        path: `/metrics?from=${range.from}&to=${range.to}&compare=previous`,
        method: 'GET',
        headers: { authorization: `Bearer ${build.secretKey}` },
        connections: 1,
      };
      progress.show(`state: GET /metrics over ${range.days} day(s), one client back to back`);
      await load.call<LoadResult>('closed', { ...spec, durationMs: Math.min(1000, p.httpMetricsMs / 2) });
      const r = await load.call<LoadResult>('closed', { ...spec, durationMs: p.httpMetricsMs });
      const row: HttpRangeLatency = { days: range.days, latency: r.latency };
      if (r.sampleError) row.errors = r.sampleError;
      http.push(row);
    }
    await svc.call('stop');
    return { build, restore, replay, serve: { startMs: served.startMs, rssBytes: served.rssBytes, heapUsedBytes: served.heapUsedBytes }, http };
  } finally {
    await load.call('close').catch(() => {});
    await load.stop();
    await svc.stop();
  }
}

export type { RangeLatency };
