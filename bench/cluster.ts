// long because one file measures the cluster end to end: NATS servers, nodes, load, failover and their report.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { AnalyticsState, applyOnce } from '../src/core/state.ts';
import type { LogRecord } from '../src/core/types.ts';
import { connectNats } from '../src/store/nats/connect.ts';
import { batchIdFor, JetStreamEventLog } from '../src/store/nats/event-log.ts';
import { ReadRpc } from '../src/store/nats/read-rpc.ts';
import { ensureEventStream, eventSubject, partitionOf, resourceNames } from '../src/store/nats/resources.ts';
import { startNatsCluster, type NatsCluster } from '../test/nats-cluster.ts';
import { BenchChild, REPO_ROOT } from './lib/child.ts';
import { median, newHistogram, summarize, type LatencySummary } from './lib/latency.ts';
import type { Progress } from './lib/progress.ts';
import type { LoadResult, LoadSpec } from './load/load-worker.ts';
import type { Row } from './report.ts';
import { storedEvents, USER_AGENTS, wireEvents } from './state/generate-events.ts';
import { HISTORY_FULL, HISTORY_QUICK, runClusterHistory, type HistoryParams, type HistoryResults } from './cluster-history.ts';
import { SERVICE_ENV, serviceNodeArgs } from '../bin/dist.mjs';

/**
 * `npm run bench -- --cluster` (CLUSTER.md §11 "Bench"): a real 3-server nats-server cluster on loopback, two cluster
 * service nodes and one single-node (LMDB) service as child processes (`node --import tsx src/main.ts`), all on this
 * machine. Figures: PubAck rates, HTTP ingest through a cluster node next to the single node in the same run, replay,
 * leader-kill stalls, read latencies, RSS. No thresholds: a goal not met is reported, not failed.
 */

export interface ClusterParams {
  /** sequential publishes for the PubAck latency */
  sequential: number;
  /** each pipelined / batch PubAck run lasts this long */
  pubMs: number;
  /** HTTP ingest: warm-up per target, then rounds of roundMs, targets interleaved */
  warmupMs: number;
  roundMs: number;
  rounds: number;
  /** events in the stream before the replay is measured (the HTTP rounds fill part of it) */
  replayEvents: number;
  /** stream-leader kills */
  kills: number;
  /** sequential reads for the read latencies */
  reads: number;
  /** sealing with history (cluster-history.ts) */
  history: HistoryParams;
}

export const CLUSTER_QUICK: ClusterParams = { sequential: 300, pubMs: 1500, warmupMs: 500, roundMs: 1500, rounds: 2, replayEvents: 200_000, kills: 2, reads: 200, history: HISTORY_QUICK };
export const CLUSTER_FULL: ClusterParams = { sequential: 2000, pubMs: 5000, warmupMs: 2000, roundMs: 4000, rounds: 4, replayEvents: 1_000_000, kills: 5, reads: 1000, history: HISTORY_FULL };

/** HTTP load: as the single-node ingest bench (bench/ingest.ts), so the two are comparable. */
const CONNECTIONS = 32;
const BATCH_SIZE = 100;
/** Outstanding publishes in the pipelined PubAck runs and in the batch run (CLUSTER.md §14's columns). */
const PIPELINES = [64, 256] as const;
const BATCH_OUTSTANDING = 16;
/** Appenders during the leader kills: enough to see the stall from many publishers at once. */
const KILL_APPENDERS = 16;
/** Events per appended batch in the kill runs (a small ingest batch). */
const KILL_BATCH = 10;
/** The prober's publishes: a short timeout, so one sent to the dead leader does not hide when a new one answers. */
const PROBE_EVERY_MS = 50;
const PROBE_TIMEOUT_MS = 250;
/** Publishing has recovered from a kill when this long carries half the acknowledgements it carried before the kill. */
const RATE_WINDOW_MS = 500;
/** A stall longer than this ends the measurement (the service's publish deadline is 30 s). */
const STALL_GIVE_UP_MS = 40_000;
/** Between kills: the restarted server catches up before the next leader is killed. */
const SETTLE_MS = 3_000;
/** After an owner's SIGTERM completed, reads through the survivor are watched this much longer. */
const HANDOVER_WATCH_MS = 3_000;
/** Startup of a child node (tsx compile + NATS resources) on a loaded 2-core machine. */
const NODE_START_MS = 60_000;
/** A fresh node has caught up when it answers the same pageviews as a node that folded all along. */
const CATCH_UP_DEADLINE_MS = 180_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const RATE_ENV = {
  ANALYTICS_RATE_PER_KEY: '1000000000',
  ANALYTICS_BURST_PER_KEY: '1000000000',
  ANALYTICS_RATE_PER_IP: '1000000000',
  ANALYTICS_BURST_PER_IP: '1000000000',
};

