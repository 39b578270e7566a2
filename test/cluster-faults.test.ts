// long because the two fault scenarios share one harness (a 3-server NATS cluster, two service nodes, publishers that
// record every acknowledgement, and the checks that nothing was lost or counted twice), which is most of the file.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { startService, type RunningService } from '../src/service.ts';
import { partitionOf, resourceNames } from '../src/store/nats/resources.ts';
import { api, createProject, type CreatedProject } from './helpers.ts';
import { clusterNodeEnv, startNatsCluster, TEST_PARTITIONS, type NatsCluster } from './nats-cluster.ts';
import { nodeArgsFor } from '../bin/dist.mjs';

/**
 * Cluster mode under faults (CLUSTER.md §10, §11 test 4; issue 15's goals): kill -9 the stream leader, or a service
 * node, while clients publish; afterwards every acknowledged event is counted exactly once on every node. One serial
 * file: its tests kill servers of the shared cluster.
 *
 * Clients behave as the contract asks of them: every event has an eventId, and a request that got no answer (a reset
 * connection, a 5xx) is sent again with the same events, to the other node. So each batch is sent until it is
 * acknowledged, and the fold's eventId rule must keep the copies out: each batch has its own page (`/b<i>`), whose
 * count must be exactly the batch's size.
 */

/** Events per request: a batch is one stream message. */
const BATCH = 20;
/** One page per batch, and a day's breakdown keeps 1,000 keys (MAX_BREAKDOWN_KEYS): a publisher sends at most this many. */
const MAX_BATCHES_PER_PUBLISHER = 990;
/** Streams are small in tests (each reserves max_bytes of the servers' file store), but 16 publishers fill 16 MiB. */
const TEST_STREAM_BYTES = 64 * 1024 * 1024;
/** Limits far above the load: the test is about faults, not about 429s. */
const NO_LIMITS = { ANALYTICS_RATE_PER_KEY: '1000000', ANALYTICS_BURST_PER_KEY: '1000000', ANALYTICS_RATE_PER_IP: '1000000', ANALYTICS_BURST_PER_IP: '1000000' };
/** A client gives up on one request after this long (the service's publish deadline is 30 s) and sends it again. */
const REQUEST_TIMEOUT_MS = 35_000;
/** A batch not acknowledged within this long after the load stopped fails the test (generous: the machine is shared). */
const DRAIN_DEADLINE_MS = 60_000;
/** Issue 15's goal: reads answer again within this long after a node dies. */
const READ_RECOVERY_GOAL_MS = 10_000;
/** Test (a) reads a few projects through both nodes this often during the load (the read gap after the kill). */
const READ_POLL_MS = 500;
/**
 * Test (a) fails when a polled read goes unanswered this long after the stream-leader kill: the goal (10 s) plus room
 * for a slow leader election on a shared machine (reads come back ~0.5 s after the event stream and the owners
 * bucket have leaders again; elections took 4.3–6.8 s in the runs of issue 15t, up to 19.3 s once in docs/CLUSTER.md).
 */
const READ_GAP_LIMIT_MS = 15_000;
/** Test (a) polls reads until this long past the limit after the kill (the load may stop earlier: reads go on). */
const READ_POLL_PAST_GOAL_MS = 2_000;
/** One polled read gives up after this long (counted as unanswered). */
const READ_POLL_TIMEOUT_MS = 5_000;
/** A read answered 503 (a partition between owners, or still folding) is asked again for this long. */
const READ_RETRY_MS = 20_000;
/** Per-server /jsz last_seq must agree within this long once the killed server is back. */
const HEAL_DEADLINE_MS = 30_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const adminKey = () => `ak_${randomBytes(24).toString('base64url')}`;
let tagN = 0;
const newTag = () => `f${process.pid}_${tagN++}`;

/** Each test faults its own 3-server cluster: one test's kill cannot disturb the next one's start. */
let cluster: NatsCluster;
const dirs: string[] = [];
const running: RunningService[] = [];
const children: ChildProcess[] = [];

beforeEach(async () => {
  cluster = await startNatsCluster();
});

afterEach(async () => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const s of running.splice(0).reverse()) await s.stop().catch(() => {});
  await cluster?.stop();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(prefix: string): string {
  const d = mkdtempSync(path.join(tmpdir(), prefix));
  dirs.push(d);
  return d;
}

