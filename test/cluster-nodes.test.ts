import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { Objm } from '@nats-io/obj';
import { connect } from '@nats-io/transport-node';
import { loadConfig } from '../src/config.ts';
import { AnalyticsClient } from '../src/grpc/client.ts';
import { startService, type RunningService } from '../src/service.ts';
import { api, createProject, type CreatedProject } from './helpers.ts';
import { comparable, clusterNodeEnv, startNatsCluster, type NatsCluster } from './nats-cluster.ts';

/**
 * Cluster mode with ANALYTICS_FOLD=all (CLUSTER.md §11 tests 2, 3, 6, 7): in-process service nodes on port 0 with
 * their own data directories over a real 3-server nats-server cluster; each test has its own stream and buckets.
 */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let cluster: NatsCluster;
const dirs: string[] = [];
const running: RunningService[] = [];
let tagN = 0;
const newTag = () => `e${process.pid}_${tagN++}`;

interface Node {
  id: string;
  svc: RunningService;
  url: string;
  logs: string[];
  dataDir: string;
}

async function startNode(id: string, tag: string, adminKey: string, opts: { now?: () => number; dataDir?: string; fold?: 'all' | 'owner' } = {}): Promise<Node> {
  const dataDir = opts.dataDir ?? mkdtempSync(path.join(tmpdir(), `cluster-${id}-`));
  dirs.push(dataDir);
  const logs: string[] = [];
  const config = loadConfig({ ...clusterNodeEnv({ id, urls: cluster.urls, dataDir, adminKey, fold: opts.fold ?? 'all' }), ANALYTICS_QUIET: '1' });
  const svc = await startService(config, { log: (l) => logs.push(l), cluster: { tag }, ...(opts.now ? { now: opts.now } : {}) });
  running.push(svc);
  return { id, svc, url: svc.url, logs, dataDir };
}

async function startSingle(adminKey: string): Promise<RunningService> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'single-'));
  dirs.push(dataDir);
  const svc = await startService(
    loadConfig({ PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: dataDir, ANALYTICS_ADMIN_KEY: adminKey, ANALYTICS_QUIET: '1' }),
  );
  running.push(svc);
  return svc;
}

async function stopNode(n: { svc: RunningService } | RunningService): Promise<void> {
  const svc = 'svc' in n ? n.svc : n;
  await svc.stop();
  running.splice(running.indexOf(svc), 1);
}

const adminKey = () => `ak_${randomBytes(24).toString('base64url')}`;