export interface ClusterResults {
  pubAck: { sequential: { perSec: number; latency: LatencySummary }; pipelined: Record<string, number>; batchEventsPerSec: number; batchMessagesPerSec: number };
  http: Record<'lmdbSingle' | 'clusterSingle' | 'lmdbBatch' | 'clusterBatch', { eventsPerSec: number; rounds: number[]; latency?: LatencySummary; errors?: string }>;
  replay: { events: number; messages: number; seconds: number; eventsPerSec: number };
  /** partition `part` of the bench project: reads on its owner and forwarded from the other node; unserved after kill -9 / SIGTERM of its owner, seen through the survivor */
  owners: { takeoverMs: number; handoverMs: number; localReads: LatencySummary; forwardedReads: LatencySummary };
  /** when the HTTP load stopped: how long each node took to fold up to the stream's end (its reads answered 503 until then) */
  foldLag: { events: number; seconds: Record<string, number> };
  freshNode: { events: number; seconds: number; eventsPerSec: number; restoredSnapshots: number };
  /** stall: until publishing ran at half its earlier rate; election: until a new publish (sent after the kill) was acknowledged */
  kills: { stallsMs: number[]; medianMs: number; maxMs: number; electionMs: number[]; lastSeqsAgree: boolean; lastSeqs: Array<number | undefined> };
  reads: { single: LatencySummary; cluster: LatencySummary; forwardTransport: LatencySummary; answerBytes: number };
  rss: Record<string, number>;
  history: HistoryResults;
  notes: string[];
}

// --------------------------------------------------------------------------------------------- child nodes

interface Node {
  name: string;
  proc: ChildProcess;
  url: string;
  output: () => string;
}

function startNode(name: string, env: Record<string, string>): Promise<Node> {
  const proc = spawn(process.execPath, serviceNodeArgs(), {
    cwd: REPO_ROOT,
    env: { ...process.env, ...SERVICE_ENV, PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_QUIET: '0', ...RATE_ENV, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const keep = (c: Buffer) => (out = (out + c.toString()).slice(-50_000));
  proc.stderr!.on('data', keep);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`${name} did not start within ${NODE_START_MS} ms: ${out}`));
    }, NODE_START_MS);
    proc.stdout!.on('data', (c: Buffer) => {
      keep(c);
      const m = /HTTP (http:\/\/\S+)\s+gRPC/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ name, proc, url: m[1]!, output: () => out });
      }
    });
    proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited early (${code ?? signal}): ${out}`));
    });
  });
}

async function stopNode(n: Node): Promise<void> {
  if (n.proc.exitCode !== null || n.proc.signalCode !== null) return;
  const gone = new Promise<void>((r) => n.proc.once('exit', () => r()));
  n.proc.kill('SIGTERM');
  const t = setTimeout(() => n.proc.kill('SIGKILL'), 20_000);
  await gone;
  clearTimeout(t);
}

function rssOf(pid: number | undefined): number {
  if (pid === undefined) return NaN;
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : NaN;
  } catch {
    return NaN;
  }
}

async function post(url: string, route: string, key: string, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(url + route, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json().catch(() => undefined) };
}

async function get(url: string, route: string, key: string): Promise<{ status: number; body: any; bytes: number }> {
  const res = await fetch(url + route, { headers: { authorization: `Bearer ${key}` } });
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: res.status, body, bytes: text.length };
}

async function createProject(url: string, adminKey: string): Promise<{ id: string; secret: string }> {
  const r = await post(url, '/projects', adminKey, { name: 'bench', allowed_origins: [], allowed_referrers: [], monthly_quota: 0 });
  if (r.status !== 200) throw new Error(`createProject on ${url}: ${r.status} ${JSON.stringify(r.body)}`);
  return { id: r.body.project.id, secret: r.body.keys.secret };
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, ms: number): Promise<T> {
  const started = Date.now();
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() - started > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(50);
  }
}

// ------------------------------------------------------------------------------------------------ PubAck

/** ~330 B of JSON, like one stored event. */
function eventBody(i: number): string {
  return JSON.stringify([{ t: 'e', p: 'p_bench', ts: 1_700_000_000_000 + i, rt: 1_700_000_000_000 + i, day: '2023-11-14', event: 'page_view', url: `https://site.example/p/${i % 50}`, path: `/p/${i % 50}`, referrer: 'news.example', source: 'news.example', sessionId: `s${i}`, user: `s:s${i}`, country: 'DE', device: 'desktop', browser: 'Firefox', os: 'Linux', eventId: `e${i}` }]);
}

