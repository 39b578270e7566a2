import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { StoredEvent } from '../src/core/types.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';
import { SERVICE_ENV, serviceNodeArgs } from '../bin/dist.mjs';

/**
 * `npx tsx bench/erase.ts [events] [--settle=MS]`: what DELETE /projects/{id} costs the other tenants, measured from outside. The
 * service runs in its own process; this process creates two projects through the API, stops it, writes `events`
 * events of the doomed project into the log in bulk (with a marker string in every URL), starts it again (it
 * replays them), then runs a writer of the other project (one event per request every WRITE_EVERY_MS, latency from
 * the intended send time) and a /health ping loop while it sends the DELETE. It reports the DELETE's own time, the
 * writer's p99 and longest wait and /health's longest wait from the DELETE until the service logs that the erasure
 * left every file, that erasure time, and how many copies of the marker are left in the data directory; then its own
 * event-loop delay over that time and the machine's load, since on shared cores part of a long wait is this process.
 * Part (g) of `npm run bench -- --growth` (bench/growth-outside.ts reads its last line, JSON).
 */

const TOTAL = Number(process.argv.slice(2).find((a) => !a.startsWith('--')) ?? 1_000_000);
/** Events per bulk append (split into entries of 256 by the store). */
const FILL_BATCH = 5_000;
const WRITE_EVERY_MS = 20;
const PING_EVERY_MS = 10;
/** Measured before the DELETE, for a baseline. */
const QUIET_MS = 3_000;
/** After the start, before measuring: the replay's background work (sealing, the columns of the replayed events, the first snapshot) is not the erasure's. `--settle=MS` for a small run. */
const SETTLE_MS = Number(process.argv.find((a) => a.startsWith('--settle='))?.slice('--settle='.length) ?? 20_000);
/** The erasure must end within this long, or the bench says so. */
const ERASE_TIMEOUT_MS = 600_000;
const ADMIN = 'ak_bench_erase_0123456789abcdef0123456789';
const MARKER = 'doomed-marker-7f3a';

function start(dataDir: string): Promise<{ proc: ChildProcess; url: string; output: () => string }> {
  const proc = spawn(process.execPath, [...(process.env.ERASE_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.ERASE_PROF}`] : []), ...serviceNodeArgs()], {
    env: { ...process.env, ...SERVICE_ENV, PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: dataDir, ANALYTICS_ADMIN_KEY: ADMIN, ANALYTICS_QUIET: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  return new Promise((resolve, reject) => {
    proc.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const m = /HTTP (http:\/\/\S+)/.exec(out);
      if (m) resolve({ proc, url: m[1]!, output: () => out });
    });
    proc.once('exit', (code) => reject(new Error(`service exited (${code}): ${out}`)));
  });
}

async function stop(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null) return;
  const exited = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGTERM');
  await exited;
}

async function call(url: string, p: string, key: string, method = 'GET', body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(url + p, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

function event(i: number, project: string, now: number): StoredEvent {
  const ts = now - 20 * 86_400_000 + Math.floor((i / TOTAL) * 19 * 86_400_000);
  return {
    t: 'e', p: project, ts, rt: ts, day: new Date(ts).toISOString().slice(0, 10), event: 'page_view',
    url: `https://shop.example/${MARKER}/${i % 5000}?utm_source=news`, path: `/${MARKER}/${i % 5000}`, referrer: 'google.com',
    source: 'Google', sessionId: `s${i % 20000}`, user: `s:s${i % 20000}`, country: 'DE', device: 'desktop', params: {},
  };
}

function markersIn(dir: string): number {
  let n = 0;
  for (const f of readdirSync(dir, { recursive: true }) as string[]) {
    const file = path.join(dir, f);
    if (!statSync(file).isFile()) continue;
    n += readFileSync(file).toString('latin1').split(MARKER).length - 1;
  }
  return n;
}

const p99 = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? 0 : s[Math.min(s.length - 1, Math.floor(s.length * 0.99))]!;
};
const max = (xs: number[]): number => xs.reduce((a, b) => Math.max(a, b), 0);

