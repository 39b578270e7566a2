import { pathToFileURL } from 'node:url';
import { create } from '@bufbuild/protobuf';
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { ServiceError } from '@grpc/grpc-js';
import { IngestRequestSchema } from '../src/gen/analytics/v1/analytics_pb.ts';
import type { EventSchema, IngestRequest, IngestStreamResponse } from '../src/gen/analytics/v1/analytics_pb.ts';
import { AnalyticsClient } from '../src/grpc/client.ts';

/**
 * gRPC ingest throughput, in events per second, next to the HTTP batch figure of the bench runner:
 * - unary: UNARY_CONCURRENCY calls in flight on one channel, each a 100-event Ingest sent again when answered;
 * - stream: STREAMS IngestStream calls each keeping STREAM_WINDOW 100-event batches unacknowledged, so the server
 *   always has the next batch waiting while one commits.
 *
 * The project must allow the load: `monthly_quota: 0` and a per-key rate above (events/s ÷ 100) requests/s, e.g.
 * `rate_limit: { per_key: 100000, burst_per_key: 100000 }`; a RESOURCE_EXHAUSTED aborts the bench with that advice.
 * Run alone against a running service: `tsx bench/grpc.ts <host:port> <sk_key> <projectId> [seconds] [unary] [streams]`.
 */

/** CONTRACT allows 500; 100 is what a backend flushing every ~100 ms at 1k events/s sends, and what HTTP is run with. */
const BATCH_EVENTS = 100;
/** Concurrent unary calls: the HTTP batch bench's 32 connections, so unary vs HTTP compares the wire, not the load. */
const UNARY_CONCURRENCY = 32;
/**
 * Streams on the one channel. The server takes one batch per stream at a time, so this is the number of batches
 * in the engine at once; measured on the 2-CPU bench machine (flush durability, 100-event batches) the figure
 * rises to 16 and then flattens: 4 → 35k, 8 → 32k, 16 → 50k, 32 → 52k events/s (noisy, shared machine).
 */
const STREAMS = 16;
/** Batches in flight per stream: the server takes one at a time, the rest wait in its read-ahead (≤ 16). */
const STREAM_WINDOW = 16;

export interface GrpcBenchOptions {
  grpcAddress: string;
  secretKey: string;
  projectId: string;
  seconds: number;
  /** overrides UNARY_CONCURRENCY */
  unaryConcurrency?: number;
  /** overrides STREAMS */
  streams?: number;
}

export interface GrpcBenchResult {
  unaryEventsPerSec: number;
  streamEventsPerSec: number;
}

const PAGES = ['/', '/pricing', '/docs/start', '/blog/launch', '/signup'];
const REFERRERS = ['', 'https://www.google.com/', 'https://news.ycombinator.com/', 'Newsletter'];

/** A realistic batch: page views with referrers, some custom events with parameters; the same bytes every call. */
function batch(projectId: string, seed: number): IngestRequest {
  const events: Array<MessageInitShape<typeof EventSchema>> = [];
  for (let i = 0; i < BATCH_EVENTS; i++) {
    const n = seed * BATCH_EVENTS + i;
    const page = PAGES[n % PAGES.length] ?? '/';
    const referrer = REFERRERS[n % REFERRERS.length] ?? '';
    const custom = n % 10 === 9;
    events.push({
      projectId,
      event: custom ? 'signup' : 'page_view',
      url: `https://bench.example${page}`,
      sessionId: `bench-${seed}-${n % 37}`,
      ...(referrer === '' ? {} : { referrer }),
      country: n % 3 === 0 ? 'DE' : 'US',
      ...(custom ? { eventParams: { plan: { kind: { case: 'stringValue', value: 'pro' } } } } : {}),
    });
  }
  return create(IngestRequestSchema, { events });
}

function explain(err: unknown): Error {
  const e = err as Partial<ServiceError>;
  if (e.code === 8) {
    return new Error(`gRPC bench was refused (${e.details ?? 'RESOURCE_EXHAUSTED'}): create the bench project with monthly_quota 0 and a high rate_limit`);
  }
  return err instanceof Error ? err : new Error(String(err));
}

async function unary(client: AnalyticsClient, projectId: string, seconds: number, concurrency: number): Promise<number> {
  const requests = Array.from({ length: concurrency }, (_, i) => batch(projectId, i));
  const started = performance.now();
  const deadline = started + seconds * 1000;
  let events = 0;
  await Promise.all(
    requests.map(async (request) => {
      while (performance.now() < deadline) {
        const ack = await client.ingest(request).catch((err: unknown) => Promise.reject(explain(err)));
        events += ack.accepted;
      }
    }),
  );
  return events / ((performance.now() - started) / 1000);
}

function oneStream(client: AnalyticsClient, request: IngestRequest, deadline: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const call = client.ingestStream();
    let sent = 0;
    let acked = 0;
    let events = 0;
    let ending = false;
    const fill = (): void => {
      while (!ending && sent - acked < STREAM_WINDOW) {
        if (performance.now() >= deadline) {
          ending = true;
          call.end();
          return;
        }
        call.write({ batchId: BigInt(sent), events: request.events });
        sent++;
      }
    };
    call.on('data', (ack: IngestStreamResponse) => {
      acked++;
      events += ack.accepted;
      fill();
    });
    call.on('error', (err: unknown) => reject(explain(err)));
    call.on('end', () => resolve(events));
    fill();
  });
}

async function stream(client: AnalyticsClient, projectId: string, seconds: number, streams: number): Promise<number> {
  const started = performance.now();
  const deadline = started + seconds * 1000;
  const counts = await Promise.all(
    Array.from({ length: streams }, (_, i) => oneStream(client, batch(projectId, 100 + i), deadline)),
  );
  return counts.reduce((a, b) => a + b, 0) / ((performance.now() - started) / 1000);
}

export async function benchGrpc(opts: GrpcBenchOptions): Promise<GrpcBenchResult> {
  const client = new AnalyticsClient(opts.grpcAddress, { key: opts.secretKey });
  try {
    // Warm-up: connection, JIT, first LMDB pages; not measured.
    const concurrency = opts.unaryConcurrency ?? UNARY_CONCURRENCY;
    const streams = opts.streams ?? STREAMS;
    await unary(client, opts.projectId, Math.min(1, opts.seconds / 5), concurrency);
    const unaryEventsPerSec = await unary(client, opts.projectId, opts.seconds, concurrency);
    const streamEventsPerSec = await stream(client, opts.projectId, opts.seconds, streams);
    return { unaryEventsPerSec: Math.round(unaryEventsPerSec), streamEventsPerSec: Math.round(streamEventsPerSec) };
  } finally {
    client.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const [grpcAddress, secretKey, projectId, seconds, unaryConcurrency, streams] = process.argv.slice(2);
  if (grpcAddress === undefined || secretKey === undefined || projectId === undefined) {
    console.error('usage: tsx bench/grpc.ts <host:port> <sk_key> <projectId> [seconds] [unary concurrency] [streams]');
    process.exit(2);
  }
  const result = await benchGrpc({
    grpcAddress,
    secretKey,
    projectId,
    seconds: Number(seconds ?? 5),
    ...(unaryConcurrency === undefined ? {} : { unaryConcurrency: Number(unaryConcurrency) }),
    ...(streams === undefined ? {} : { streams: Number(streams) }),
  });
  console.log(JSON.stringify(result));
}