async function benchPubAck(nc: NatsConnection, p: ClusterParams, progress: Progress): Promise<ClusterResults['pubAck']> {
  const names = await ensureEventStream(nc, { tag: `benchpub${process.pid}`, maxStreamBytes: 1024 ** 3 });
  const js = jetstream(nc, { timeout: 10_000 });
  const subject = eventSubject(names, 0);
  const h = () => {
    const x = natsHeaders();
    x.set('Analytics-Format', '1');
    return x;
  };
  let n = 0;
  const publish = (body: string) => js.publish(subject, body, { msgID: `b${process.pid}-${n++}`, headers: h() });

  progress.show(`PubAck: ${p.sequential} sequential publishes`);
  const hist = newHistogram();
  const seqStart = performance.now();
  for (let i = 0; i < p.sequential; i++) {
    const t = performance.now();
    await publish(eventBody(i));
    hist.recordValue(Math.max(1, Math.round((performance.now() - t) * 1000)));
  }
  const sequential = { perSec: p.sequential / ((performance.now() - seqStart) / 1000), latency: summarize(hist) };

  const pipelined = async (outstanding: number, body: (i: number) => string): Promise<number> => {
    const deadline = performance.now() + p.pubMs;
    const started = performance.now();
    let done = 0;
    await Promise.all(
      Array.from({ length: outstanding }, async () => {
        while (performance.now() < deadline) {
          await publish(body(n));
          done++;
        }
      }),
    );
    return done / ((performance.now() - started) / 1000);
  };
  const out: Record<string, number> = {};
  for (const w of PIPELINES) {
    progress.show(`PubAck: pipelined, ${w} outstanding`);
    out[String(w)] = await pipelined(w, eventBody);
  }
  progress.show(`PubAck: one message per batch of ${BATCH_SIZE} events, ${BATCH_OUTSTANDING} outstanding`);
  const batchBody = (i: number) => `[${Array.from({ length: BATCH_SIZE }, (_, j) => eventBody(i * BATCH_SIZE + j).slice(1, -1)).join(',')}]`;
  const bodies = Array.from({ length: 8 }, (_, i) => batchBody(i));
  const batchMessagesPerSec = await pipelined(BATCH_OUTSTANDING, (i) => bodies[i % bodies.length]!);
  return { sequential, pipelined: out, batchMessagesPerSec, batchEventsPerSec: batchMessagesPerSec * BATCH_SIZE };
}

// ---------------------------------------------------------------------------------------------- HTTP ingest