async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, ms: number): Promise<{ value: T; ms: number }> {
  const started = Date.now();
  for (;;) {
    const v = await fn();
    if (v !== undefined) return { value: v, ms: Date.now() - started };
    if (Date.now() - started > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(20);
  }
}

/** A key works on a node once it stops answering 401 (the node's catalog mirror has it). */
async function keyWorks(url: string, key: string, ms = 5_000): Promise<number> {
  return (await waitFor(`key on ${url}`, async () => ((await api(url, '/projects', { key })).status === 401 ? undefined : true), ms)).ms;
}

function metricsOf(url: string, key: string, q: string) {
  return api(url, `/metrics?${q}`, { key });
}

before(async () => {
  cluster = await startNatsCluster();
});

after(async () => {
  for (const s of [...running].reverse()) await s.stop().catch(() => {});
  await cluster?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('cluster mode', () => {
  for (const fold of ['all', 'owner'] as const) test(`two cluster nodes answer like one node (ANALYTICS_FOLD=${fold}): a project made on A, events through B over HTTP and gRPC`, async () => {
    const tag = newTag();
    const key = adminKey();
    const [a, b] = [await startNode('a', tag, key, { fold }), await startNode('b', tag, key, { fold })];
    const single = await startSingle(key);
    const pa = await createProject(a.url, key, { name: 'site' });
    const ps = await createProject(single.url, key, { name: 'site' });
    await keyWorks(b.url, pa.keys.secret);

    const now = Date.now();
    const day = new Date(now).toISOString().slice(0, 10);
    const events = Array.from({ length: 40 }, (_, i) => ({
      event: i % 7 === 3 ? 'signup' : 'page_view',
      url: `https://site.example/${['', 'pricing', 'docs', 'blog/a'][i % 4]}`,
      ...(i % 3 === 0 ? { referrer: 'https://news.example/x' } : {}),
      sessionId: `s${i % 9}`,
      timestamp: new Date(now - (40 - i) * 1000).toISOString(),
      eventId: `ev-${i}`,
    }));
    const viaHttp = events.slice(0, 25);
    const viaGrpc = events.slice(25);
    for (const [url, k] of [[b.url, pa.keys.secret], [single.url, ps.keys.secret]] as const) {
      const r = await api(url, '/analytics', { key: k, body: { events: viaHttp } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    for (const [addr, k] of [[b.svc.grpcAddress, pa.keys.secret], [single.grpcAddress, ps.keys.secret]] as const) {
      const client = new AnalyticsClient(addr, { key: k });
      try {
        const res = await client.ingest({
          events: viaGrpc.map((e) => ({
            event: e.event,
            sessionId: e.sessionId,
            eventId: e.eventId,
            url: e.url,
            ...(e.referrer ? { referrer: e.referrer } : {}),
            timestamp: { case: 'timestampIso' as const, value: e.timestamp },
          })),
        });
        assert.equal(res.accepted, viaGrpc.length);
      } finally {
        client.close();
      }
    }
    // A repeat through the other node is acknowledged and not counted again.
    assert.equal((await api(a.url, '/analytics', { key: pa.keys.secret, body: { events: viaHttp.slice(0, 5) } })).status, 200);
    assert.equal((await api(single.url, '/analytics', { key: ps.keys.secret, body: { events: viaHttp.slice(0, 5) } })).status, 200);

    const q = `from=${day}&to=${day}`;
    const want = await metricsOf(single.url, ps.keys.secret, q);
    // Ownership mode: until the nodes have settled and claimed (SETTLE_MS), nobody serves the partition: 503, retried.
    // The partition may still move once after that (a node takes over when its standby fold is ready): each read
    // is retried through a 503 the same way.
    const read = async (n: { id: string; url: string }) => (await waitFor(`a read on ${n.id}`, async () => {
      const r = await metricsOf(n.url, pa.keys.secret, q);
      return r.status === 200 ? r : undefined;
    }, 15_000)).value;
    for (const n of [a, b]) await read(n);
    assert.equal(want.status, 200);
    assert.equal(want.body.pageviews + (want.body.events?.signup ?? 0) > 0, true);
    for (const n of [a, b]) {
      const got = await read(n);
      assert.deepEqual(comparable(got.body), comparable(want.body), `node ${n.id} answers as the single node does`);
    }
    // A partition moving between the nodes answers 503 with Retry-After meanwhile; a client retries, and so does this.
    const rt = (await waitFor('a realtime read on A', async () => {
      const r = await api(a.url, '/metrics/realtime', { key: pa.keys.secret });
      return r.status === 200 ? r : undefined;
    }, 15_000)).value;
    const rtSingle = await api(single.url, '/metrics/realtime', { key: ps.keys.secret });
    assert.equal(rtSingle.status, 200);
    assert.equal(rt.body.pageviews, rtSingle.body.pageviews);
    await Promise.all([stopNode(a), stopNode(b), stopNode(single)]);
  });

  test('an eventId counts once across nodes: concurrent, 1 h apart past the JetStream window, and again after 48 h', async () => {
    const tag = newTag();
    const key = adminKey();
    let clock = Date.now();
    const now = () => clock;
    const [a, b] = [await startNode('a', tag, key, { now }), await startNode('b', tag, key, { now })];
    // A 1 s duplicate window: the fold, not JetStream's msg-id, must keep the repeats out.
    const nc = await connect({ servers: cluster.urlList });
    try {
      const jsm = await jetstreamManager(nc);
      const stream = `ANALYTICS_EVENTS_v1_${tag}`;
      const info = await jsm.streams.info(stream);
      await jsm.streams.update(stream, { ...info.config, duplicate_window: 1e9 });
    } finally {
      await nc.close();
    }
    const p = await createProject(a.url, key);
    await keyWorks(b.url, p.keys.secret);
    const pv = (id: string) => ({ events: [{ event: 'page_view', url: '/once', sessionId: 'v1', eventId: id }] });
    const send = async (n: Node, id: string) => {
      const r = await api(n.url, '/analytics', { key: p.keys.secret, body: pv(id) });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    };
    const pageviews = async (n: Node) => {
      const from = new Date(clock - 3 * 86_400_000).toISOString().slice(0, 10);
      const to = new Date(clock).toISOString().slice(0, 10);
      const r = await metricsOf(n.url, p.keys.secret, `from=${from}&to=${to}`);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r.body.pageviews as number;
    };

    await Promise.all([send(a, 'x'), send(b, 'x'), send(a, 'x'), send(b, 'x')]);
    assert.equal(await pageviews(a), 1);
    assert.equal(await pageviews(b), 1);

    await sleep(1_200); // past the stream's duplicate window
    clock += 3_600_000;
    await Promise.all([send(b, 'x'), send(a, 'x')]);
    assert.equal(await pageviews(a), 1, 'an hour later, through either node: still once');
    assert.equal(await pageviews(b), 1);

    clock += 48 * 3_600_000;
    await send(b, 'x');
    await send(a, 'x');
    assert.equal(await pageviews(a), 2, 'after 48 h the id counts again, once');
    assert.equal(await pageviews(b), 2);
    await Promise.all([stopNode(a), stopNode(b)]);
  });

  test('a snapshot in the object store plus the tail equals a full fold, and a damaged snapshot is skipped', async () => {
    const tag = newTag();
    const key = adminKey();
    const a = await startNode('a', tag, key);
    const p = await createProject(a.url, key);
    const batch = (from: number, n: number) => ({
      events: Array.from({ length: n }, (_, i) => ({ event: 'page_view', url: `/p${(from + i) % 5}`, sessionId: `s${(from + i) % 11}`, eventId: `e${from + i}` })),
    });
    const today = new Date().toISOString().slice(0, 10);
    assert.equal((await api(a.url, '/analytics', { key: p.keys.secret, body: batch(0, 120) })).status, 200);
    await a.svc.engine.snapshotNow();
    assert.equal((await api(a.url, '/analytics', { key: p.keys.secret, body: batch(100, 80) })).status, 200); // 20 repeats
    const want = await metricsOf(a.url, p.keys.secret, `date=${today}`);
    assert.equal(want.body.pageviews, 180);

    // A fresh node (empty data directory) restores from the object store and folds the tail.
    const c = await startNode('c', tag, key);
    const got = await metricsOf(c.url, p.keys.secret, `date=${today}`);
    assert.deepEqual(got.body, want.body);
    assert.ok(c.logs.some((l) => /restored snapshot/.test(l)), `node c restored a snapshot: ${c.logs.join(' | ')}`);
    await stopNode(c);

    // Damage the newest snapshot object: the next fresh node skips it and still answers the same.
    const nc = await connect({ servers: cluster.urlList });
    try {
      const os = await new Objm(nc).open(`analytics_snapshots_v1_${tag}`);
      const newest = (await os.list()).filter((o) => !o.deleted).sort((x, y) => (x.name < y.name ? 1 : -1))[0]!;
      const bytes = await os.getBlob(newest.name);
      assert.ok(bytes);
      bytes[Math.floor(bytes.length / 2)]! ^= 0xff;
      await os.putBlob({ name: newest.name }, bytes);
    } finally {
      await nc.close();
    }
    const d = await startNode('d', tag, key);
    const again = await metricsOf(d.url, p.keys.secret, `date=${today}`);
    assert.deepEqual(again.body, want.body);
    assert.ok(d.logs.some((l) => /skipping snapshot/.test(l)), `node d skipped the damaged snapshot: ${d.logs.join(' | ')}`);
    await Promise.all([stopNode(a), stopNode(d)]);
  });

  test('catalog, salts and quota work across nodes: a key made on A works on B within 1 s, one session on both, quota within its bound', async () => {
    const tag = newTag();
    const key = adminKey();
    const [a, b] = [await startNode('a', tag, key), await startNode('b', tag, key)];
    const p: CreatedProject = await createProject(a.url, key, { monthly_quota: 100 });
    const ms = await keyWorks(b.url, p.keys.secret, 1_000);
    assert.ok(ms <= 1_000, `a key made on A works on B after ${ms} ms`);

    // No sessionId: the anonymous id comes from the day's shared salt, the project, IP and User-Agent.
    const anon = { events: [{ event: 'page_view', url: '/landing' }] };
    const headers = { 'user-agent': 'Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0' };
    for (const n of [a, b, a, b]) assert.equal((await api(n.url, '/analytics', { key: p.keys.secret, body: anon, headers })).status, 200);
    const today = new Date().toISOString().slice(0, 10);
    const m = await metricsOf(b.url, p.keys.secret, `date=${today}`);
    assert.equal(m.body.pageviews, 4);
    assert.equal(m.body.sessions, 1, 'the same visitor through A and B is one session');

    // Quota 100 (4 used): batches of 8 through both nodes at once until both refuse.
    let acked = 4;
    let refused = 0;
    for (let round = 0; round < 12; round++) {
      const results = await Promise.all(
        [a, b].map((n, i) =>
          api(n.url, '/analytics', {
            key: p.keys.secret,
            body: { events: Array.from({ length: 8 }, (_, j) => ({ event: 'page_view', url: '/q', sessionId: `q${round}-${i}-${j}` })) },
          }),
        ),
      );
      for (const r of results) {
        if (r.status === 200) acked += 8;
        else {
          assert.equal(r.status, 429);
          assert.equal(r.body.error.code, 'quota_exceeded');
          refused++;
        }
      }
    }
    assert.ok(refused > 0, 'the quota refuses');
    const folded = (await metricsOf(a.url, p.keys.secret, `date=${today}`)).body.pageviews as number;
    assert.equal(folded, acked, 'everything acknowledged is counted');
    // Bound (CLUSTER.md §8): each node knows the folded count plus its own acks, so the overshoot is at most what the
    // other node acknowledged within one fold lag: here one concurrent batch.
    assert.ok(acked <= 100 + 8, `acked ${acked} within quota 100 plus one concurrent batch of the other node`);
    await Promise.all([stopNode(a), stopNode(b)]);
  });
});
