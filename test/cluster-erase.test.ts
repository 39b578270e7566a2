import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { Objm } from '@nats-io/obj';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';
import { loadConfig } from '../src/config.ts';
import type { AnalyticsState } from '../src/core/state.ts';
import type { ClusterBackend } from '../src/cluster/cluster-backend.ts';
import type { ErasureHooks } from '../src/cluster/cluster-erasure.ts';
import { hashKey } from '../src/engine/keys.ts';
import { startService, type RunningService } from '../src/service.ts';
import { api, createProject, type CreatedProject } from './helpers.ts';
import { waitForValue, clusterNodeEnv, startNatsCluster, TEST_PARTITIONS, type NatsCluster } from './nats-cluster.ts';


/**
 * Deleting a project in cluster mode erases it everywhere (src/cluster/cluster-erasure.ts): real 3-server nats-server
 * cluster, two in-process service nodes with their own data directories, each test with its own stream and buckets.
 */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let cluster: NatsCluster;
let nc: NatsConnection;
const dirs: string[] = [];
const running = new Set<RunningService>();

interface Node {
  id: string;
  svc: RunningService;
  url: string;
  backend: ClusterBackend;
  logs: string[];
  /** dies as a kill -9 would leave the cluster (ClusterBackendOptions.crashable) */
  crash: () => Promise<void>;
  /** what this node's erasure asks at its turns */
  erasureHooks: ErasureHooks;
  dataDir: string;
}

async function startNode(id: string, tag: string, adminKey: string, opts: { fold?: 'owner' | 'all'; dataDir?: string } = {}): Promise<Node> {
  const dataDir = opts.dataDir ?? mkdtempSync(path.join(tmpdir(), `erase-${id}-`));
  if (!dirs.includes(dataDir)) dirs.push(dataDir);
  const logs: string[] = [];
  const config = loadConfig({ ...clusterNodeEnv({ id, urls: cluster.urls, dataDir, adminKey, fold: opts.fold ?? 'owner' }), ANALYTICS_QUIET: '1' });
  const erasureHooks: ErasureHooks = {};
  let crash = (): Promise<void> => Promise.reject(new Error('the backend did not hand over its crash'));
  const svc = await startService(config, { log: (l) => logs.push(l), cluster: { tag, crashable: (fn) => (crash = fn), erasureHooks } });
  running.add(svc);
  const backend = (svc.engine as unknown as { backend: ClusterBackend }).backend;
  return { id, svc, url: svc.url, backend, logs, dataDir, crash: () => crash(), erasureHooks };
}

async function stop(n: Node): Promise<void> {
  await n.svc.stop();
  running.delete(n.svc);
}

/** The partition's state on a node that folds it (private: what a read would be answered from). */
function stateOf(n: Node, partition: number): AnalyticsState | undefined {
  const p = (n.backend as unknown as { parts: Array<{ active: boolean; caughtUp: boolean; fold: { state: AnalyticsState } }> }).parts[partition]!;
  return p.active && p.caughtUp ? p.fold.state : undefined;
}

/** Every stored message of the stream: [seq, headers, body]. */
async function streamMessages(tag: string): Promise<Array<{ seq: number; erase: string | undefined; body: string }>> {
  const jsm = await jetstreamManager(nc);
  const stream = `ANALYTICS_EVENTS_v1_${tag}`;
  const info = await jsm.streams.info(stream);
  const out: Array<{ seq: number; erase: string | undefined; body: string }> = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
    const m = await jsm.streams.getMessage(stream, { seq });
    if (m) out.push({ seq, erase: m.header?.get('Analytics-Erase') || undefined, body: m.string() });
  }
  return out;
}

/** Every snapshot object: name -> bytes (as latin1 text, to search for strings). */
async function snapshotObjects(tag: string): Promise<Map<string, string>> {
  const os = await new Objm(nc).open(`analytics_snapshots_v1_${tag}`);
  const out = new Map<string, string>();
  for (const o of await os.list()) {
    if (o.deleted) continue;
    const b = await os.getBlob(o.name);
    if (b) out.set(o.name, Buffer.from(b).toString('latin1'));
  }
  return out;
}