async function benchHttp(
  worker: BenchChild,
  lmdb: { url: string; secret: string },
  node: { url: string; secret: string },
  p: ClusterParams,
  progress: Progress,
): Promise<{ results: ClusterResults['http']; clusterEvents: number }> {
  const singles = wireEvents(1000).map((e) => JSON.stringify(e));
  const batches = Array.from({ length: 20 }, (_, i) => JSON.stringify(wireEvents(BATCH_SIZE, 100 + i)));
  const spec = (origin: string, secret: string, bodies: string[]): Omit<LoadSpec, 'durationMs'> => ({
    origin,
    path: '/analytics',
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}`, 'user-agent': USER_AGENTS[0]! },
    bodies,
    connections: CONNECTIONS,
  });
  const targets = [
    { name: 'lmdbSingle', spec: spec(lmdb.url, lmdb.secret, singles), per: 1, cluster: false },
    { name: 'clusterSingle', spec: spec(node.url, node.secret, singles), per: 1, cluster: true },
    { name: 'lmdbBatch', spec: spec(lmdb.url, lmdb.secret, batches), per: BATCH_SIZE, cluster: false },
    { name: 'clusterBatch', spec: spec(node.url, node.secret, batches), per: BATCH_SIZE, cluster: true },
  ] as const;
  let clusterEvents = 0;
  const rounds = new Map<string, LoadResult[]>();
  const run = async (t: (typeof targets)[number], ms: number) => {
    const r = await worker.call<LoadResult>('closed', { ...t.spec, durationMs: ms });
    if (t.cluster) clusterEvents += r.ok * t.per;
    return r;
  };
  for (const t of targets) {
    progress.show(`HTTP ingest warm-up: ${t.name}`);
    await run(t, p.warmupMs);
  }
  for (let r = 1; r <= p.rounds; r++) {
    for (const t of targets) {
      progress.show(`HTTP ingest round ${r}/${p.rounds}: ${t.name}`);
      const res = await run(t, p.roundMs);
      rounds.set(t.name, [...(rounds.get(t.name) ?? []), res]);
      progress.show(`HTTP ingest round ${r}/${p.rounds}: ${t.name}: ${Math.round(res.rps * t.per)} ev/s`);
    }
  }
  const results = {} as ClusterResults['http'];
  for (const t of targets) {
    const rs = rounds.get(t.name)!;
    const eps = rs.map((x) => x.rps * t.per);
    const mid = [...rs].sort((a, b) => a.rps - b.rps)[(rs.length - 1) >> 1]!;
    const bad = rs.find((x) => x.sampleError)?.sampleError;
    results[t.name] = { eventsPerSec: median(eps), rounds: eps, latency: mid.latency, ...(bad ? { errors: bad } : {}) };
  }
  return { results, clusterEvents };
}

// --------------------------------------------------------------------------------------------------- replay

/** Every partition read from sequence 0 with the real reducer (applyOnce), 4 partitions at a time (the log's bound). */
async function benchReplay(urls: string[], partitions: number): Promise<ClusterResults['replay']> {
  const nc = await connectNats(urls, 'bench-replay');
  const follow = await connectNats(urls, 'bench-replay-follow');
  try {
    const log = await JetStreamEventLog.open(nc, [follow], resourceNames(), partitions);
    const started = performance.now();
    let events = 0;
    let messages = 0;
    await Promise.all(
      Array.from({ length: partitions }, async (_, part) => {
        const state = new AnalyticsState();
        for await (const entries of log.read(part, 0)) {
          for (const e of entries) {
            messages++;
            for (const r of e.records) applyOnce(state, e.seq, r);
            events += e.records.length;
            state.lastSeq = e.seq;
          }
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    await log.close();
    return { events, messages, seconds, eventsPerSec: events / seconds };
  } finally {
    await follow.close();
    await nc.close();
  }
}

// ------------------------------------------------------------------------------------------- leader kills

export async function benchKills(cluster: NatsCluster, p: ClusterParams, progress: Progress, notes: string[]): Promise<ClusterResults['kills']> {
  const tag = `benchkill${process.pid}`;
  const nc = await connectNats(cluster.urlList, 'bench-kill');
  const stallsMs: number[] = [];
  const electionMs: number[] = [];
  let stop = false;
  const ackTimes: number[] = [];
  try {
    const names = await ensureEventStream(nc, { tag, maxStreamBytes: 1024 ** 3 });
    const log = await JetStreamEventLog.open(nc, [], names, 1);
    const records: LogRecord[] = [...storedEvents({ projectId: 'p_kill', events: KILL_BATCH * 100, lastDay: new Date().toISOString().slice(0, 10), days: 1 })];
    let failures = 0;
    const appenders = Promise.all(
      Array.from({ length: KILL_APPENDERS }, async (_, k) => {
        for (let i = 0; !stop; i++) {
          const from = ((k + i) % 100) * KILL_BATCH;
          const batch = records.slice(from, from + KILL_BATCH).map((r, j) => ({ ...r, eventId: `${k}-${i}-${j}` }) as LogRecord);
          try {
            await log.append(0, batch, batchIdFor('p_kill', batch));
            ackTimes.push(performance.now());
          } catch {
            failures++;
          }
        }
      }),
    );
    // A prober publishing every PROBE_EVERY_MS with a short timeout: when a new leader takes writes again.
    const probeNc = await connectNats(cluster.urlList, 'bench-kill-probe');
    const probeJs = jetstream(probeNc, { timeout: PROBE_TIMEOUT_MS });
    const probeOk: number[] = [];
    const prober = (async () => {
      for (let i = 0; !stop; i++) {
        const sent = performance.now();
        const h = natsHeaders();
        h.set('Analytics-Format', '1');
        try {
          await probeJs.publish(eventSubject(names, 0), '[]', { msgID: `probe-${process.pid}-${i}`, headers: h, timeout: PROBE_TIMEOUT_MS });
          probeOk.push(sent);
        } catch {
          /* no leader yet */
        }
        await sleep(Math.max(0, PROBE_EVERY_MS - (performance.now() - sent)));
      }
    })();
    await sleep(SETTLE_MS);
    for (let k = 1; k <= p.kills; k++) {
      const leader = await waitFor('a stream leader', () => cluster.streamLeader(names.stream), 30_000);
      const victim = cluster.servers.findIndex((s) => s.name === leader);
      progress.show(`leader kill ${k}/${p.kills}: kill -9 ${leader}`);
      const before = ackTimes.filter((t) => t > performance.now() - RATE_WINDOW_MS * 2).length / 2;
      const killedAt = performance.now();
      await cluster.kill(victim, 'SIGKILL');
      // Stalled until a window of RATE_WINDOW_MS after the kill carries half the acknowledgements of one before it.
      const recovered = await waitFor(
        'publishing to recover after the kill',
        async () => {
          const after = ackTimes.filter((t) => t > killedAt);
          for (let i = 0; i < after.length; i++) {
            let j = i;
            while (j < after.length && after[j]! < after[i]! + RATE_WINDOW_MS) j++;
            if (j - i >= before / 2 && after[i]! + RATE_WINDOW_MS <= performance.now()) return after[i]!;
          }
          return undefined;
        },
        STALL_GIVE_UP_MS,
      ).catch(() => undefined);
      if (recovered === undefined) {
        stallsMs.push(STALL_GIVE_UP_MS);
        notes.push(`leader kill ${k}: publishing had not recovered after ${STALL_GIVE_UP_MS} ms`);
      } else stallsMs.push(Math.round(recovered - killedAt));
      const firstWrite = probeOk.find((t) => t > killedAt);
      electionMs.push(firstWrite === undefined ? NaN : Math.round(firstWrite - killedAt));
      const newLeader = await cluster.streamLeader(names.stream);
      progress.show(`leader kill ${k}/${p.kills}: stall ${stallsMs.at(-1)} ms (new leader ${newLeader ?? 'none'}); restarting ${leader}`);
      await cluster.start(victim);
      await sleep(SETTLE_MS);
      ackTimes.splice(0, ackTimes.length - 1);
      const rate = ackTimes.length;
      await sleep(RATE_WINDOW_MS * 2);
      if (ackTimes.length - rate < before / 4) notes.push(`leader kill ${k}: after the restart of ${leader}, publishing ran at ${((ackTimes.length - rate) / 2).toFixed(0)} acks per ${RATE_WINDOW_MS} ms (before the kill: ${before.toFixed(0)})`);
    }
    stop = true;
    await appenders;
    await prober;
    await probeNc.close();
    if (failures > 0) notes.push(`leader kills: ${failures} appends failed past the publish deadline`);
    const lastSeqs = await waitFor(
      'equal last_seq on all servers',
      async () => {
        const s = await cluster.streamLastSeqs(names.stream);
        return s.every((x) => x !== undefined) && new Set(s).size === 1 ? s : undefined;
      },
      30_000,
    ).catch(async () => cluster.streamLastSeqs(names.stream));
    const agree = lastSeqs.every((x) => x !== undefined) && new Set(lastSeqs).size === 1;
    return { stallsMs, medianMs: median(stallsMs), maxMs: Math.max(...stallsMs), electionMs, lastSeqsAgree: agree, lastSeqs };
  } finally {
    stop = true;
    await nc.close();
  }
}

// ---------------------------------------------------------------------------------------------------- reads

async function readLatency(url: string, key: string, n: number): Promise<{ latency: LatencySummary; bytes: number }> {
  const today = new Date().toISOString().slice(0, 10);
  const hist = newHistogram();
  let bytes = 0;
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const r = await get(url, `/metrics?date=${today}`, key);
    if (r.status !== 200) throw new Error(`GET /metrics on ${url}: ${r.status} ${JSON.stringify(r.body)}`);
    hist.recordValue(Math.max(1, Math.round((performance.now() - t) * 1000)));
    bytes = r.bytes;
  }
  return { latency: summarize(hist), bytes };
}

/** Request/reply through NATS as a forwarded read travels (ReadRpc, two connections), carrying a real answer's body. */
async function forwardTransport(urls: string[], answer: unknown, n: number): Promise<LatencySummary> {
  const ncOwner = await connectNats(urls, 'bench-owner');
  const ncAsker = await connectNats(urls, 'bench-asker');
  const prefix = `analytics.v1_bench${process.pid}.read`;
  const owner = new ReadRpc(ncOwner, { subjectPrefix: prefix });
  const asker = new ReadRpc(ncAsker, { subjectPrefix: prefix });
  try {
    owner.serve(0, () => answer);
    await ncOwner.flush();
    const hist = newHistogram();
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      await asker.request(0, { projectId: 'p', from: 'x', to: 'y' });
      hist.recordValue(Math.max(1, Math.round((performance.now() - t) * 1000)));
    }
    return summarize(hist);
  } finally {
    owner.close();
    await ncOwner.close();
    await ncAsker.close();
  }
}

// -------------------------------------------------------------------------------------------------- section

export async function runCluster(tmp: string, p: ClusterParams, progress: Progress): Promise<ClusterResults> {
  const notes: string[] = [];
  progress.show('starting a 3-server nats-server cluster');
  const cluster = await startNatsCluster();
  const nodes: Node[] = [];
  const worker = new BenchChild(path.join(REPO_ROOT, 'bench/load/load-worker.ts'));
  try {
    const rss: Record<string, number> = {};
    const nc = await connectNats(cluster.urlList, 'bench-pub');
    let pubAck: ClusterResults['pubAck'];
    try {
      pubAck = await benchPubAck(nc, p, progress);
    } finally {
      await nc.close();
    }

    progress.next('starting two cluster nodes (default ANALYTICS_FOLD=owner) and one single node (LMDB), as processes');
    const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
    const clusterEnv = (id: string) => ({
      ANALYTICS_MODE: 'cluster',
      ANALYTICS_NODE_ID: id,
      ANALYTICS_NATS: cluster.urls,
      ANALYTICS_ADMIN_KEY: adminKey,
      ANALYTICS_DATA_DIR: path.join(tmp, `cluster-${id}`),
      ANALYTICS_MAX_STREAM_BYTES: String(2 * 1024 ** 3),
    });
    const a = await startNode('cluster-a', clusterEnv('a'));
    nodes.push(a);
    const [b, single] = await Promise.all([
      startNode('cluster-b', clusterEnv('b')),
      startNode('single', { ANALYTICS_ADMIN_KEY: adminKey, ANALYTICS_DATA_DIR: path.join(tmp, 'single') }),
    ]);
    nodes.push(b, single);
    const pc = await createProject(a.url, adminKey);
    const ps = await createProject(single.url, adminKey);
    await waitFor('the key on node b', async () => ((await get(b.url, '/projects', pc.secret)).status === 401 ? undefined : true), 10_000);

    progress.next('HTTP ingest: single node (LMDB) and cluster node a, single events and batches of 100');
    const { results: http, clusterEvents } = await benchHttp(worker, { url: single.url, secret: ps.secret }, { url: a.url, secret: pc.secret }, p, progress);
    let streamEvents = clusterEvents;
    while (streamEvents < p.replayEvents) {
      progress.show(`filling the stream for the replay: ${streamEvents.toLocaleString('en-US')} of ${p.replayEvents.toLocaleString('en-US')} events`);
      const batches = Array.from({ length: 20 }, (_, i) => JSON.stringify(wireEvents(BATCH_SIZE, 300 + i)));
      const r = await worker.call<LoadResult>('closed', {
        origin: a.url,
        path: '/analytics',
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${pc.secret}`, 'user-agent': USER_AGENTS[0]! },
        bodies: batches,
        connections: CONNECTIONS,
        durationMs: Math.min(10_000, Math.max(1000, ((p.replayEvents - streamEvents) / Math.max(1, http.clusterBatch.eventsPerSec)) * 1000)),
      });
      if (r.ok === 0) throw new Error(`filling the stream: no batch acknowledged (${r.sampleError})`);
      streamEvents += r.ok * BATCH_SIZE;
    }
    for (const n of nodes) rss[n.name] = rssOf(n.proc.pid);
    // Ingest is acknowledged after the PubAck; the nodes fold behind it. How far behind, when the load stops:
    progress.show('waiting for both cluster nodes to fold what was acknowledged');
    const today = new Date().toISOString().slice(0, 10);
    const lagStarted = performance.now();
    const foldLagSeconds: Record<string, number> = {};
    await Promise.all(
      [a, b].map(async (n) => {
        await waitFor(`${n.name} to fold the stream's end`, async () => ((await get(n.url, `/metrics?date=${today}`, pc.secret)).status === 200 ? true : undefined), CATCH_UP_DEADLINE_MS);
        foldLagSeconds[n.name] = (performance.now() - lagStarted) / 1000;
      }),
    );

    progress.next('read latencies: single node, cluster node (read barrier), forwarding transport');
    const singleReads = await readLatency(single.url, ps.secret, p.reads);
    const clusterReads = await readLatency(b.url, pc.secret, p.reads);
    const answer = (await get(b.url, `/metrics?date=${today}`, pc.secret)).body;
    const forward = await forwardTransport(cluster.urlList, answer, p.reads);

    progress.next(`replay: ${streamEvents.toLocaleString('en-US')} events, every partition from sequence 0 with applyOnce`);
    const replay = await benchReplay(cluster.urlList, 16);

    progress.next('a fresh node catches up (snapshot if any, then the stream)');
    const want = (await get(a.url, `/metrics?date=${today}`, pc.secret)).body;
    const freshStarted = performance.now();
    // FOLD=all: node c folds every partition itself (an owner-mode node would forward this read to the owner)
    const c = await startNode('cluster-c', { ...clusterEnv('c'), ANALYTICS_FOLD: 'all' });
    nodes.push(c);
    await waitFor(
      'node c to answer as node a does',
      async () => {
        const r = await get(c.url, `/metrics?date=${today}`, pc.secret);
        return r.status === 200 && r.body.pageviews === want.pageviews && r.body.users === want.users ? true : undefined;
      },
      CATCH_UP_DEADLINE_MS,
    );
    const freshSeconds = (performance.now() - freshStarted) / 1000;
    const restoredSnapshots = (c.output().match(/restored snapshot at sequence [1-9]/g) ?? []).length;
    const freshNode = { events: replay.events, seconds: freshSeconds, eventsPerSec: replay.events / freshSeconds, restoredSnapshots };
    rss['cluster-c (after catching up)'] = rssOf(c.proc.pid);
    for (const [i, s] of cluster.servers.entries()) rss[`nats-server n${i + 1}`] = rssOf(s.proc?.pid);
    await stopNode(c);
    nodes.splice(nodes.indexOf(c), 1);

    progress.next('partition owners: forwarded reads, takeover after kill -9, hand-over on SIGTERM');
    const part = partitionOf(pc.id, 16);
    const owns = (n: Node) => {
      const m = [...n.output().matchAll(new RegExp(`partition ${part}: (owned here|no longer owned here)`, 'g'))].at(-1);
      return m?.[1] === 'owned here';
    };
    const ownerOf = async (among: Node[]) => waitFor(`an owner of partition ${part}`, async () => among.find(owns), 30_000);
    const readOk = async (n: Node) => (await get(n.url, `/metrics?date=${today}`, pc.secret)).status === 200;
    const owner1 = await ownerOf([a, b]);
    const other1 = owner1 === a ? b : a;
    const localReads = await readLatency(owner1.url, pc.secret, p.reads);
    const forwardedReads = await readLatency(other1.url, pc.secret, p.reads);
    let t = performance.now();
    owner1.proc.kill('SIGKILL');
    await waitFor('reads through the survivor after the kill', async () => ((await readOk(other1)) ? true : undefined), 60_000);
    const takeoverMs = performance.now() - t;
    nodes.splice(nodes.indexOf(owner1), 1);
    const back = await startNode(`${owner1.name} (restarted)`, clusterEnv(owner1 === a ? 'a' : 'b'));
    nodes.push(back);
    await sleep(5_000); // the returning member settles; a hand-over back to it may follow
    const owner2 = await ownerOf([back, other1]);
    const other2 = owner2 === back ? other1 : back;
    // Reads through the survivor all through the stop and HANDOVER_WATCH_MS after: the longest time without a 200.
    t = performance.now();
    let lastOk = t;
    let handoverMs = 0;
    const stopping = stopNode(owner2);
    let stopped = false;
    void stopping.then(() => (stopped = true));
    for (let until = Infinity; performance.now() < until; await sleep(20)) {
      if (stopped && until === Infinity) until = performance.now() + HANDOVER_WATCH_MS;
      const ok = await readOk(other2).catch(() => false);
      const now = performance.now();
      if (ok) {
        handoverMs = Math.max(handoverMs, now - lastOk);
        lastOk = now;
      } else if (now - t > 60_000) throw new Error('reads through the survivor did not come back within 60 s of the SIGTERM');
    }
    await stopping;
    nodes.splice(nodes.indexOf(owner2), 1);
    const owners = { takeoverMs, handoverMs, localReads: localReads.latency, forwardedReads: forwardedReads.latency };

    // Before the kills: a server restarted after a kill refused new streams ("insufficient storage") in one run.
    progress.next(`history: ${p.history.projects} projects × ${p.history.days} days, all live, then sealed (in-process node, moved clock)`);
    const history = await runClusterHistory(cluster, tmp, p.history, progress);

    progress.next(`stream-leader kills: ${p.kills}, under ${KILL_APPENDERS} appenders`);
    const kills = await benchKills(cluster, p, progress, notes);

    return {
      pubAck,
      http,
      replay,
      freshNode,
      foldLag: { events: streamEvents, seconds: foldLagSeconds },
      owners,
      kills,
      reads: { single: singleReads.latency, cluster: clusterReads.latency, forwardTransport: forward, answerBytes: singleReads.bytes },
      rss,
      history,
      notes,
    };
  } finally {
    await worker.call('close').catch(() => {});
    await worker.stop();
    for (const n of nodes.reverse()) await stopNode(n).catch(() => {});
    await cluster.stop();
  }
}

