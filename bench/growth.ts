import path from 'node:path';
import { BenchChild, REPO_ROOT } from './lib/child.ts';
import type { Progress } from './lib/progress.ts';
import type { LoadResult, LoadSpec } from './load/load-worker.ts';
import type { Row } from './report.ts';
import type { BuildResult } from './growth/growth-worker.ts';
import { wireEvents } from './state/generate-events.ts';
import { OUTSIDE_FULL, OUTSIDE_QUICK, outsideRows, runOutside, type OutsideParams, type OutsideResults } from './growth-outside.ts';
import { SERVICE_NODE_ARGS } from '../bin/dist.mjs';

/**
 * `npm run bench -- --growth`: the states of issue 18, each built in bulk into a real data directory (the log, sealed
 * days, month rollups, column segments and snapshot the service would have written for that traffic: growth/build-bulk.ts,
 * tested against the service's own per-batch path in test/growth-bulk-build.test.ts), then measured in a fresh service process from outside (a /health ping every 5 ms for stalls):
 * (a) 1 project, 365 days; (b) many projects with Zipf traffic, 365 days; (c) the 30-day state under a fixed
 * single-event load while snapshots run back to back; (d) events sent live over HTTP, every one with an eventId;
 * (e)–(g) from outside, each its own script (growth-outside.ts): many small sites restarted, a month of live events
 * with eventIds under a light load, a big tenant deleted while another writes.
 * `--quick` scales every state down so the pass takes a few minutes; `--parts=efg` runs only the parts named.
 */

export interface GrowthParams {
  a: { events: number; days: number };
  b: { projects: number; events: number; days: number };
  c: { events: number; days: number; rate: number; seconds: number };
  d: { events: number; batch: number };
  readMs: number;
  outside: OutsideParams;
}

export const GROWTH_FULL: GrowthParams = {
  a: { events: 100_000_000, days: 365 },
  b: { projects: 10_000, events: 100_000_000, days: 365 },
  c: { events: 10_000_000, days: 30, rate: 2000, seconds: 30 },
  d: { events: 10_000_000, batch: 100 },
  readMs: 5000,
  outside: OUTSIDE_FULL,
};

export const GROWTH_QUICK: GrowthParams = {
  a: { events: 500_000, days: 365 },
  b: { projects: 300, events: 300_000, days: 365 },
  c: { events: 300_000, days: 30, rate: 2000, seconds: 6 },
  d: { events: 200_000, batch: 100 },
  readMs: 1000,
  outside: OUTSIDE_QUICK,
};

const WORKER = path.join(REPO_ROOT, 'bench/growth/growth-worker.ts');
/** the launchers' flags (bin/dist.mjs), so the figures are the shipped service's */
const NODE_ARGS = [...SERVICE_NODE_ARGS, '--expose-gc', '--max-old-space-size=8192'];
/** CONTRACT-sized goals of issue 18. */
const GIB = 2 ** 30;

interface Served {
  url: string;
  startMs: number;
  rssBytes: number;
  /** RssAnon: what the process holds itself, without LMDB's file-backed mapped pages */
  anonBytes: number;
}

/** The service process's own event-loop delay over a step (growth-worker's loopDelayStop). */
interface LoopDelay {
  maxMs: number;
  p99Ms: number;
}

interface Ping {
  pings: number;
  maxMs: number;
  over50: number;
  p99: number;
}

export interface GrowthResults extends OutsideResults {
  a?: { build: BuildResult; served: Served; read30: LoadResult['latency']; read365: LoadResult['latency'] };
  b?: { build: BuildResult; served: Served; read30: LoadResult['latency']; read365: LoadResult['latency'] };
  c?: { build: BuildResult; during: LoadResult; outside: LoadResult; pingDuring: Ping; pingOutside: Ping; loopDuring: LoopDelay; loopOutside: LoopDelay };
  d?: { sent: LoadResult; ping: Ping; loop: LoopDelay; rssBytes: number; seconds: number };
}

function addDays(day: string, n: number): string {
  return new Date(Date.parse(`${day}T00:00:00Z`) + n * 86_400_000).toISOString().slice(0, 10);
}

async function inChild<T>(fn: (c: BenchChild) => Promise<T>): Promise<T> {
  const c = new BenchChild(WORKER, { nodeArgs: NODE_ARGS });
  try {
    return await fn(c);
  } finally {
    await c.stop();
  }
}