function clusterEnv(id: string, key: string, dataDir: string): Record<string, string> {
  return { ...clusterNodeEnv({ id, urls: cluster.urls, dataDir, adminKey: key, streamBytes: TEST_STREAM_BYTES }), ...NO_LIMITS };
}

function printNodeLogs(): void {
  for (const [id, lines] of nodeLogs) process.stderr.write(`--- node ${id} log (${lines.length} lines)\n${lines.slice(-400).join('\n')}\n`);
}

/** Each in-process node's log lines (time-stamped), printed when a test fails. */
const nodeLogs = new Map<string, string[]>();

async function startInProcessNode(id: string, tag: string, key: string): Promise<{ svc: RunningService; url: string }> {
  const config = loadConfig({ ...clusterEnv(id, key, tempDir(`faults-${id}-`)), ANALYTICS_QUIET: '1' });
  const lines: string[] = [];
  nodeLogs.set(id, lines);
  const svc = await startService(config, { cluster: { tag }, log: (line) => void lines.push(`${new Date().toISOString()} ${line}`) });
  running.push(svc);
  return { svc, url: svc.url };
}

/** A service node as its own process (`node --import tsx src/main.ts`), so it can be SIGKILLed. */
interface ChildNode {
  proc: ChildProcess;
  url: string;
  output: () => string;
}