/** Files under a data directory that contain `needle`. */
function filesHolding(dir: string, needle: string): string[] {
  const hits: string[] = [];
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const f = path.join(d, name);
      if (statSync(f).isDirectory()) walk(f);
      else if (readFileSync(f).toString('latin1').includes(needle)) hits.push(f);
    }
  };
  walk(dir);
  return hits;
}

const adminKey = () => `ak_${randomBytes(24).toString('base64url')}`;

/** Two projects in one partition: the one to delete and its neighbour. */
async function twoInOnePartition(n: Node, key: string): Promise<[CreatedProject, CreatedProject, number]> {
  const byPartition = new Map<number, CreatedProject>();
  for (let i = 0; i < 4 * TEST_PARTITIONS; i++) {
    const p = await createProject(n.url, key, { monthly_quota: 1_000_000 });
    const part = n.backend.partitionOfProject(p.project.id);
    const other = byPartition.get(part);
    if (other) return [p, other, part];
    byPartition.set(part, p);
  }
  throw new Error('no two projects in one partition');
}

function batch(secret: string, from: number, n: number) {
  return { events: Array.from({ length: n }, (_, i) => ({ event: 'page_view', url: `https://site.example/${secret}/${(from + i) % 3}`, sessionId: `s${(from + i) % 4}`, eventId: `${secret}-${from + i}` })) };
}

before(async () => {
  cluster = await startNatsCluster();
  nc = await connect({ servers: cluster.urlList });
});

