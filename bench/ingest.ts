import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { loadConfig } from '../src/config.ts';
import { startService, type RunningService } from '../src/service.ts';
import { BenchChild, REPO_ROOT } from './lib/child.ts';
import { median, medianBy } from './lib/latency.ts';
import type { Progress } from './lib/progress.ts';
import { fsyncLatency, openFloorDb, rawBatchPuts, startBareServer, startLmdbServer, type FloorServer } from './load/floors.ts';
import type { LoadResult, LoadSpec } from './load/load-worker.ts';
import { storedEvents, USER_AGENTS, wireEvents } from './state/generate-events.ts';

/**
 * The ingest section: floors, the real service over HTTP (single events and batches of 100), gRPC next to it.
 * Every target runs once per round and rounds interleave the targets (A B C A B C ...), so a burst of load from
 * other work on the machine hits floors and service alike; each figure is the median over rounds.
 */

export const CONNECTIONS = 32;
export const BATCH_SIZE = 100;

export interface IngestParams {
  warmupMs: number;
  roundMs: number;
  rounds: number;
  /** fixed-rate latency run, as a share of the measured single-event saturation throughput */
  openLoopShare: number;
}

export interface TargetResult {
  name: string;
  /** events per second, median over rounds */
  eventsPerSec: number;
  rounds: number[];
  /** latency of the median round (closed loop: send → answer) */
  latency?: LoadResult['latency'];
  errors?: string;
}

export interface GrpcFigures {
  unaryEventsPerSec: number;
  streamEventsPerSec: number;
}

export interface IngestResults {
  bareSingle: TargetResult;
  lmdbSingle: TargetResult;
  serviceSingle: TargetResult;
  serviceSingleNoUa: TargetResult;
  /** the same service with ANALYTICS_DURABILITY=commit: what single-event ingest does when no fsync is awaited */
  serviceSingleCommit: TargetResult;
  bareBatch: TargetResult;
  serviceBatch: TargetResult;
  rawPuts: TargetResult;
  /** fdatasync of 4 KiB, back to back (eventsPerSec = syncs/s) */
  fsync: TargetResult;
  /** the service and the lmdb floor at the same fixed rate */
  openLoop: { rate: number; result: LoadResult; lmdbFloor: LoadResult } | undefined;
  grpc: { unary: TargetResult; stream: TargetResult } | { skipped: string };
}

interface Target {
  name: string;
  run(ms: number): Promise<{ eventsPerSec: number; result?: LoadResult; latency?: LoadResult['latency'] }>;
}

function httpTarget(worker: BenchChild, name: string, spec: Omit<LoadSpec, 'durationMs'>, eventsPerRequest: number): Target {
  return {
    name,
    async run(ms) {
      const result = await worker.call<LoadResult>('closed', { ...spec, durationMs: ms });
      return { eventsPerSec: result.rps * eventsPerRequest, result };
    },
  };
}

async function startBenchService(dir: string, durability: 'flush' | 'commit') {
  const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
  const config = loadConfig({
    PORT: '0',
    GRPC_PORT: '0',
    HOST: '127.0.0.1',
    ANALYTICS_DATA_DIR: dir,
    ANALYTICS_ADMIN_KEY: adminKey,
    ANALYTICS_QUIET: '1',
    ANALYTICS_DURABILITY: durability,
    // the benches measure the write path, not the default 1,000 requests/s per key bucket
    ANALYTICS_RATE_PER_KEY: '1000000000',
    ANALYTICS_BURST_PER_KEY: '1000000000',
  });
  const service: RunningService = await startService(config, { log: () => {} });
  const created = await service.engine.createProject(
    { authorization: `Bearer ${adminKey}`, ip: '127.0.0.1', userAgent: '' },
    { name: 'bench', allowed_origins: [], allowed_referrers: [], monthly_quota: 0 },
  );
  if (!created.ok) throw new Error(`createProject: ${created.error.message}`);
  return { service, secret: created.value.keys.secret, projectId: created.value.project.id };
}

