import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { loadConfig } from '../../src/config.ts';
import { metrics } from '../../src/core/metrics.ts';
import { fromSnapshot, toSnapshot } from '../../src/core/snapshot.ts';
import { AnalyticsState, apply } from '../../src/core/state.ts';
import type { LogRecord } from '../../src/core/types.ts';
import { generateKey, hashKey } from '../../src/engine/keys.ts';
import { startService, type RunningService } from '../../src/service.ts';
import { LogStore } from '../../src/store/lmdb/log-store.ts';
import { SnapshotFiles } from '../../src/store/files/snapshot-files.ts';
import { serveCommands } from '../lib/child.ts';
import { newHistogram, summarize, type LatencySummary } from '../lib/latency.ts';
import { storedEvents, TRACKED_PROPS } from './generate-events.ts';

/**
 * The big-state child of bench/run.ts. One process per measurement, so each starts from a clean heap:
 * - `build`: generates the traffic, appends it to a real LogStore in large batches, folds it with the reducer, times
 *   the core `metrics()` for 1-, 7- and 30-day ranges, writes a snapshot and a project with a secret key.
 * - `restore`: SnapshotFiles.loadNewest + fromSnapshot, then RSS after a full GC.
 * - `replay`: LogStore.readAfter(0) + apply over the whole log (and a decode-only pass, to show what bounds it).
 * - `serve`: startService on that data directory (it recovers from the snapshot) for HTTP reads, and its RSS.
 */

/** Records per LogStore.append: one LMDB transaction of ~2.5 MB, large enough that commits are not the cost. */
const APPEND_BATCH = 20_000;
const DAY_MS = 86_400_000;

export interface BuildArgs {
  dir: string;
  events: number;
  days: number;
  lastDay: string;
  metricsIterations: number;
}

export interface RangeLatency {
  days: number;
  from: string;
  to: string;
  latency: LatencySummary;
  users: number;
  sessions: number;
}

export interface BuildResult {
  events: number;
  sessions: number;
  projectId: string;
  secretKey: string;
  adminKey: string;
  buildSeconds: number;
  foldEventsPerSec: number;
  core: RangeLatency[];
  /** 30 days compared with 30 days that hold data as well (the bench's data spans 30 days, so the range itself) */
  coreFullCompare: RangeLatency;
  toSnapshotMs: number;
  snapshotWriteMs: number;
  snapshotBytes: number;
  heapUsedBytes: number;
  rssBytes: number;
}