// ----------------------------------------------------------------------------------------------------- rows

const fmt = (n: number, digits = 0) => (Number.isFinite(n) ? n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : 'n/a');
const ms = (x: number) => `${x.toFixed(x < 1 ? 3 : 2)} ms`;
const mib = (b: number) => (Number.isFinite(b) ? `${(b / 2 ** 20).toFixed(0)} MiB` : 'n/a');

export function clusterRows(r: ClusterResults): Row[] {
  const rows: Row[] = [];
  const s = r.pubAck.sequential;
  rows.push({ id: 'cluster.puback.sequential', what: 'PubAck, sequential await js.publish (R3 file stream, ~330 B): msg/s (p50 / p99)', value: `${fmt(s.perSec)} /s (${ms(s.latency.p50)} / ${ms(s.latency.p99)})`, num: s.perSec });
  for (const [w, v] of Object.entries(r.pubAck.pipelined)) rows.push({ id: `cluster.puback.pipelined${w}`, what: `PubAck, pipelined, ${w} outstanding`, value: `${fmt(v)} msg/s`, num: v });
  rows.push({ id: 'cluster.puback.batch', what: `PubAck, one message per batch of ${BATCH_SIZE} events (~33 KB), ${BATCH_OUTSTANDING} outstanding`, value: `${fmt(r.pubAck.batchEventsPerSec)} ev/s (${fmt(r.pubAck.batchMessagesPerSec)} msg/s)`, num: r.pubAck.batchEventsPerSec });
  const h = r.http;
  const lat = (x: { latency?: LatencySummary }) => (x.latency ? ` (p50 / p99 ${ms(x.latency.p50)} / ${ms(x.latency.p99)})` : '');
  rows.push({ id: 'cluster.http.lmdbSingle', what: `Single node (LMDB), HTTP single events, ${CONNECTIONS} conns${lat(h.lmdbSingle)}`, value: `${fmt(h.lmdbSingle.eventsPerSec)} ev/s`, num: h.lmdbSingle.eventsPerSec });
  const rs = ratioOfRounds(h.clusterSingle.rounds, h.lmdbSingle.rounds);
  rows.push({ id: 'cluster.http.single', what: `Cluster node, HTTP single events, ${CONNECTIONS} conns${lat(h.clusterSingle)}; bounded by PubAck round trips`, value: `${fmt(h.clusterSingle.eventsPerSec)} ev/s`, num: h.clusterSingle.eventsPerSec, ratio: rs, ref: 'single node' });
  rows.push({ id: 'cluster.http.lmdbBatch', what: `Single node (LMDB), HTTP batches of ${BATCH_SIZE}, ${CONNECTIONS} conns${lat(h.lmdbBatch)}`, value: `${fmt(h.lmdbBatch.eventsPerSec)} ev/s`, num: h.lmdbBatch.eventsPerSec });
  const rb = ratioOfRounds(h.clusterBatch.rounds, h.lmdbBatch.rounds);
  rows.push({ id: 'cluster.http.batch', what: `Cluster node, HTTP batches of ${BATCH_SIZE}, ${CONNECTIONS} conns${lat(h.clusterBatch)}`, value: `${fmt(h.clusterBatch.eventsPerSec)} ev/s`, num: h.clusterBatch.eventsPerSec, ratio: rb, ref: 'single node', goal: '≥ 50 %', met: rb >= 0.5 });
  rows.push({
    id: 'cluster.foldLag',
    what: `Fold lag when the HTTP load stopped (${fmt(r.foldLag.events)} events acknowledged through node a): until each node's read barrier passed`,
    value: Object.entries(r.foldLag.seconds).map(([n, x]) => `${n} ${fmt(x, 1)} s`).join(', '),
    num: Math.max(...Object.values(r.foldLag.seconds)),
  });
  rows.push({ id: 'cluster.replay', what: `Replay, ${fmt(r.replay.events)} events (${fmt(r.replay.messages)} messages), 16 partitions 4 at a time, applyOnce`, value: `${fmt(r.replay.eventsPerSec)} ev/s (${fmt(r.replay.seconds, 1)} s)`, num: r.replay.eventsPerSec });
  rows.push({
    id: 'cluster.freshNode',
    what: `A fresh node (process start to the same answer), ${fmt(r.freshNode.events)} events in the stream, ${r.freshNode.restoredSnapshots} partition snapshots restored`,
    value: `${fmt(r.freshNode.seconds, 1)} s (${fmt(r.freshNode.eventsPerSec)} ev/s)`,
    num: r.freshNode.seconds,
  });
  const k = r.kills;
  rows.push({ id: 'cluster.leaderKill', what: `Stream-leader kill -9: publish stall, median / max over ${k.stallsMs.length} kills (${k.stallsMs.join(', ')} ms)`, value: `${fmt(k.medianMs / 1000, 1)} s / ${fmt(k.maxMs / 1000, 1)} s`, num: k.maxMs, note: k.lastSeqsAgree ? 'last_seq equal on all servers after' : `last_seq differ: ${k.lastSeqs.join('/')}` });
  rows.push({ id: 'cluster.leaderKill.election', what: `Stream-leader kill -9: until a publish sent after the kill is acknowledged (new leader), median / max (${k.electionMs.join(', ')} ms)`, value: `${fmt(median(k.electionMs) / 1000, 1)} s / ${fmt(Math.max(...k.electionMs) / 1000, 1)} s`, num: Math.max(...k.electionMs) });
  rows.push({ id: 'cluster.takeover', what: 'Owner kill -9: until a read through the other node answers 200 again (lease 5 s + claim + catch-up)', value: `${fmt(r.owners.takeoverMs / 1000, 1)} s`, num: r.owners.takeoverMs, goal: '< 10 s', met: r.owners.takeoverMs < 10_000 });
  rows.push({ id: 'cluster.handover', what: 'Owner SIGTERM (leases released): longest time without a 200 from reads through the other node, during the stop and 3 s after', value: `${fmt(r.owners.handoverMs / 1000, 1)} s`, num: r.owners.handoverMs });
  rows.push({ id: 'cluster.read.owner', what: 'GET /metrics on the partition owner (read barrier, local): p50 / p99', value: `${ms(r.owners.localReads.p50)} / ${ms(r.owners.localReads.p99)}`, num: r.owners.localReads.p99 });
  rows.push({ id: 'cluster.read.forwarded', what: 'GET /metrics on the other node (forwarded to the owner over NATS): p50 / p99', value: `${ms(r.owners.forwardedReads.p50)} / ${ms(r.owners.forwardedReads.p99)}`, num: r.owners.forwardedReads.p99 });
  rows.push({ id: 'cluster.read.single', what: 'GET /metrics, single node (LMDB): p50 / p99', value: `${ms(r.reads.single.p50)} / ${ms(r.reads.single.p99)}`, num: r.reads.single.p99 });
  rows.push({ id: 'cluster.read.barrier', what: 'GET /metrics, cluster node b (before the owner phase; owner or forwarded): p50 / p99', value: `${ms(r.reads.cluster.p50)} / ${ms(r.reads.cluster.p99)}`, num: r.reads.cluster.p99 });
  rows.push({ id: 'cluster.read.forward', what: `Forwarded read transport (ReadRpc request/reply, a ${fmt(r.reads.answerBytes)} B answer): p50 / p99`, value: `${ms(r.reads.forwardTransport.p50)} / ${ms(r.reads.forwardTransport.p99)}`, num: r.reads.forwardTransport.p99 });
  rows.push({ id: 'cluster.rss', what: 'RSS per process', value: Object.entries(r.rss).map(([n, b]) => `${n} ${mib(b)}`).join(', ') });
  const hs = r.history;
  const of = `${fmt(hs.live.liveDays)} project-days (${fmt(hs.events)} events)`;
  rows.push({ id: 'cluster.history.heap', what: `History of ${of}: heap after GC, every day live (as before sealing) → closed days sealed`, value: `${mib(hs.live.heapBytes)} → ${mib(hs.sealed.heapBytes)} (${fmt((hs.live.heapBytes - hs.sealed.heapBytes) / Math.max(1, hs.live.liveDays - hs.sealed.liveDays))} B per sealed day)`, num: hs.sealed.heapBytes, ratio: hs.sealed.heapBytes / hs.live.heapBytes, ref: 'all live' });
  rows.push({ id: 'cluster.history.snapshot', what: `History of ${of}: newest partition snapshots, all live → sealed (${fmt(hs.sealed.liveDays)} live days left)`, value: `${mib(hs.live.snapshotBytes)} → ${mib(hs.sealed.snapshotBytes)}`, num: hs.sealed.snapshotBytes, ratio: hs.sealed.snapshotBytes / hs.live.snapshotBytes, ref: 'all live' });
  rows.push({ id: 'cluster.history.seal', what: `History of ${of}: sealing after a clock tick (rows into analytics_sealed_v1 and the local copy)`, value: `${fmt(hs.sealed.sealSeconds, 1)} s`, num: hs.sealed.sealSeconds });
  rows.push({ id: 'cluster.history.freshNode', what: `History of ${of}: a node with an empty data directory, until it answers the whole range as the first (mirror + snapshot restore)`, value: `${fmt(hs.freshNode.seconds, 1)} s (${fmt(hs.freshNode.sealedDays)} sealed days mirrored, ${fmt(hs.freshNode.liveDays)} live)`, num: hs.freshNode.seconds });
  return rows;
}

function ratioOfRounds(a: number[], b: number[]): number {
  return median(a.slice(0, b.length).map((x, i) => x / b[i]!));
}