function startChildNode(env: Record<string, string>): Promise<ChildNode> {
  const proc = spawn(process.execPath, nodeArgsFor('main.ts'), {
    env: { ...process.env, ...env, ANALYTICS_QUIET: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(proc);
  let out = '';
  proc.stderr!.on('data', (c: Buffer) => (out = (out + c.toString()).slice(-20_000)));
  return new Promise((resolve, reject) => {
    proc.stdout!.on('data', (c: Buffer) => {
      out = (out + c.toString()).slice(-20_000);
      const m = /HTTP (http:\/\/\S+)\s+gRPC/.exec(out);
      if (m) resolve({ proc, url: m[1]!, output: () => out });
    });
    proc.once('exit', (code, signal) => reject(new Error(`service node exited early (${code ?? signal}): ${out}`)));
  });
}

async function killChild(c: ChildNode): Promise<void> {
  if (c.proc.exitCode !== null || c.proc.signalCode !== null) return;
  const gone = new Promise<void>((r) => c.proc.once('exit', () => r()));
  c.proc.kill('SIGKILL');
  await gone;
}

async function stopChild(c: ChildNode): Promise<void> {
  if (c.proc.exitCode !== null || c.proc.signalCode !== null) return;
  const gone = new Promise<void>((r) => c.proc.once('exit', () => r()));
  c.proc.kill('SIGTERM');
  const t = setTimeout(() => c.proc.kill('SIGKILL'), 15_000);
  await gone;
  clearTimeout(t);
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, ms: number): Promise<{ value: T; ms: number }> {
  const started = Date.now();
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return { value: v, ms: Date.now() - started };
    if (Date.now() - started > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(50);
  }
}

async function keyWorks(url: string, key: string): Promise<void> {
  await waitFor(`key on ${url}`, async () => ((await api(url, '/projects', { key })).status === 401 ? undefined : true), 10_000);
}

// ------------------------------------------------------------------------------------------- load with retries

/** One project per publisher: its batches are pages /b0, /b1, ... of that project alone. */
interface Publisher {
  project: CreatedProject;
  /** index of the publisher: the first node it tries */
  k: number;
}

interface LoadStats {
  /** per project id: batches acknowledged (batch i has page /b<i>) */
  ackedBatches: Map<string, number>;
  /** requests that got no answer or a non-200 and were sent again */
  retries: number;
  statuses: Map<string, number>;
  /** longest time one batch took from first send to its acknowledgement */
  maxAckMs: number;
  /** acknowledgement times (ms since load start), for the longest gap */
  ackTimes: number[];
}

async function makePublishers(createOn: string, alsoOn: string, key: string, n: number): Promise<Publisher[]> {
  const projects = await Promise.all(Array.from({ length: n }, (_, k) => createProject(createOn, key, { name: `site${k}` })));
  for (const p of projects) await keyWorks(alsoOn, p.keys.secret);
  return projects.map((project, k) => ({ project, k }));
}

/**
 * Publishers each sending batches to one project, one at a time; a batch is sent until acknowledged (each retry to
 * the next node in `urls()`), new batches only until `stopAt()`. Resolves when every started batch is acknowledged.
 */
async function runLoad(publishers: Publisher[], urls: () => string[], stopped: () => boolean, t0: number): Promise<LoadStats> {
  const stats: LoadStats = { ackedBatches: new Map(), retries: 0, statuses: new Map(), maxAckMs: 0, ackTimes: [] };
  const count = (s: string) => stats.statuses.set(s, (stats.statuses.get(s) ?? 0) + 1);
  let drainDeadline = Infinity;
  await Promise.all(
    publishers.map(async ({ project, k }) => {
      let node = k;
      for (let i = 0; i < MAX_BATCHES_PER_PUBLISHER && !stopped(); i++) {
        const body = JSON.stringify({
          events: Array.from({ length: BATCH }, (_, j) => ({ event: 'page_view', url: `/b${i}`, sessionId: `s${k}-${i % 13}`, eventId: `p${k}-${i}-${j}` })),
        });
        const first = Date.now();
        for (;;) {
          const list = urls();
          const url = list[node % list.length]!;
          let status: string;
          try {
            const res = await fetch(`${url}/analytics`, {
              method: 'POST',
              headers: { authorization: `Bearer ${project.keys.secret}`, 'content-type': 'application/json' },
              body,
              signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
            });
            await res.arrayBuffer();
            status = String(res.status);
          } catch (err) {
            status = err instanceof Error ? err.name : 'error';
          }
          count(status);
          if (status === '200') break;
          if (stopped() && drainDeadline === Infinity) drainDeadline = Date.now() + DRAIN_DEADLINE_MS;
          if (Date.now() > drainDeadline) throw new Error(`batch ${i} of publisher ${k} not acknowledged ${DRAIN_DEADLINE_MS} ms after the load stopped (last: ${status})`);
          stats.retries++;
          node++; // the next node: a client retries an unanswered request elsewhere
          await sleep(100);
        }
        stats.maxAckMs = Math.max(stats.maxAckMs, Date.now() - first);
        stats.ackTimes.push(Date.now() - t0);
        stats.ackedBatches.set(project.project.id, i + 1);
      }
    }),
  );
  return stats;
}

/**
 * Reads each project's /metrics through every node, one round every READ_POLL_MS, until `stopped()`: for each
 * (node, project) the times (ms since `t0`) of its answered (200) reads.
 */
async function pollReads(urls: string[], publishers: Publisher[], stopped: () => boolean, t0: number): Promise<number[][]> {
  const today = new Date().toISOString().slice(0, 10);
  const pairs = urls.flatMap((url) => publishers.map(({ project }) => ({ url, key: project.keys.secret, times: [] as number[] })));
  while (!stopped()) {
    const round = Date.now();
    await Promise.all(
      pairs.map(async (p) => {
        const r = await fetch(`${p.url}/metrics?from=${today}&to=${today}`, { headers: { authorization: `Bearer ${p.key}` }, signal: AbortSignal.timeout(READ_POLL_TIMEOUT_MS) }).catch(() => undefined);
        await r?.arrayBuffer().catch(() => {});
        if (r?.status === 200) p.times.push(Date.now() - t0);
      }),
    );
    await sleep(Math.max(0, READ_POLL_MS - (Date.now() - round)));
  }
  return pairs.map((p) => p.times);
}

/** The longest stretch without any acknowledgement between `from` and `to` (ms since load start). */
function longestGap(times: number[], from: number, to: number): number {
  const s = [from, ...times.filter((t) => t > from && t < to).sort((a, b) => a - b), to];
  let gap = 0;
  for (let i = 1; i < s.length; i++) gap = Math.max(gap, s[i]! - s[i - 1]!);
  return gap;
}

/** Every node's /metrics for every project: pageviews = acknowledged events, each batch's page counted exactly once. */
async function assertExactlyOnce(urls: string[], publishers: Publisher[], stats: LoadStats): Promise<number> {
  const today = new Date().toISOString().slice(0, 10);
  const yesterday = new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
  let total = 0;
  for (const { project } of publishers) {
    const batches = stats.ackedBatches.get(project.project.id) ?? 0;
    total += batches * BATCH;
    const answers: unknown[] = [];
    for (const url of urls) {
      let r = await api(url, `/metrics?from=${yesterday}&to=${today}`, { key: project.keys.secret });
      for (const started = Date.now(); r.status === 503 && Date.now() - started < READ_RETRY_MS; ) {
        await sleep(100);
        r = await api(url, `/metrics?from=${yesterday}&to=${today}`, { key: project.keys.secret });
      }
      if (r.status !== 200) printNodeLogs();
      assert.equal(r.status, 200, `${url}, project ${project.project.id}, still ${r.status} after ${READ_RETRY_MS} ms of retries: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.pageviews, batches * BATCH, `${url}: project ${project.project.id}: counted = acknowledged`);
      const pages = r.body.pages as Record<string, number>;
      const wrong = Object.entries(pages).filter(([p, n]) => n !== BATCH || !/^\/b\d+$/.test(p) || Number(p.slice(2)) >= batches);
      assert.deepEqual(wrong, [], `${url}: every batch's page counted exactly ${BATCH} times`);
      assert.equal(Object.keys(pages).length, batches, `${url}: no batch missing`);
      const { recentEvents: _r, ...rest } = r.body;
      answers.push(rest);
    }
    for (const a of answers.slice(1)) assert.deepEqual(a, answers[0], 'every node gives the same answer');
  }
  return total;
}

function summary(stats: LoadStats): string {
  return `statuses ${JSON.stringify(Object.fromEntries(stats.statuses))}, retries ${stats.retries}, slowest ack ${stats.maxAckMs} ms`;
}

async function lastSeqsAgree(stream: string): Promise<number[] | undefined> {
  const seqs = await cluster.streamLastSeqs(stream);
  if (seqs.some((s) => s === undefined) || new Set(seqs).size !== 1) return undefined;
  return seqs as number[];
}

// ------------------------------------------------------------------------------------------------------- tests

describe('cluster mode under faults', { concurrency: false }, () => {
  test('killing the stream leader under 16 publishers loses nothing and folds nothing twice', async (t) => {
    const tag = newTag();
    const key = adminKey();
    const stream = resourceNames(tag).stream;
    const [a, b] = [await startInProcessNode('a', tag, key), await startInProcessNode('b', tag, key)];
    const publishers = await makePublishers(a.url, b.url, key, 16);

    const t0 = Date.now();
    let stop = false;
    const load = runLoad(publishers, () => [a.url, b.url], () => stop, t0);
    // one project per partition (every partition's reads are watched), through both nodes
    const perPartition = [...new Map(publishers.map((p) => [partitionOf(p.project.project.id, TEST_PARTITIONS), p])).values()];
    let readsUntil = Infinity; // set at the kill: polled past the goal, so a read gap over the goal can show
    const reads = pollReads([a.url, b.url], perPartition, () => Date.now() - t0 >= readsUntil, t0);
    await sleep(4_000);
    const leader = await waitFor('a stream leader', () => cluster.streamLeader(stream), 10_000);
    const victim = cluster.servers.findIndex((s) => s.name === leader.value);
    assert.ok(victim >= 0, `leader ${leader.value} is one of ours`);
    const killedAt = Date.now() - t0;
    readsUntil = killedAt + READ_GAP_LIMIT_MS + READ_POLL_PAST_GOAL_MS;
    await cluster.kill(victim, 'SIGKILL');
    await sleep(Math.max(0, 9_000 - (Date.now() - t0)));
    const restartedAt = Date.now() - t0;
    await cluster.start(victim);
    await sleep(Math.max(0, 14_000 - (Date.now() - t0)));
    stop = true;
    const stoppedAt = Date.now() - t0;
    const stats = await load;
    const stall = longestGap(stats.ackTimes, killedAt, stoppedAt);
    const readGap = Math.max(...(await reads).map((times) => longestGap(times, killedAt, readsUntil)));
    const healed = await waitFor('equal last_seq on all three servers', () => lastSeqsAgree(stream), HEAL_DEADLINE_MS);
    // Everything acknowledged is in the stream: its last sequence counts at least one message per acknowledged batch.
    const batches = [...stats.ackedBatches.values()].reduce((s, n) => s + n, 0);
    assert.ok(healed.value[0]! >= batches, `stream holds ${healed.value[0]} messages for ${batches} acknowledged batches`);

    // Read-your-writes: the read barrier waits for the fold to reach the stream's end.
    const events = await assertExactlyOnce([a.url, b.url], publishers, stats);
    t.diagnostic(
      `leader ${leader.value} killed at ${killedAt} ms, restarted at ${restartedAt} ms; ${events} events in ${batches} batches acknowledged and counted once on both nodes; ` +
        `longest stretch without an ack ${stall} ms, without an answered read ${readGap} ms; ${summary(stats)}; last_seq ${healed.value.join('/')} agreed ${healed.ms} ms after the load`,
    );
    assert.ok(batches > 50, `the load ran (${batches} batches)`);
    if (readGap > READ_GAP_LIMIT_MS) printNodeLogs();
    assert.ok(readGap <= READ_GAP_LIMIT_MS, `every polled read answered again within ${READ_GAP_LIMIT_MS} ms (goal ${READ_RECOVERY_GOAL_MS} ms; longest gap ${readGap} ms)`);
    await Promise.all([a.svc.stop(), b.svc.stop()]);
  });

  test('killing a service node under load loses nothing, counts nothing twice, and reads answer again through the other node within 10 s', async (t) => {
    // Child processes take the default resource names: this is the only test on this cluster using them.
    const key = adminKey();
    const dirA = tempDir('faults-child-a-');
    const [a, b] = await Promise.all([startChildNode(clusterEnv('a', key, dirA)), startChildNode(clusterEnv('b', key, tempDir('faults-child-b-')))]);
    const publishers = await makePublishers(a.url, b.url, key, 8);
    const projects = publishers.map((p) => p.project);

    let alive = [a.url, b.url];
    const t0 = Date.now();
    let stop = false;
    const load = runLoad(publishers, () => alive, () => stop, t0);

    // A reader through the surviving node, all along: per project, the longest time without a 200 after the kill is
    // the figure (node a owned some of the partitions: b answers those again once it has taken them over).
    const readTimes = new Map<string, number[]>(projects.map((p) => [p.project.id, []]));
    let readsDone = false;
    const today = new Date().toISOString().slice(0, 10);
    const reader = Promise.all(
      projects.map(async (p) => {
        while (!readsDone) {
          try {
            const r = await fetch(`${b.url}/metrics?date=${today}`, { headers: { authorization: `Bearer ${p.keys.secret}` }, signal: AbortSignal.timeout(15_000) });
            await r.arrayBuffer();
            if (r.status === 200) readTimes.get(p.project.id)!.push(Date.now() - t0);
          } catch {
            /* counted as no answer */
          }
          await sleep(100);
        }
      }),
    );

    await sleep(4_000);
    const killedAt = Date.now() - t0;
    await killChild(a);
    alive = [b.url];
    await sleep(Math.max(0, 10_000 - (Date.now() - t0)));
    stop = true;
    const stats = await load;
    // Reads until every project answered after the kill (or the goal passed), then the longest gap of any project.
    for (const started = Date.now(); Date.now() - started < READ_RECOVERY_GOAL_MS; await sleep(100)) {
      if ([...readTimes.values()].every((ts) => ts.some((x) => x > killedAt))) break;
    }
    const end = Date.now() - t0;
    readsDone = true;
    await reader;
    for (const [id, ts] of readTimes) assert.ok(ts.some((x) => x > killedAt), `reads of project ${id} through the surviving node answered after the kill`);
    const readGap = Math.max(...[...readTimes.values()].map((ts) => longestGap(ts, killedAt, end)));
    assert.ok(readGap < READ_RECOVERY_GOAL_MS, `reads through node b answered again within ${readGap} ms of node a's death (goal < ${READ_RECOVERY_GOAL_MS})`);
    const ackGap = longestGap(stats.ackTimes, killedAt, Date.now() - t0);

    // Node a comes back on its data directory: it catches up from its snapshot and the stream, then answers the same.
    const restarted = Date.now();
    const a2 = await startChildNode(clusterEnv('a', key, dirA));
    const back = Date.now() - restarted;
    const events = await assertExactlyOnce([b.url, a2.url], publishers, stats);
    const batches = [...stats.ackedBatches.values()].reduce((s, n) => s + n, 0);
    t.diagnostic(
      `node a killed at ${killedAt} ms; ${events} events in ${batches} batches acknowledged and counted once on b and on a restarted a (up in ${back} ms); ` +
        `longest stretch without a read answer from b ${readGap} ms, without an ack ${ackGap} ms; ${summary(stats)}`,
    );
    assert.ok(batches > 50, `the load ran (${batches} batches)`);
    await Promise.all([stopChild(a2), stopChild(b)]);
  });
});