after(async () => {
  for (const s of running) await s.stop().catch(() => {});
  await nc?.close();
  await cluster?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('deleting a project in cluster mode', () => {
  test('deleting through the node that does not own the partition erases the project from the stream, every state, snapshot and usage entry, and it stays gone after restarts', async () => {
    const tag = `x${process.pid}_1`;
    const key = adminKey();
    const a = await startNode('a', tag, key);
    const b = await startNode('b', tag, key);
    const [victim, neighbour, part] = await twoInOnePartition(a, key);
    const secret = `erasable-${randomBytes(6).toString('hex')}`;
    // the dates the test's events lie on: from its start to now (it may run over midnight)
    const firstDay = new Date().toISOString().slice(0, 10);
    const days = () => `from=${firstDay}&to=${new Date().toISOString().slice(0, 10)}`;
    // Ownership settles (b joins, then takes its share once ready): the partition's owner unchanged for 3 s.
    let seen: { n: Node; since: number } | undefined;
    const owner = await waitForValue(
      'a settled owner of the partition',
      () => {
        const n = [a, b].find((x) => x.backend.serving().includes(part));
        if (!n || n !== seen?.n) seen = n && { n, since: Date.now() };
        return seen && Date.now() - seen.since >= 3_000 ? seen.n : undefined;
      },
      20_000,
    );
    const other = owner === a ? b : a;

    for (let i = 0; i < 3; i++) {
      assert.equal((await api(other.url, '/analytics', { key: victim.keys.secret, body: batch(secret, i * 10, 10) })).status, 200);
      assert.equal((await api(owner.url, '/analytics', { key: neighbour.keys.secret, body: batch('keep', i * 10, 10) })).status, 200);
    }
    const read = (n: Node, p: CreatedProject) => api(n.url, `/metrics?${days()}`, { key: p.keys.secret });
    assert.equal((await read(other, victim)).body.pageviews, 30);
    await owner.backend.snapshotNow(); // a snapshot object holding the victim, then a tail after it
    assert.equal((await api(owner.url, '/analytics', { key: victim.keys.secret, body: batch(secret, 30, 5) })).status, 200);
    assert.equal((await api(other.url, '/analytics', { key: neighbour.keys.secret, body: batch('keep', 30, 5) })).status, 200);
    const before = (await read(a, neighbour)).body;
    assert.equal(before.pageviews, 35);
    assert.deepEqual((await read(b, neighbour)).body, before);

    // Positive controls: the data is where the erasure must remove it from.
    const usageKv = await new Kvm(nc).open(`analytics_usage_v1_${tag}`);
    await waitForValue('the victim usage entry', async () => ((await usageKv.get(`usage.${victim.project.id}.${firstDay.slice(0, 7)}`))?.operation === 'PUT' ? true : undefined), 5_000);
    assert.ok((await streamMessages(tag)).some((m) => m.body.includes(secret)));
    assert.ok([...(await snapshotObjects(tag)).values()].some((s) => s.includes(secret)), 'a snapshot object holds the victim before');
    assert.ok(filesHolding(owner.dataDir, secret).length > 0, "the owner's local snapshot copy holds the victim before");
    const record = owner.backend.catalog.project(victim.project.id)!;

    const started = Date.now();
    const del = await api(other.url, `/projects/${victim.project.id}`, { method: 'DELETE', key });
    assert.equal(del.status, 200, JSON.stringify(del.body));
    const deleteMs = Date.now() - started;
    assert.ok(other.logs.some((l) => l.includes(`project ${victim.project.id} erased in`)), other.logs.join('\n'));

    for (const n of [a, b]) {
      assert.equal((await api(n.url, `/metrics?projectId=${victim.project.id}&${days()}`, { key })).status, 404);
      assert.equal((await read(n, victim)).status, 401);
      assert.deepEqual((await read(n, neighbour)).body, before, `the neighbour is untouched on ${n.id}`);
    }
    const st = await waitForValue('the owner folding the partition', () => stateOf(owner, part), 5_000);
    assert.equal(st.projects.has(victim.project.id), false, 'the owner dropped its state');
    assert.equal(st.projects.has(neighbour.project.id), true);

    const msgs = await streamMessages(tag);
    assert.deepEqual(
      msgs.filter((m) => m.body.includes(secret) || m.body.includes(victim.project.id)).map((m) => m.seq),
      [],
      'no stream message carries its records',
    );
    assert.ok(msgs.some((m) => m.erase === victim.project.id), 'the erase marker is in the stream');
    assert.ok(msgs.some((m) => m.body.includes('keep')), "the neighbour's messages stay");
    const objects = await waitForValue(
      'a fresh snapshot of the partition without the victim',
      async () => {
        const o = await snapshotObjects(tag);
        return [...o.keys()].some((k) => k.startsWith(`p${String(part).padStart(2, '0')}/`)) ? o : undefined;
      },
      10_000,
    );
    for (const [name, body] of objects) {
      assert.ok(!body.includes(secret) && !body.includes(victim.project.id), `snapshot object ${name} holds no trace of it`);
    }
    assert.ok([...objects.values()].some((s) => s.includes('keep')), "the fresh snapshot holds the neighbour");
    for (const n of [a, b]) assert.deepEqual(await waitForValue(`${n.id}'s local copies`, () => (filesHolding(n.dataDir, secret).length === 0 ? [] : undefined), 5_000), []);
    assert.notEqual((await usageKv.get(`usage.${victim.project.id}.${firstDay.slice(0, 7)}`))?.operation, 'PUT', 'its usage entry is gone');
    const catalogKv = await new Kvm(nc).open(`analytics_catalog_v1_${tag}`);
    assert.notEqual((await catalogKv.get(`erase.${victim.project.id}`))?.operation, 'PUT', 'no pending erasure is left');

    // Restarts: the partition moves to the other node and back; nothing of the victim comes back.
    await stop(owner);
    const st2 = await waitForValue('the survivor folding the partition', () => (other.backend.serving().includes(part) ? stateOf(other, part) : undefined), 20_000);
    assert.equal(st2.projects.has(victim.project.id), false);
    assert.deepEqual((await read(other, neighbour)).body, before);
    const back = await startNode(owner.id, tag, key, { dataDir: owner.dataDir });
    await stop(other);
    const st3 = await waitForValue('the restarted node folding the partition', () => (back.backend.serving().includes(part) ? stateOf(back, part) : undefined), 20_000);
    assert.equal(st3.projects.has(victim.project.id), false);
    assert.deepEqual((await read(back, neighbour)).body, before);
    assert.equal((await api(back.url, `/metrics?projectId=${victim.project.id}&${days()}`, { key })).status, 404);

    // The same id created again (as a restore would) starts empty.
    const k2 = `sk_${randomBytes(24).toString('base64url')}`;
    await back.backend.catalog.putProject(record, [[hashKey(k2), { kind: 'secret', projectId: record.id, ownerId: record.ownerId, createdAt: Date.now(), id: 'key_again' }]]);
    assert.equal((await api(back.url, '/analytics', { key: k2, body: batch('fresh', 0, 2) })).status, 200);
    const again = (await api(back.url, `/metrics?${days()}`, { key: k2 })).body;
    assert.equal(again.pageviews, 2, 'the recreated project counts only its new events');
    console.log(`# erasure answered in ${deleteMs} ms (${msgs.length} messages left in the stream)`);
    await stop(back);
  });

  test('a batch of the project stored after its erase marker gets a marker after it and is erased too', async () => {
    const tag = `x${process.pid}_late`;
    const key = adminKey();
    const a = await startNode('a', tag, key, { fold: 'all' });
    const p = await createProject(a.url, key);
    const part = a.backend.partitionOfProject(p.project.id);
    assert.equal((await api(a.url, '/analytics', { key: p.keys.secret, body: batch('early', 0, 5) })).status, 200);
    assert.equal((await api(a.url, `/projects/${p.project.id}`, { method: 'DELETE', key })).status, 200);
    // DELETE answers before the erasure ends: one still scanning would see the late batch below and mark it itself
    // (a third marker, under its own token)
    await waitForValue('the erasure finished', () => (a.logs.some((l) => l.includes(`project ${p.project.id} erased in`)) ? true : undefined), 20_000);
    const marker = (await streamMessages(tag)).find((m) => m.erase === p.project.id)!;

    // As if a request admitted just before the delete was stored after the marker, and its node died before erasing
    // it again: the batch in the stream, a pending record whose marker is the first one.
    const late = `late-${randomBytes(6).toString('hex')}`;
    const rec = { t: 'e', p: p.project.id, ts: Date.now(), rt: Date.now(), day: new Date().toISOString().slice(0, 10), event: 'page_view', url: `https://site.example/${late}`, path: `/${late}`, referrer: '', source: 'Direct', sessionId: 's1', user: 's:s1', country: 'DE', device: 'desktop', params: {} };
    const h = headers();
    h.set('Analytics-Format', '1');
    await jetstream(nc).publish(`analytics.v1_${tag}.events.${part}`, JSON.stringify([rec]), { headers: h, msgID: `r:${late}` });
    await waitForValue('the late batch folded', () => (stateOf(a, part)?.projects.has(p.project.id) ? true : undefined), 5_000);
    const catalogKv = await new Kvm(nc).open(`analytics_catalog_v1_${tag}`);
    await catalogKv.put(`erase.${p.project.id}`, JSON.stringify({ projectId: p.project.id, token: 'late-test', markerSeq: marker.seq }));

    await a.backend.erasure.finishPending(true);
    assert.ok(a.logs.some((l) => l.includes('after the marker: another marker')), a.logs.join('\n'));
    const msgs = await streamMessages(tag);
    assert.deepEqual(msgs.filter((m) => m.body.includes(late) || m.body.includes('early')).map((m) => m.seq), []);
    assert.equal(msgs.filter((m) => m.erase === p.project.id).length, 2, 'two markers');
    assert.equal(stateOf(a, part)!.projects.has(p.project.id), false, 'the second marker dropped what the late batch folded');
    assert.notEqual((await catalogKv.get(`erase.${p.project.id}`))?.operation, 'PUT');
    await stop(a);
  });

  for (const finisher of ['the restarted node', 'the other node on its timer'] as const) test(`an erasure interrupted by the deleting node dying is finished by ${finisher}, and every node drops the project`, async () => {
    const tag = `x${process.pid}_${finisher.length}`;
    const key = adminKey();
    const a = await startNode('a', tag, key, { fold: 'all' });
    const b = await startNode('b', tag, key, { fold: 'all' });
    const p = await createProject(a.url, key);
    const part = a.backend.partitionOfProject(p.project.id);
    const secret = `dying-${randomBytes(6).toString('hex')}`;
    assert.equal((await api(a.url, '/analytics', { key: p.keys.secret, body: batch(secret, 0, 20) })).status, 200);
    const onB = await api(b.url, `/metrics?date=${new Date().toISOString().slice(0, 10)}`, { key: p.keys.secret });
    assert.equal(onB.body.pageviews, 20, `${onB.status} ${JSON.stringify(onB.body)}`);

    // a dies after the pending record is written and the project left the catalog, before anything is erased
    a.erasureHooks.beforeWork = async () => {
      await a.crash();
      throw new Error('the node died (test)');
    };
    const del = await api(a.url, `/projects/${p.project.id}`, { method: 'DELETE', key });
    assert.equal(del.status, 503, JSON.stringify(del.body));
    await stop(a);
    const catalogKv = await new Kvm(nc).open(`analytics_catalog_v1_${tag}`);
    assert.equal((await catalogKv.get(`erase.${p.project.id}`))?.operation, 'PUT', 'the pending erasure is recorded');
    assert.equal((await api(b.url, `/metrics?projectId=${p.project.id}`, { key })).status, 404, 'gone for requests at once');
    assert.ok((await streamMessages(tag)).some((m) => m.body.includes(secret)), 'not erased yet');

    if (finisher === 'the other node on its timer') {
      // The timer's rule with a short staleness (ERASE_STALE_MS is 30 s): a record unchanged that long is finished here.
      b.erasureHooks.staleMs = 300;
      const pendingLeft = async () => (await catalogKv.get(`erase.${p.project.id}`))?.operation === 'PUT';
      // (a call returns at once while b's own timer round is running: call again until b finished it)
      await waitForValue('b finishing it', async () => (await b.backend.erasure.finishPending(false), (await pendingLeft()) ? undefined : true), 10_000);
      assert.ok(b.logs.some((l) => l.includes('finishing an interrupted erasure')), b.logs.join('\n'));
    }
    const a2 = await startNode('a', tag, key, { fold: 'all', dataDir: a.dataDir });
    await waitForValue('the pending erasure finished', async () => ((await catalogKv.get(`erase.${p.project.id}`))?.operation === 'PUT' ? undefined : true), 15_000);
    const by = finisher === 'the other node on its timer' ? b : a2;
    assert.ok(by.logs.some((l) => l.includes('finishing an interrupted erasure')), by.logs.join('\n'));
    assert.deepEqual((await streamMessages(tag)).filter((m) => m.body.includes(secret)).map((m) => m.seq), []);
    for (const n of [a2, b]) {
      const st = await waitForValue(`${n.id} folding`, () => stateOf(n, part), 5_000);
      assert.equal(st.projects.has(p.project.id), false, `${n.id} dropped the project`);
      assert.deepEqual(await waitForValue(`${n.id}'s local copies`, () => (filesHolding(n.dataDir, secret).length === 0 ? [] : undefined), 5_000), []);
    }
    for (const body of (await snapshotObjects(tag)).values()) assert.ok(!body.includes(secret));
    await Promise.all([stop(a2), stop(b)]);
  });
});