/** All parts: (a)–(d) in this file, (e)–(g) in growth-outside.ts. */
export const GROWTH_PARTS = 'abcdefg';

export async function runGrowth(tmp: string, p: GrowthParams, progress: Progress, parts = GROWTH_PARTS): Promise<GrowthResults> {
  const g: GrowthResults = {};
  const lastDay = new Date().toISOString().slice(0, 10);
  const load = new BenchChild(path.join(REPO_ROOT, 'bench/load/load-worker.ts'));
  const pinger = new BenchChild(WORKER);
  const read = async (url: string, key: string, from: string, to: string) => {
    const spec: LoadSpec = { origin: url, path: `/metrics?from=${from}&to=${to}`, method: 'GET', headers: { authorization: `Bearer ${key}` }, connections: 1, durationMs: Math.min(1000, p.readMs / 2) };
    await load.call<LoadResult>('closed', spec);
    return (await load.call<LoadResult>('closed', { ...spec, durationMs: p.readMs })).latency;
  };
  try {
    // (a) and (b): a year's state built in bulk, then served fresh: startup, RSS, GET /metrics 30 days / 12 months
    const yearState = async (part: 'a' | 'b', projects: number, events: number, days: number, whose: string) => {
      progress.show(`growth (${part}): building ${n(projects)} project${projects === 1 ? '' : 's (Zipf)'}, ${days} days, ${n(events)} events (bulk)`);
      const dir = path.join(tmp, `growth-${part}`);
      const build = await inChild((c) => c.call<BuildResult>('build', { dir, projects, events, days, lastDay }));
      progress.show(`growth (${part}): fresh service, startup, RSS, GET /metrics 30 days / 12 months${whose}`);
      return inChild(async (c) => {
        const served = await c.call<Served>('serve', { dir, adminKey: build.adminKey });
        const read30 = await read(served.url, build.secretKey, addDays(lastDay, -29), lastDay);
        const read365 = await read(served.url, build.secretKey, addDays(lastDay, -364), lastDay);
        await c.call('stop');
        return { build, served, read30, read365 };
      });
    };
    if (parts.includes('a')) g.a = await yearState('a', 1, p.a.events, p.a.days, '');
    if (parts.includes('b')) g.b = await yearState('b', p.b.projects, p.b.events, p.b.days, ' of the busiest project');

    if (parts.includes('c')) {
      progress.show(`growth (c): building ${n(p.c.events)} events over ${p.c.days} days`);
      const dirC = path.join(tmp, 'growth-c');
      const buildC = await inChild((c) => c.call<BuildResult>('build', { dir: dirC, projects: 1, events: p.c.events, days: p.c.days, lastDay }));
      const bodies = wireEvents(200).map((e) => JSON.stringify(e));
      const post = (url: string): LoadSpec => ({
        origin: url, path: '/analytics', method: 'POST', headers: { authorization: `Bearer ${buildC.secretKey}`, 'content-type': 'application/json' },
        bodies, connections: 32, durationMs: p.c.seconds * 1000, rate: p.c.rate,
      });
      const underLoad = async (env: Record<string, string>) =>
        inChild(async (c) => {
          const served = await c.call<Served>('serve', { dir: dirC, adminKey: buildC.adminKey, env });
          await c.call('loopDelayStart');
          const [result, ping] = await Promise.all([
            load.call<LoadResult>('open', post(served.url)),
            pinger.call<Ping>('ping', { url: served.url, durationMs: p.c.seconds * 1000, everyMs: 5 }),
          ]);
          const loop = await c.call<LoopDelay>('loopDelayStop');
          await c.call('stop');
          return { result, ping, loop };
        });
      progress.show(`growth (c): ${p.c.rate} ev/s for ${p.c.seconds} s with a snapshot every second, /health every 5 ms`);
      const during = await underLoad({ ANALYTICS_SNAPSHOT_INTERVAL_MS: '1000' });
      progress.show(`growth (c): the same load with snapshots off`);
      const outside = await underLoad({ ANALYTICS_SNAPSHOT_INTERVAL_MS: '3600000', ANALYTICS_SNAPSHOT_EVERY_EVENTS: '1000000000' });
      g.c = { build: buildC, during: during.result, outside: outside.result, pingDuring: during.ping, pingOutside: outside.ping, loopDuring: during.loop, loopOutside: outside.loop };
    }

    if (parts.includes('d')) {
      progress.show(`growth (d): ${n(p.d.events)} events live over HTTP with eventIds, batches of ${p.d.batch}`);
      const dirD = path.join(tmp, 'growth-d');
      const buildD = await inChild((cc) => cc.call<BuildResult>('build', { dir: dirD, projects: 1, events: 1000, days: 1, lastDay }));
      g.d = await inChild(async (cc) => {
        const served = await cc.call<Served>('serve', { dir: dirD, adminKey: buildD.adminKey, env: { ANALYTICS_SNAPSHOT_INTERVAL_MS: '5000' } });
        const batchBodies = Array.from({ length: 10 }, (_, i) => JSON.stringify(wireEvents(p.d.batch, 50 + i)));
        await cc.call('loopDelayStart');
        const started = Date.now();
        const stop = { done: false };
        const pings: Ping[] = [];
        const pingLoop = (async () => {
          while (!stop.done) pings.push(await pinger.call<Ping>('ping', { url: served.url, durationMs: 2000, everyMs: 5 }));
        })();
        // Closed loop until the target is reached: 8 connections, each sending the next batch when the last is answered.
        const perSecond = 60_000;
        const sent = await load.call<LoadResult>('closed', {
          origin: served.url, path: '/analytics', method: 'POST', headers: { authorization: `Bearer ${buildD.secretKey}`, 'content-type': 'application/json' },
          bodies: batchBodies, connections: 8, durationMs: Math.ceil((p.d.events / perSecond) * 1000),
        });
        stop.done = true;
        await pingLoop;
        const seconds = (Date.now() - started) / 1000;
        const loop = await cc.call<LoopDelay>('loopDelayStop');
        const mem = await cc.call<{ rssBytes: number }>('memory');
        await cc.call('stop');
        const ping: Ping = { pings: pings.reduce((n, x) => n + x.pings, 0), maxMs: Math.max(...pings.map((x) => x.maxMs)), over50: pings.reduce((n, x) => n + x.over50, 0), p99: Math.max(...pings.map((x) => x.p99)) };
        return { sent, ping, loop, rssBytes: mem.rssBytes, seconds };
      });
    }
    Object.assign(g, await runOutside(p.outside, parts, (line) => progress.show(line)));
    return g;
  } finally {
    await load.call('close').catch(() => {});
    await load.stop();
    await pinger.stop();
  }
}

