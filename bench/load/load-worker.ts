import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { newHistogram, summarize, type LatencySummary } from '../lib/latency.ts';
import { serveCommands } from '../lib/child.ts';

/**
 * The load generator, a child process of bench/run.ts: undici Pool clients against one origin.
 * - `closed`: N connections each send the next request as soon as the previous answer arrives (throughput at
 *   saturation; latency is send → last byte of the answer).
 * - `open`: requests are scheduled at a fixed rate; latency is measured from the intended send time, so a stalled
 *   server is charged for every request it delayed (no coordinated omission).
 */

export interface LoadSpec {
  origin: string;
  path: string;
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  /** request bodies, used round robin (none for GET); each `__N__` becomes a number unique to this worker */
  bodies?: string[];
  connections: number;
  durationMs: number;
  /** open loop only: requests per second */
  rate?: number;
}

export interface LoadResult {
  requests: number;
  /** answers with status 200 */
  ok: number;
  statuses: Record<string, number>;
  seconds: number;
  /** 200 answers per second */
  rps: number;
  latency: LatencySummary;
  /** first non-200 answer body, to explain failures */
  sampleError?: string;
}

const pools = new Map<string, Pool>();
const UNIQUE = '__N__';
let unique = 0;

/** Body templates split at `__N__`, so an eventId is fresh on every request (a repeat would be de-duplicated). */
function bodyMaker(bodies: string[] | undefined): () => string | undefined {
  if (!bodies || bodies.length === 0) return () => undefined;
  const parts = bodies.map((b) => b.split(UNIQUE));
  let next = 0;
  return () => {
    const p = parts[next++ % parts.length]!;
    if (p.length === 1) return p[0];
    let s = p[0]!;
    for (let j = 1; j < p.length; j++) s += (unique++).toString(36) + p[j]!;
    return s;
  };
}

function poolFor(origin: string, connections: number): Pool {
  const key = `${origin}#${connections}`;
  let p = pools.get(key);
  if (!p) {
    p = new Pool(origin, { connections, pipelining: 1, keepAliveTimeout: 60_000, keepAliveMaxTimeout: 60_000 });
    pools.set(key, p);
  }
  return p;
}

class Recorder {
  readonly hist = newHistogram();
  requests = 0;
  ok = 0;
  readonly statuses: Record<string, number> = {};
  sampleError: string | undefined;

  async send(pool: Pool, spec: LoadSpec, body: string | undefined, startedAt: number): Promise<void> {
    let status = 0;
    let text = '';
    try {
      const res = await pool.request({ path: spec.path, method: spec.method, headers: spec.headers, body });
      status = res.statusCode;
      text = await res.body.text();
    } catch (err) {
      text = err instanceof Error ? err.message : String(err);
    }
    this.hist.recordValue(Math.max(1, Math.round((performance.now() - startedAt) * 1000)));
    this.requests++;
    this.statuses[status] = (this.statuses[status] ?? 0) + 1;
    if (status === 200) this.ok++;
    else this.sampleError ??= `${status} ${text.slice(0, 300)}`;
  }

  result(seconds: number): LoadResult {
    const out: LoadResult = {
      requests: this.requests,
      ok: this.ok,
      statuses: this.statuses,
      seconds,
      rps: this.ok / seconds,
      latency: summarize(this.hist),
    };
    if (this.sampleError !== undefined) out.sampleError = this.sampleError;
    return out;
  }
}

async function closed(spec: LoadSpec): Promise<LoadResult> {
  const pool = poolFor(spec.origin, spec.connections);
  const rec = new Recorder();
  const makeBody = bodyMaker(spec.bodies);
  const started = performance.now();
  const deadline = started + spec.durationMs;
  const loop = async () => {
    while (performance.now() < deadline) {
      await rec.send(pool, spec, makeBody(), performance.now());
    }
  };
  await Promise.all(Array.from({ length: spec.connections }, loop));
  return rec.result((performance.now() - started) / 1000);
}

async function open(spec: LoadSpec): Promise<LoadResult> {
  const rate = spec.rate ?? 1000;
  const pool = poolFor(spec.origin, spec.connections);
  const rec = new Recorder();
  const makeBody = bodyMaker(spec.bodies);
  const total = Math.max(1, Math.round((rate * spec.durationMs) / 1000));
  const interval = 1000 / rate;
  const inflight: Promise<void>[] = [];
  const started = performance.now();
  let i = 0;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = performance.now();
      // Send everything whose intended time has come; latency starts at the intended time, not at this tick.
      while (i < total && started + i * interval <= now) {
        inflight.push(rec.send(pool, spec, makeBody(), started + i * interval));
        i++;
      }
      if (i >= total) resolve();
      else setTimeout(tick, Math.max(0, Math.min(1, started + i * interval - performance.now())));
    };
    tick();
  });
  await Promise.all(inflight);
  return rec.result(spec.durationMs / 1000);
}

serveCommands({
  closed: (spec: LoadSpec) => closed(spec),
  open: (spec: LoadSpec) => open(spec),
  async close() {
    await Promise.all([...pools.values()].map((p) => p.close()));
    pools.clear();
    return true;
  },
});