function gc(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

function addDays(day: string, n: number): string {
  return new Date(Date.parse(`${day}T00:00:00Z`) + n * DAY_MS).toISOString().slice(0, 10);
}

async function build(a: BuildArgs): Promise<BuildResult> {
  const started = performance.now();
  const store = LogStore.open(a.dir, 'commit');
  const projectId = 'p_bench';
  const secretKey = generateKey('secret');
  const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
  const now = Date.now();
  await store.putProject(
    {
      id: projectId,
      name: 'bench',
      ownerId: 'o_bench',
      allowedOrigins: [],
      allowedReferrers: [],
      timezone: 'UTC',
      monthlyQuota: 0,
      createdAt: now,
      // reads are measured back to back; the default 1,000/s bucket would answer 429
      rate: { perKey: 1e9, burstPerKey: 1e9 },
      trackedProps: TRACKED_PROPS,
    },
    [[hashKey(secretKey), { kind: 'secret', projectId, ownerId: 'o_bench', createdAt: now }]],
  );

  const state = new AnalyticsState();
  const stats = { sessions: 0 };
  let foldMs = 0;
  let seq = store.lastSeq();
  let inFlight: Promise<number> = Promise.resolve(0);
  let batch: LogRecord[] = [];
  const flush = async () => {
    await inFlight; // one append in flight while the next batch is generated and folded
    inFlight = store.append(batch);
    const t = performance.now();
    for (let i = 0; i < batch.length; i++) apply(state, ++seq, batch[i]!);
    foldMs += performance.now() - t;
    batch = [];
  };
  for (const e of storedEvents({ projectId, events: a.events, lastDay: a.lastDay, days: a.days }, stats)) {
    batch.push(e);
    if (batch.length === APPEND_BATCH) await flush();
  }
  if (batch.length > 0) await flush();
  await inFlight;
  const sessions = stats.sessions;
  const buildSeconds = (performance.now() - started) / 1000;

  const core: RangeLatency[] = [];
  for (const days of [1, 7, 30]) {
    const from = addDays(a.lastDay, -(days - 1));
    const h = newHistogram();
    // Everything on: the tracked props and a comparison with the previous range of the same length.
    const opts = { trackedProps: TRACKED_PROPS, compare: { from: addDays(from, -days), to: addDays(from, -1) } };
    let m = metrics(state, projectId, 'UTC', from, a.lastDay, opts);
    for (let i = 0; i < Math.ceil(a.metricsIterations / 10); i++) metrics(state, projectId, 'UTC', from, a.lastDay, opts); // warm-up
    for (let i = 0; i < a.metricsIterations; i++) {
      const t = performance.now();
      m = metrics(state, projectId, 'UTC', from, a.lastDay, opts);
      h.recordValue(Math.max(1, Math.round((performance.now() - t) * 1000)));
    }
    core.push({ days, from, to: a.lastDay, latency: summarize(h), users: m.users, sessions: m.sessions });
  }
  const coreFullCompare = timeRange(state, projectId, addDays(a.lastDay, -29), a.lastDay, a.metricsIterations);

  let t = performance.now();
  const data = toSnapshot(state);
  const toSnapshotMs = performance.now() - t;
  t = performance.now();
  const files = new SnapshotFiles(a.dir);
  const { file } = await files.write(data);
  const snapshotWriteMs = performance.now() - t;
  // The service expires eventIds older than 48 h every hour: 30 days of traffic would have had most of them expired.
  await store.openRememberedIds().expire(Date.now());
  const { statSync } = await import('node:fs');
  const snapshotBytes = statSync(file).size;
  await store.close();
  gc();
  const mem = process.memoryUsage();
  return {
    events: a.events,
    sessions,
    projectId,
    secretKey,
    adminKey,
    buildSeconds,
    foldEventsPerSec: a.events / (foldMs / 1000),
    core,
    coreFullCompare,
    toSnapshotMs,
    snapshotWriteMs,
    snapshotBytes,
    heapUsedBytes: mem.heapUsed,
    rssBytes: mem.rss,
  };
}

/**
 * The worst case of `compare`: a 30-day range whose comparison range holds 30 days of data too, so the distinct
 * users of 60 full days are merged. The bench's log spans 30 days, so the comparison is the range itself.
 */
function timeRange(state: AnalyticsState, projectId: string, from: string, to: string, iterations: number): RangeLatency {
  const opts = { trackedProps: TRACKED_PROPS, compare: { from, to } };
  let m = metrics(state, projectId, 'UTC', from, to, opts);
  for (let i = 0; i < Math.ceil(iterations / 10); i++) metrics(state, projectId, 'UTC', from, to, opts); // warm-up
  const h = newHistogram();
  for (let i = 0; i < iterations; i++) {
    const t = performance.now();
    m = metrics(state, projectId, 'UTC', from, to, opts);
    h.recordValue(Math.max(1, Math.round((performance.now() - t) * 1000)));
  }
  return { days: 30, from, to, latency: summarize(h), users: m.users, sessions: m.sessions };
}

export interface RestoreResult {
  loadMs: number;
  fromSnapshotMs: number;
  totalMs: number;
  rssBytes: number;
  heapUsedBytes: number;
  days: number;
}

function restore(a: { dir: string }): RestoreResult {
  const files = new SnapshotFiles(a.dir);
  const t0 = performance.now();
  const data = files.loadNewest(Number.MAX_SAFE_INTEGER, (file, why) => {
    throw new Error(`snapshot ${file} unusable: ${why}`);
  });
  if (!data) throw new Error('no snapshot to restore');
  const t1 = performance.now();
  const state = fromSnapshot(data);
  const t2 = performance.now();
  gc();
  const mem = process.memoryUsage();
  return {
    loadMs: t1 - t0,
    fromSnapshotMs: t2 - t1,
    totalMs: t2 - t0,
    rssBytes: mem.rss,
    heapUsedBytes: mem.heapUsed,
    days: state.projects.get('p_bench')?.days.size ?? 0,
  };
}

export interface ReplayResult {
  records: number;
  seconds: number;
  eventsPerSec: number;
  /** the same scan without apply: what reading + decoding the log alone allows */
  decodeOnlyPerSec: number;
  rssBytes: number;
}

function replay(a: { dir: string }): ReplayResult {
  const store = LogStore.open(a.dir, 'commit');
  // Decode-only pass first (it also warms the page cache, so the timed replay is not measuring the disk).
  let t = performance.now();
  let n = 0;
  for (const { record } of store.readAfter(0)) if (record.t === 'e') n++;
  const decodeSeconds = (performance.now() - t) / 1000;
  const records = store.lastSeq();
  t = performance.now();
  const state = new AnalyticsState();
  for (const { seq, record } of store.readAfter(0)) apply(state, seq, record);
  const seconds = (performance.now() - t) / 1000;
  gc();
  const rss = process.memoryUsage().rss;
  void store.close();
  return { records, seconds, eventsPerSec: records / seconds, decodeOnlyPerSec: n / decodeSeconds, rssBytes: rss };
}

let service: RunningService | undefined;

async function serve(a: { dir: string; adminKey: string }): Promise<{ url: string; startMs: number; rssBytes: number; heapUsedBytes: number }> {
  const config = loadConfig({
    PORT: '0',
    GRPC_PORT: '0',
    HOST: '127.0.0.1',
    ANALYTICS_DATA_DIR: a.dir,
    ANALYTICS_ADMIN_KEY: a.adminKey,
    ANALYTICS_QUIET: '1',
  });
  const t = performance.now();
  service = await startService(config, { log: () => {} });
  const startMs = performance.now() - t;
  gc();
  const mem = process.memoryUsage();
  return { url: service.url, startMs, rssBytes: mem.rss, heapUsedBytes: mem.heapUsed };
}

serveCommands({
  build,
  restore,
  replay,
  serve,
  async stop() {
    await service?.stop();
    service = undefined;
    return true;
  },
});
