import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BenchChild, REPO_ROOT } from './lib/child.ts';
import { freePort, ownLoopDelayMs, startOutside, type OutsideService } from './lib/service-outside.ts';
import type { LoadResult, LoadSpec } from './load/load-worker.ts';
import { wireEvents } from './state/generate-events.ts';

/**
 * `npx tsx bench/live-ids.ts [--events=3000000] [--days=30] [--seconds=20] [--idle=40000]`: a month of live traffic where every
 * event carries an eventId (the exactly-once promise's heaviest case), measured from outside as a user runs the
 * service (`node dist/main.js`, snapshots every 2 s):
 * - N events over the last D days (nearly one visit per event), sent over HTTP in batches of 500, 4 at a time;
 * - anonymous RSS once the ingest has settled (5 s), and after 40 s idle (the finished days asleep);
 * - then a light fixed load (single-event POSTs at a fixed rate, open loop, from a load child) while a ping child
 *   asks GET /health every 5 ms: /health's longest wait and POST p99 from the intended send time, and the service's
 *   own longest event-loop delay meanwhile (its operator metrics: no other process's share of the cores in it);
 * - then a restart: spawn to the first /health 200, and anonymous RSS after it settles.
 * One JSON line.
 */

const arg = (name: string, dflt: number) => {
  const a = process.argv.find((x) => x.startsWith(`--${name}=`));
  return a === undefined ? dflt : Number(a.slice(name.length + 3));
};
const EVENTS = arg('events', 3_000_000);
const DAYS = arg('days', 30);
const SECONDS = arg('seconds', 20);
/** Events per POST while filling: the batch limit of POST /analytics. */
const BATCH = 500;
/** Batches in flight while filling. */
const IN_FLIGHT = 4;
/** The fixed load's rate (requests of one event each per second): light, far under what the service takes. */
const LIGHT_RATE = 200;
/** Snapshot cadence under test. */
const SNAPSHOT_MS = '2000';
/** After the ingest or a restart, memory is read once the service has been idle this long. */
const SETTLE_MS = 5_000;
/** And again after this much idle time: the days the ingest finished asleep (1–2 s) and V8 has collected their garbage. */
const IDLE_MS = Math.max(SETTLE_MS, arg('idle', 40_000));
const DAY_MS = 86_400_000;

const mib = (b: number) => Math.round(b / 2 ** 20);

async function post(url: string, key: string, pathName: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  for (;;) {
    const r = await fetch(`${url}${pathName}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const json = (await r.json()) as Record<string, unknown>;
    if (r.status !== 429 && r.status !== 503) return { status: r.status, json };
    await new Promise((res) => setTimeout(res, Number(r.headers.get('retry-after') ?? '1') * 1000));
  }
}

/** Batch `b` of the fill: events spread evenly over the last DAYS days (a minute short of now), one visit each mostly. */
function batch(b: number, now: number): Array<Record<string, unknown>> {
  const span = DAYS * DAY_MS - 120_000;
  const out = [];
  for (let i = 0; i < BATCH; i++) {
    const n = b * BATCH + i;
    if (n >= EVENTS) break;
    // a visit of two events now and then (~5 %), as the 3M events / 2.85M visits
    const visit = n % 20 === 1 ? n - 1 : n;
    out.push({
      event: n % 7 === 0 ? 'signup' : 'page_view',
      url: `https://shop.example/p/${n % 500}`,
      referrer: n % 3 === 0 ? 'https://www.google.com/' : '',
      sessionId: `v${visit.toString(36)}`,
      eventId: `e${n.toString(36)}`,
      timestamp: new Date(now - span + Math.floor((n / EVENTS) * span)).toISOString(),
    });
  }
  return out;
}

async function fill(svc: OutsideService, key: string): Promise<{ seconds: number; eventsPerSecond: number }> {
  const t0 = performance.now();
  const now = Date.now();
  const batches = Math.ceil(EVENTS / BATCH);
  let next = 0;
  const lane = async () => {
    for (let b = next++; b < batches; b = next++) {
      const r = await post(svc.url, key, '/analytics', batch(b, now));
      if (r.status !== 200) throw new Error(`batch ${b}: ${r.status} ${JSON.stringify(r.json)}`);
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
  const seconds = (performance.now() - t0) / 1000;
  return { seconds, eventsPerSecond: Math.round(EVENTS / seconds) };
}

const dir = mkdtempSync(path.join(tmpdir(), 'live-ids-'));
const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
const metricsPort = await freePort();
const metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
const env = { ANALYTICS_SNAPSHOT_INTERVAL_MS: SNAPSHOT_MS, ANALYTICS_RATE_PER_KEY: '1000000', ANALYTICS_RATE_PER_IP: '1000000', METRICS_PORT: String(metricsPort) };
const load = new BenchChild(path.join(REPO_ROOT, 'bench/load/load-worker.ts'));
const pinger = new BenchChild(path.join(REPO_ROOT, 'bench/growth/growth-worker.ts'));
let svc: OutsideService | undefined;
try {
  svc = await startOutside(dir, adminKey, env);
  const created = await post(svc.url, adminKey, '/projects', { name: 'live ids', allowed_origins: [], allowed_referrers: [], monthly_quota: 0 });
  const key = (created.json.keys as { secret: string }).secret;
  const filled = await fill(svc, key);
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  const afterFillMiB = mib(svc.anonBytes());
  await new Promise((r) => setTimeout(r, IDLE_MS - SETTLE_MS));
  const idleMiB = mib(svc.anonBytes());
  const spec: LoadSpec = {
    origin: svc.url, path: '/analytics', method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    bodies: wireEvents(200).map((e) => JSON.stringify(e)), connections: 16, durationMs: SECONDS * 1000, rate: LIGHT_RATE,
  };
  await ownLoopDelayMs(metricsUrl); // a scrape starts the service's event-loop delay histogram afresh
  const [light, ping] = await Promise.all([
    load.call<LoadResult>('open', spec),
    pinger.call<{ pings: number; maxMs: number; over50: number; p99: number }>('ping', { url: svc.url, durationMs: SECONDS * 1000, everyMs: 5 }),
  ]);
  const ownLoopMs = await ownLoopDelayMs(metricsUrl);
  const underLoadMiB = mib(svc.anonBytes());
  await svc.stop();
  svc = await startOutside(dir, adminKey, env);
  const restartMs = Math.round(svc.startMs);
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  const afterRestartMiB = mib(svc.anonBytes());
  console.log(JSON.stringify({
    events: EVENTS, days: DAYS, fill: filled, anonMiB: { afterFill: afterFillMiB, idle: idleMiB, underLoad: underLoadMiB, afterRestart: afterRestartMiB },
    light: { rate: LIGHT_RATE, ok: light.ok, p50: light.latency.p50, p99: light.latency.p99, max: light.latency.max },
    health: { longestMs: Math.round(ping.maxMs * 10) / 10, over50: ping.over50, pings: ping.pings, ownLoopMs: Math.round(ownLoopMs * 10) / 10 }, restartMs,
  }));
} finally {
  await svc?.stop();
  await load.stop();
  await pinger.stop();
  rmSync(dir, { recursive: true, force: true });
}
