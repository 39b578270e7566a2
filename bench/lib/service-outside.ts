import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { SERVICE_ENV, serviceNodeArgs } from '../../bin/dist.mjs';
import { REPO_ROOT } from './child.ts';

/**
 * The service as a user runs it (`npm start`'s `node dist/main.js`, or the source through tsx when dist/ is not
 * built), measured from outside: time from spawn to the first /health 200, and memory from /proc. Nothing of the
 * bench shares its process, so the figures are the service's own.
 */
export interface OutsideService {
  proc: ChildProcess;
  url: string;
  /** spawn to the first `GET /health` answering 200 */
  startMs: number;
  /** the service's anonymous RSS now (LMDB's mapped pages are file-backed and not in it) */
  anonBytes(): number;
  /** total RSS now */
  rssBytes(): number;
  /** SIGTERM, and wait for the exit (drain and snapshot) */
  stop(): Promise<void>;
}

/** The longest a service start is waited for, at bench sizes (a year of 10,000 projects restores in seconds). */
const START_DEADLINE_MS = 120_000;
/** How often /health is asked while the service starts: the start time's resolution. */
const HEALTH_POLL_MS = 10;

/** One field of /proc/PID/status in bytes (RssAnon, VmRSS). */
export function procStatusBytes(pid: number, field: 'RssAnon' | 'VmRSS'): number {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

/**
 * Node loads its fetch (undici) on the first call, ~40 ms here: done once before the clock starts, so a start time is
 * the service's, not this process's first request.
 */
let fetchLoaded: Promise<unknown> | undefined;

/** Settings an A/B run gives the service from the bench's own environment (e.g. `ANALYTICS_HEAP_GROWING_PERCENT=0`). */
const PASSED_THROUGH = ['MALLOC_ARENA_MAX', 'ANALYTICS_HEAP_GROWING_PERCENT'];

export function passThrough(): Record<string, string> {
  return Object.fromEntries(PASSED_THROUGH.filter((k) => process.env[k] !== undefined).map((k) => [k, process.env[k]!]));
}

export async function startOutside(dataDir: string, adminKey: string, env: Record<string, string> = {}): Promise<OutsideService> {
  await (fetchLoaded ??= fetch('data:,').then((r) => r.arrayBuffer()));
  const t0 = performance.now();
  const proc = spawn(process.execPath, serviceNodeArgs(), {
    cwd: REPO_ROOT,
    env: { PATH: process.env.PATH ?? '', ...SERVICE_ENV, ...passThrough(), PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: dataDir, ANALYTICS_ADMIN_KEY: adminKey, ANALYTICS_QUIET: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout!.on('data', (b: Buffer) => (out = (out + b.toString()).slice(-8000)));
  proc.stderr!.on('data', (b: Buffer) => (out = (out + b.toString()).slice(-8000)));
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  let url: string | undefined;
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`the service exited while starting: ${out}`);
    if (performance.now() - t0 > START_DEADLINE_MS) {
      proc.kill('SIGKILL');
      throw new Error(`the service did not answer /health within ${START_DEADLINE_MS} ms: ${out}`);
    }
    url ??= /HTTP (http:\/\/\S+)/.exec(out)?.[1];
    if (url !== undefined) {
      const ok = await fetch(`${url}/health`).then((r) => r.arrayBuffer().then(() => r.ok), () => false);
      if (ok) break;
    }
    await new Promise((r) => setTimeout(r, HEALTH_POLL_MS));
  }
  const startMs = performance.now() - t0;
  const pid = proc.pid!;
  return {
    proc,
    url,
    startMs,
    anonBytes: () => procStatusBytes(pid, 'RssAnon'),
    rssBytes: () => procStatusBytes(pid, 'VmRSS'),
    stop: async () => {
      proc.kill('SIGTERM');
      await exited;
    },
  };
}

/** A TCP port free on the loopback now (for a setting that takes a port, e.g. METRICS_PORT). */
export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/**
 * The service's own longest event-loop delay since the previous scrape (prom-client's monitorEventLoopDelay, reset at
 * each scrape): what its loop was held for, without the share of the cores the measuring processes took.
 */
export async function ownLoopDelayMs(metricsUrl: string): Promise<number> {
  const text = await (await fetch(metricsUrl)).text();
  const m = /^analytics_nodejs_eventloop_lag_max_seconds\s+(\S+)$/m.exec(text);
  if (!m) throw new Error('the operator metrics have no analytics_nodejs_eventloop_lag_max_seconds');
  return Number(m[1]) * 1000;
}