export async function runIngest(tmp: string, p: IngestParams, progress: Progress): Promise<IngestResults> {
  const { service, secret, projectId } = await startBenchService(path.join(tmp, 'service'), 'flush');
  const commitMode = await startBenchService(path.join(tmp, 'service-commit'), 'commit');

  const bare: FloorServer = await startBareServer();
  const lmdb: FloorServer = await startLmdbServer(tmp);
  const rawDb = openFloorDb(path.join(tmp, 'raw'));
  const rawRecords = [...storedEvents({ projectId, events: 10_000, lastDay: new Date().toISOString().slice(0, 10), days: 1 })];

  const worker = new BenchChild(path.join(REPO_ROOT, 'bench/load/load-worker.ts'));
  const singles = wireEvents(1000).map((e) => JSON.stringify(e));
  const batches = Array.from({ length: 20 }, (_, i) => JSON.stringify(wireEvents(BATCH_SIZE, 100 + i)));
  const json = { 'content-type': 'application/json' };
  const auth = { ...json, authorization: `Bearer ${secret}` };
  const ua = { ...auth, 'user-agent': USER_AGENTS[0]! };
  const post = (origin: string, headers: Record<string, string>, bodies: string[]) =>
    ({ origin, path: '/analytics', method: 'POST', headers, bodies, connections: CONNECTIONS }) as const;

  const targets: Target[] = [
    httpTarget(worker, 'bareSingle', post(bare.origin, json, singles), 1),
    httpTarget(worker, 'lmdbSingle', post(lmdb.origin, json, singles), 1),
    httpTarget(worker, 'serviceSingle', post(service.url, ua, singles), 1),
    httpTarget(worker, 'serviceSingleNoUa', post(service.url, auth, singles), 1),
    httpTarget(
      worker,
      'serviceSingleCommit',
      post(commitMode.service.url, { ...ua, authorization: `Bearer ${commitMode.secret}` }, singles),
      1,
    ),
    httpTarget(worker, 'bareBatch', post(bare.origin, json, batches), BATCH_SIZE),
    httpTarget(worker, 'serviceBatch', post(service.url, ua, batches), BATCH_SIZE),
    {
      name: 'rawPuts',
      async run(ms) {
        const r = await rawBatchPuts(rawDb, rawRecords, BATCH_SIZE, CONNECTIONS, ms);
        return { eventsPerSec: r.eventsPerSec };
      },
    },
    {
      name: 'fsync',
      async run(ms) {
        const r = fsyncLatency(tmp, Math.min(ms, 1000));
        return { eventsPerSec: r.syncsPerSec, latency: r.latency };
      },
    },
  ];

  const grpcFile = path.join(REPO_ROOT, 'bench/grpc.ts');
  let grpcSkipped: string | undefined = existsSync(grpcFile) ? undefined : 'bench/grpc.ts is missing';
  let grpcChild: BenchChild | undefined;
  const grpcRounds: GrpcFigures[] = [];
  if (!grpcSkipped) grpcChild = new BenchChild(path.join(REPO_ROOT, 'bench/lib/module-worker.ts'));
  const runGrpc = async (ms: number): Promise<GrpcFigures | undefined> => {
    if (!grpcChild || grpcSkipped) return undefined;
    try {
      return await grpcChild.call<GrpcFigures>('run', {
        file: grpcFile,
        exportName: 'benchGrpc',
        args: [{ grpcAddress: service.grpcAddress, secretKey: secret, projectId, seconds: Math.max(1, ms / 1000) }],
      });
    } catch (err) {
      grpcSkipped = `benchGrpc failed: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`;
      return undefined;
    }
  };

  const perTarget = new Map<string, Array<{ eventsPerSec: number; result?: LoadResult; latency?: LoadResult['latency'] }>>();
  try {
    for (const t of targets) {
      progress.show(`warm-up: ${t.name}`);
      await t.run(p.warmupMs);
    }
    if (grpcChild) {
      progress.show('warm-up: gRPC');
      await runGrpc(p.warmupMs);
    }
    for (let r = 1; r <= p.rounds; r++) {
      for (const t of targets) {
        progress.show(`ingest round ${r}/${p.rounds}: ${t.name}`);
        const out = await t.run(p.roundMs);
        perTarget.set(t.name, [...(perTarget.get(t.name) ?? []), out]);
      }
      if (grpcChild) {
        progress.show(`ingest round ${r}/${p.rounds}: gRPC unary + stream`);
        const g = await runGrpc(p.roundMs);
        if (g) grpcRounds.push(g);
      }
    }

    const summary = (name: string): TargetResult => {
      const rounds = perTarget.get(name) ?? [];
      const eps = rounds.map((x) => x.eventsPerSec);
      const mid = medianBy(rounds, (x) => x.eventsPerSec);
      const out: TargetResult = { name, eventsPerSec: median(eps), rounds: eps };
      const latency = mid?.result?.latency ?? mid?.latency;
      if (latency) out.latency = latency;
      const bad = rounds.flatMap((x) => (x.result?.sampleError ? [x.result.sampleError] : []));
      if (bad.length > 0) out.errors = bad[0];
      return out;
    };
    const serviceSingle = summary('serviceSingle');

    // Fixed-rate latency: half the saturation throughput, scheduled sends, latency from the intended send time.
    let openLoop: IngestResults['openLoop'];
    if (serviceSingle.eventsPerSec > 0) {
      // Half of what the service sustained lately: the median, or the last round if the machine has since got busier
      // (a fixed rate above capacity measures a queue that grows for the whole run, not the service's latency).
      const last = serviceSingle.rounds[serviceSingle.rounds.length - 1] ?? serviceSingle.eventsPerSec;
      const rate = Math.max(100, Math.round(Math.min(serviceSingle.eventsPerSec, last) * p.openLoopShare));
      progress.show(`fixed-rate latency: ${rate} events/s for ${(p.roundMs * 2) / 1000}s`);
      const result = await worker.call<LoadResult>('open', { ...post(service.url, ua, singles), durationMs: p.roundMs * 2, rate });
      progress.show(`fixed-rate latency: the lmdb floor at the same ${rate} events/s`);
      const lmdbFloor = await worker.call<LoadResult>('open', { ...post(lmdb.origin, json, singles), durationMs: p.roundMs * 2, rate });
      openLoop = { rate, result, lmdbFloor };
    }

    const grpcSummary = (key: keyof GrpcFigures): TargetResult => {
      const eps = grpcRounds.map((g) => g[key]);
      return { name: key, eventsPerSec: median(eps), rounds: eps };
    };
    return {
      bareSingle: summary('bareSingle'),
      lmdbSingle: summary('lmdbSingle'),
      serviceSingle,
      serviceSingleNoUa: summary('serviceSingleNoUa'),
      serviceSingleCommit: summary('serviceSingleCommit'),
      bareBatch: summary('bareBatch'),
      serviceBatch: summary('serviceBatch'),
      rawPuts: summary('rawPuts'),
      fsync: summary('fsync'),
      openLoop,
      grpc:
        grpcSkipped || grpcRounds.length === 0
          ? { skipped: grpcSkipped ?? 'no gRPC rounds' }
          : { unary: grpcSummary('unaryEventsPerSec'), stream: grpcSummary('streamEventsPerSec') },
    };
  } finally {
    await worker.call('close').catch(() => {});
    await worker.stop();
    await grpcChild?.stop();
    await bare.close();
    await lmdb.close();
    await rawDb.close();
    await service.stop();
    await commitMode.service.stop();
  }
}