const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
const ms = (x: number) => `${x.toFixed(x < 1 ? 3 : 1)} ms`;
const n = (x: number) => x.toLocaleString('en-US');

export function growthRows(g: GrowthResults, p: GrowthParams): Row[] {
  const rows: Row[] = [];
  const { a, b, c, d } = g;
  if (a) {
    rows.push({ id: 'growth.a.build', what: `(a) bulk build: 1 project, ${p.a.days} days, ${n(p.a.events)} events`, value: `${a.build.seconds.toFixed(0)} s; ${a.build.liveDays} live / ${a.build.sealedDays} sealed days; snapshot ${mib(a.build.snapshotBytes)}` });
    rows.push({ id: 'growth.a.rss', what: '(a) RSS after startup, anonymous (all)', value: `${mib(a.served.anonBytes)} (${mib(a.served.rssBytes)})`, num: a.served.anonBytes, goal: '≤ 1 GiB', met: a.served.anonBytes <= GIB });
    rows.push({ id: 'growth.a.start', what: '(a) startup to serving', value: ms(a.served.startMs), num: a.served.startMs, goal: '≤ 3 s', met: a.served.startMs <= 3000 });
    rows.push({ id: 'growth.a.read30', what: '(a) GET /metrics 30 days, p50 / p95', value: `${ms(a.read30.p50)} / ${ms(a.read30.p95)}`, num: a.read30.p95, goal: 'p95 ≤ 5 ms', met: a.read30.p95 <= 5 });
    rows.push({ id: 'growth.a.read365', what: '(a) GET /metrics 12 months, p50 / p95', value: `${ms(a.read365.p50)} / ${ms(a.read365.p95)}`, num: a.read365.p95, goal: 'p95 ≤ 10 ms', met: a.read365.p95 <= 10 });
    rows.push({ id: 'growth.log', what: '(a) LMDB bytes per event (log + sealed days + ids)', value: `${a.build.logBytesPerEvent.toFixed(0)} B`, num: a.build.logBytesPerEvent, goal: '≤ 150 (log only; issue 17)', met: a.build.logBytesPerEvent <= 150 });
  }
  if (b) {
    rows.push({ id: 'growth.b.build', what: `(b) bulk build: ${n(p.b.projects)} projects (Zipf), ${p.b.days} days, ${n(p.b.events)} events`, value: `${b.build.seconds.toFixed(0)} s; ${b.build.liveDays} live / ${b.build.sealedDays} sealed days; snapshot ${mib(b.build.snapshotBytes)}` });
    rows.push({ id: 'growth.b.rss', what: '(b) RSS after startup, anonymous (all)', value: `${mib(b.served.anonBytes)} (${mib(b.served.rssBytes)})`, num: b.served.anonBytes, goal: '≤ 1 GiB', met: b.served.anonBytes <= GIB });
    rows.push({ id: 'growth.b.start', what: '(b) startup to serving', value: ms(b.served.startMs), num: b.served.startMs, goal: '≤ 3 s', met: b.served.startMs <= 3000 });
    rows.push({ id: 'growth.b.read30', what: '(b) GET /metrics 30 days of the busiest project, p50 / p95', value: `${ms(b.read30.p50)} / ${ms(b.read30.p95)}`, num: b.read30.p95, goal: 'p95 ≤ 5 ms', met: b.read30.p95 <= 5 });
    rows.push({ id: 'growth.b.read365', what: '(b) GET /metrics 12 months of the busiest project, p50 / p95', value: `${ms(b.read365.p50)} / ${ms(b.read365.p95)}`, num: b.read365.p95, goal: 'p95 ≤ 10 ms', met: b.read365.p95 <= 10 });
  }
  if (c) {
    rows.push({ id: 'growth.c.stall', what: `(c) ${n(p.c.events)} events, ${p.c.rate} ev/s, a snapshot every second: longest /health wait (pings over 50 ms)`, value: `${ms(c.pingDuring.maxMs)} (${c.pingDuring.over50} of ${c.pingDuring.pings})`, num: c.pingDuring.maxMs, goal: '≤ 50 ms', met: c.pingDuring.maxMs <= 50 });
    rows.push({ id: 'growth.c.stallOff', what: '(c) the same with snapshots off: longest /health wait', value: ms(c.pingOutside.maxMs), num: c.pingOutside.maxMs });
    rows.push({
      id: 'growth.c.loopDelay',
      what: "(c) the service's own longest event-loop delay, snapshots every second / off (no other process's share of the cores in it)",
      value: `${ms(c.loopDuring.maxMs)} / ${ms(c.loopOutside.maxMs)}`,
      num: c.loopDuring.maxMs,
      goal: '≤ 50 ms',
      met: c.loopDuring.maxMs <= 50,
    });
    const ratio = c.during.latency.p99 / c.outside.latency.p99;
    rows.push({ id: 'growth.c.p99', what: `(c) POST p99 from intended send, snapshots running / off (${c.during.ok} / ${c.outside.ok} ok)`, value: `${ms(c.during.latency.p99)} / ${ms(c.outside.latency.p99)}`, num: ratio, goal: '≤ 2×', met: ratio <= 2 });
  }
  if (d) {
    rows.push({ id: 'growth.d.rss', what: `(d) ${n(d.sent.ok * p.d.batch)} events with eventIds over HTTP in ${d.seconds.toFixed(0)} s: RSS at the end`, value: mib(d.rssBytes), num: d.rssBytes, goal: '≤ 1 GiB', met: d.rssBytes <= GIB });
    rows.push({ id: 'growth.d.stall', what: '(d) longest /health wait while sending (snapshots every 5 s)', value: `${ms(d.ping.maxMs)} (${d.ping.over50} of ${d.ping.pings} over 50 ms)`, num: d.ping.maxMs, goal: '≤ 50 ms', met: d.ping.maxMs <= 50 });
    rows.push({ id: 'growth.d.loopDelay', what: "(d) the service's own longest event-loop delay meanwhile (the outside ping's first wait shares the cores with the load's start)", value: ms(d.loop.maxMs), num: d.loop.maxMs, goal: '≤ 50 ms', met: d.loop.maxMs <= 50 });
  }
  if (g.e || g.f || g.g) rows.push(...outsideRows(g, p.outside));
  return rows;
}