const dir = mkdtempSync(path.join(tmpdir(), 'analytics-erase-'));
try {
  let svc = await start(dir);
  const mk = async (name: string) => (await call(svc.url, '/projects', ADMIN, 'POST', { name, allowed_origins: [], allowed_referrers: [] })).body;
  const doomed = await mk('doomed');
  const kept = await mk('kept');
  await stop(svc.proc);

  let t = performance.now();
  const store = LogStore.open(dir, 'commit');
  const now = Date.now();
  for (let i = 0; i < TOTAL; i += FILL_BATCH) {
    await store.append(Array.from({ length: Math.min(FILL_BATCH, TOTAL - i) }, (_, j) => event(i + j, doomed.project.id, now)));
  }
  await store.close();
  console.log(`log written: ${TOTAL} events in ${Math.round(performance.now() - t)} ms`);
  t = performance.now();
  svc = await start(dir);
  for (;;) {
    if ((await fetch(`${svc.url}/health`)).status === 200) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  console.log(`service started (replayed) in ${Math.round(performance.now() - t)} ms`);
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  const lmdbBefore = statSync(path.join(dir, 'analytics.lmdb')).size;

  // the writer and the ping loop, each on its own schedule (latency from the intended time, so a stall counts whole)
  const writes: Array<{ at: number; ms: number }> = [];
  const pings: Array<{ at: number; ms: number }> = [];
  let running = true;
  const loop = async (every: number, out: Array<{ at: number; ms: number }>, send: () => Promise<unknown>) => {
    let next = performance.now();
    while (running) {
      const wait = next - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const intended = next;
      await send();
      out.push({ at: intended, ms: performance.now() - intended });
      next = Math.max(next + every, performance.now() - every * 5);
    }
  };
  let n = 0;
  const writer = loop(WRITE_EVERY_MS, writes, async () => {
    const r = await call(svc.url, '/analytics', kept.keys.secret, 'POST', { event: 'page_view', url: `https://kept.example/${n++}`, sessionId: `w${n % 50}` });
    if (r.status !== 200) throw new Error(`ingest ${r.status} ${JSON.stringify(r.body)}`);
  });
  const pinger = loop(PING_EVERY_MS, pings, () => fetch(`${svc.url}/health`).then((r) => r.arrayBuffer()));
  await new Promise((r) => setTimeout(r, QUIET_MS));

  // this process's own delays: on a loaded machine part of a long wait is the measuring process, not the service
  const ownDelay = monitorEventLoopDelay({ resolution: 5 });
  ownDelay.enable();
  const deleteAt = performance.now();
  const del = await call(svc.url, `/projects/${doomed.project.id}`, ADMIN, 'DELETE');
  const deleteMs = performance.now() - deleteAt;
  const keysRefused = (await call(svc.url, '/metrics', doomed.keys.secret)).status;
  const metrics = (await call(svc.url, `/metrics?projectId=${doomed.project.id}`, ADMIN)).status;
  const outAt = svc.output().length;
  while (!/log records erased from every file in (\d+) ms/.test(svc.output().slice(outAt)) && performance.now() - deleteAt < ERASE_TIMEOUT_MS) {
    await new Promise((r) => setTimeout(r, 100));
  }
  const erasedIn = /log records erased from every file in (\d+) ms/.exec(svc.output().slice(outAt))?.[1];
  const doneAt = performance.now();
  ownDelay.disable();
  await new Promise((r) => setTimeout(r, 1_000));
  running = false;
  await Promise.all([writer, pinger]);
  const lmdbAfter = statSync(path.join(dir, 'analytics.lmdb')).size;
  await stop(svc.proc);

  const quiet = (xs: Array<{ at: number; ms: number }>) => xs.filter((x) => x.at < deleteAt).map((x) => x.ms);
  const during = (xs: Array<{ at: number; ms: number }>) => xs.filter((x) => x.at >= deleteAt && x.at <= doneAt).map((x) => x.ms);
  const f = (x: number) => x.toFixed(1);
  const mb = (x: number) => `${(x / 2 ** 20).toFixed(0)} MiB`;
  console.log(`DELETE of a tenant of ${TOTAL} events: ${del.status} in ${f(deleteMs)} ms; its key then ${keysRefused}, its metrics ${metrics}`);
  const markersLeft = markersIn(dir);
  console.log(`erasure from every file: ${erasedIn ?? 'NOT FINISHED'} ms (analytics.lmdb ${mb(lmdbBefore)} -> ${mb(lmdbAfter)}); marker copies left in the data directory: ${markersLeft}`);
  console.log(`other tenant's ingest (1 event / ${WRITE_EVERY_MS} ms): before p99 ${f(p99(quiet(writes)))} ms; during erasure p99 ${f(p99(during(writes)))} ms, longest ${f(max(during(writes)))} ms (${during(writes).length} writes)`);
  console.log(`/health (every ${PING_EVERY_MS} ms): before longest ${f(max(quiet(pings)))} ms; during erasure longest ${f(max(during(pings)))} ms, p99 ${f(p99(during(pings)))} ms`);
  console.log(`this process's own event-loop delay during the erasure: longest ${f(ownDelay.max / 1e6)} ms, p99 ${f(ownDelay.percentile(99) / 1e6)} ms; machine load ${loadavg().map((x) => x.toFixed(1)).join(' ')}`);
  // the last line, for bench/growth-outside.ts
  console.log(JSON.stringify({
    deleteStatus: del.status, deleteMs: Math.round(deleteMs * 10) / 10, keyStatus: keysRefused, erasedMs: erasedIn === undefined ? null : Number(erasedIn), markersLeft,
    writesP99Ms: p99(during(writes)), writesMaxMs: max(during(writes)), writes: during(writes).length, healthMaxMs: max(during(pings)),
  }));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
