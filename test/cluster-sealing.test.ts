import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { connect } from '@nats-io/transport-node';
import { loadConfig } from '../src/config.ts';
import { AnalyticsState, apply } from '../src/core/state.ts';
import type { StoredEvent } from '../src/core/types.ts';
import type { ClusterBackend } from '../src/cluster/cluster-backend.ts';
import { Sealer } from '../src/engine/sealer.ts';
import { ensureResources } from '../src/store/nats/resources.ts';
import { KvSealedStore } from '../src/store/nats/sealed.ts';
import { startService, type RunningService } from '../src/service.ts';
import { api, createProject } from './helpers.ts';
import { comparable, waitForValue, clusterNodeEnv, startNatsCluster, TEST_STREAM_BYTES, type NatsCluster } from './nats-cluster.ts';


/**
 * Sealing in cluster mode: days whose window closed leave every node's heap and partition snapshots for the shared
 * sealed-rows bucket and each node's local copy of it, and answers stay those of a single node: on the nodes that
 * sealed, after the owner leaves, and on a node that starts with an empty data directory from a snapshot that no
 * longer carries the sealed days.
 */

const DAY_MS = 86_400_000;
/** Days of history sent (the oldest 24 days back: inside the 31 days an event may be late). */
const HISTORY_DAYS = 24;

let cluster: NatsCluster;
const dirs: string[] = [];
const running: RunningService[] = [];

/** Every service's clock: days seal ~33.5 days after their midnight (31 days late events + margins), so the test moves it. */
let clock = Date.now();
const now = () => clock;

async function startNode(id: string, tag: string, adminKey: string, fold: 'all' | 'owner'): Promise<RunningService> {
  const dataDir = mkdtempSync(path.join(tmpdir(), `seal-${id}-`));
  dirs.push(dataDir);
  const config = loadConfig({ ...clusterNodeEnv({ id, urls: cluster.urls, dataDir, adminKey, fold }), ANALYTICS_QUIET: '1' });
  const svc = await startService(config, { cluster: { tag }, now });
  running.push(svc);
  return svc;
}

async function stop(svc: RunningService): Promise<void> {
  await svc.stop();
  running.splice(running.indexOf(svc), 1);
}

before(async () => {
  cluster = await startNatsCluster();
});

after(async () => {
  for (const s of [...running].reverse()) await s.stop().catch(() => {});
  await cluster?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

test('cluster nodes seal closed days into the shared bucket: the heap keeps only live days, and every node (even a new one) answers like a single node', async () => {
  const tag = `s${process.pid}`;
  const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
  const a = await startNode('a', tag, adminKey, 'owner');
  const b = await startNode('b', tag, adminKey, 'owner');
  const singleDir = mkdtempSync(path.join(tmpdir(), 'seal-single-'));
  dirs.push(singleDir);
  const single = await startService(loadConfig({ PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: singleDir, ANALYTICS_ADMIN_KEY: adminKey, ANALYTICS_QUIET: '1' }), { now });
  running.push(single);
  const pc = await createProject(a.url, adminKey, { name: 'history' });
  const ps = await createProject(single.url, adminKey, { name: 'history' });
  const backendOf = (svc: RunningService) => (svc.engine as unknown as { backend: ClusterBackend }).backend;
  // A quiet project in another partition: it gets history and then no event at all, so only a clock tick seals it.
  let quiet = await createProject(a.url, adminKey, { name: 'quiet' });
  while (backendOf(a).partitionOfProject(quiet.project.id) === backendOf(a).partitionOfProject(pc.project.id)) quiet = await createProject(a.url, adminKey, { name: 'quiet' });

  const t0 = clock;
  const events: Array<{ event: string; url: string; referrer?: string; sessionId: string; timestamp: string; eventId: string }> = [];
  for (let d = HISTORY_DAYS; d >= 0; d--) {
    for (let i = 0; i < 12; i++) {
      events.push({
        event: i % 5 === 4 ? 'signup' : 'page_view',
        url: `https://site.example/${['', 'pricing', 'docs'][i % 3]}`,
        ...(i % 4 === 0 ? { referrer: 'https://news.example/x' } : {}),
        sessionId: `d${d}s${i % 4}`,
        timestamp: new Date(t0 - d * DAY_MS - (i + 1) * 60_000).toISOString(),
        eventId: `ev-${d}-${i}`,
      });
    }
  }
  // the dates the history covers: 25, or 26 when the test starts within minutes after midnight (UTC)
  const sealedDates = new Set(events.map((e) => e.timestamp.slice(0, 10))).size;
  const send = async (batch: typeof events) => {
    for (const [url, key] of [[b.url, pc.keys.secret], [single.url, ps.keys.secret]] as const) {
      const r = await api(url, '/analytics', { key, body: { events: batch } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
  };
  for (let i = 0; i < events.length; i += 100) await send(events.slice(i, i + 100));
  for (let i = 0; i < events.length; i += 100) assert.equal((await api(a.url, '/analytics', { key: quiet.keys.secret, body: { events: events.slice(i, i + 100) } })).status, 200);
  // Forty days on: one more event, and every day of the history is past its seal time.
  clock += 40 * DAY_MS;
  await send([{ event: 'page_view', url: 'https://site.example/', sessionId: 'later', timestamp: new Date(clock - 60_000).toISOString(), eventId: 'ev-later' }]);

  const to = new Date(clock).toISOString().slice(0, 10);
  const from = new Date(t0 - (HISTORY_DAYS + 2) * DAY_MS).toISOString().slice(0, 10);
  const mid = new Date(t0 - 10 * DAY_MS).toISOString().slice(0, 10);
  const queries = [`from=${from}&to=${to}`, `from=${mid}&to=${mid}`, `from=${from}&to=${mid}`];
  await single.engine.sealingIdle();
  const want = await Promise.all(queries.map((q) => api(single.url, `/metrics?${q}`, { key: ps.keys.secret })));
  for (const w of want) assert.equal(w.status, 200);
  assert.ok(want[0]!.body.pageviews > 200, 'the single node counted the history');
  assert.ok(single.engine.stats().sealedDays > HISTORY_DAYS, 'the single node sealed the history');

  /** Every node answers every query as the single node does (reads retried while the partition moves). */
  const sameAsSingle = async (svc: RunningService, who: string) => {
    for (let i = 0; i < queries.length; i++) {
      const got = await waitForValue(`${who}: ${queries[i]}`, async () => {
        const r = await api(svc.url, `/metrics?${queries[i]}`, { key: pc.keys.secret });
        return r.status === 200 ? r : undefined;
      }, 20_000);
      assert.deepEqual(comparable(got.body), comparable(want[i]!.body), `${who} answers ${queries[i]} as a single node`);
    }
  };

  // The owner sealed the closed days: its heap holds about today's (and the still-open yesterday's), both nodes'
  // copies hold the sealed ones.
  await sameAsSingle(a, 'node a');
  await sameAsSingle(b, 'node b');
  // The quiet partition's lease holder ticks its clock (its timer does so within a minute of an hour's silence).
  const quietRange = await waitForValue('the quiet project sealed', async () => {
    // asked each round: a lease holder whose partition is moving or catching up skips it (its timer would ask again)
    await Promise.all([backendOf(a).tickIdle(), backendOf(b).tickIdle()]);
    await Promise.all([a.engine.sealingIdle(), b.engine.sealingIdle()]);
    return a.engine.stats().liveDays + b.engine.stats().liveDays <= 2 ? true : undefined;
  }, 20_000);
  assert.equal(quietRange, true);
  const live = a.engine.stats().liveDays + b.engine.stats().liveDays;
  await waitForValue('both copies hold the sealed days', async () => (a.engine.stats().sealedDays >= 2 * sealedDates && b.engine.stats().sealedDays >= 2 * sealedDates ? true : undefined), 10_000);
  assert.ok(live <= 2, `live days after sealing: ${live} (owner and standby hold only the one recent day)`);
  for (const i of [1, 2]) {
    // the quiet project got the same history, and not the later event: old ranges answer as the single node's
    const got = await waitForValue(`the quiet project: ${queries[i]}`, async () => {
      const r = await api(a.url, `/metrics?${queries[i]}`, { key: quiet.keys.secret });
      return r.status === 200 ? r : undefined; // 503 while a partition moves between the nodes
    }, 20_000);
    assert.deepEqual(comparable(got.body), comparable(want[i]!.body), `the quiet project, sealed by a clock tick, answers ${queries[i]}`);
  }

  // Snapshots are written without the sealed days; then both nodes go, and a node with an empty data directory
  // restores that snapshot and takes the sealed days from the bucket.
  await a.engine.snapshotNow();
  await b.engine.snapshotNow();
  await stop(a);
  await sameAsSingle(b, 'node b after a left');
  await stop(b);
  const c = await startNode('c', tag, adminKey, 'all');
  await sameAsSingle(c, 'a new node c');
  // c restores the newest snapshot of each partition; one captured before the owner sealed (a periodic one, on a
  // loaded machine) still holds the closed days, and c seals them again on its own: wait for that, not for a timing
  const settledLive = await waitForValue('node c holds only the recent day', async () => {
    await c.engine.sealingIdle();
    return c.engine.stats().liveDays <= 1 ? true : undefined;
  }, 10_000).catch(() => false);
  assert.ok(settledLive, `node c holds ${c.engine.stats().liveDays} live days after restoring the snapshot and sealing`);
  assert.ok(c.engine.stats().sealedDays > HISTORY_DAYS, 'node c mirrored the sealed days');

  // Deleting the quiet project removes its sealed days from the bucket and every copy: a new copy holds none of them.
  const sealedOnC = (projectId: string) => (backendOf(c) as unknown as { cp: { sealed: KvSealedStore } }).cp.sealed.days(projectId, from, to).length;
  assert.equal(sealedOnC(quiet.project.id), sealedDates, 'node c holds the quiet project\'s sealed days');
  const kept = sealedOnC(pc.project.id);
  const del = await api(c.url, `/projects/${quiet.project.id}`, { key: adminKey, method: 'DELETE' });
  assert.equal(del.status, 200, JSON.stringify(del.body));
  // DELETE answers once the erasure is done: node c's copy holds none of the quiet project's days, the others' all
  const seen = () => ({ quiet: sealedOnC(quiet.project.id), other: sealedOnC(pc.project.id), counted: c.engine.stats().sealedDays });
  const settled = await waitForValue('node c\'s copy without the deleted project', () => (seen().quiet === 0 ? true : undefined), 10_000).catch(() => false);
  assert.ok(settled, `the deleted project's sealed days are still on node c: ${JSON.stringify(seen())}`);
  assert.deepEqual(seen(), { quiet: 0, other: kept, counted: kept }, 'node c keeps and counts only the other project\'s sealed days');
  const nc = await connect({ servers: cluster.urls });
  try {
    const res = await ensureResources(nc, { tag, maxStreamBytes: TEST_STREAM_BYTES });
    const d = mkdtempSync(path.join(tmpdir(), 'sealed-after-delete-'));
    dirs.push(d);
    const copy = await KvSealedStore.open(res.sealed, res.names.sealed, d, { log: () => {} });
    try {
      await copy.caughtUp();
      assert.equal(copy.days(quiet.project.id, from, to).length, 0, 'no sealed day of the deleted project in the bucket');
      assert.equal(copy.days(pc.project.id, from, to).length, sealedDates, 'the other project keeps its sealed days');
    } finally {
      await copy.close();
    }
  } finally {
    await nc.close();
  }
});

function visit(day: string, page: string, rt: number, p = 'p'): StoredEvent {
  return {
    t: 'e', p, ts: Date.parse(`${day}T12:00:00Z`), rt, day, event: 'page_view', url: page, path: page,
    referrer: '', source: 'Direct', sessionId: page, user: `s:${page}`, country: 'DE', device: 'desktop', params: {},
  };
}

test('the sealed-rows bucket: a day too big for a message stays live while the rest is sealed; a new copy mirrors the rows, a restarted one resumes, an erasure reaches both', async () => {
  const nc = await connect({ servers: cluster.urls });
  const stores: KvSealedStore[] = [];
  try {
    const res = await ensureResources(nc, { tag: `r${process.pid}`, maxStreamBytes: TEST_STREAM_BYTES });
    const dir = () => {
      const d = mkdtempSync(path.join(tmpdir(), 'sealed-rows-'));
      dirs.push(d);
      return d;
    };
    const logs: string[] = [];
    const open = async (at: string) => {
      const s = await KvSealedStore.open(res.sealed, res.names.sealed, at, { log: (l) => logs.push(l), maxRowBytes: 4096 });
      stores.push(s);
      return s;
    };
    const dirA = dir();
    const a = await open(dirA);
    const state = new AnalyticsState();
    let seq = 0;
    const days = ['2026-01-05', '2026-01-06', '2026-01-07'];
    for (const day of days) for (let i = 0; i < 5; i++) apply(state, ++seq, visit(day, `/p${i}`, Date.parse('2026-01-08T00:00:00Z')));
    // 2026-01-06 gets 200 distinct long pages: its row is well over the 4 KiB bound of this test
    for (let i = 0; i < 200; i++) apply(state, ++seq, visit('2026-01-06', `/${randomBytes(30).toString('hex')}`, Date.parse('2026-01-08T00:00:00Z')));
    apply(state, ++seq, visit('2026-03-10', '/later', Date.parse('2026-03-10T12:00:00Z'))); // every January day is now sealable
    const sealer = new Sealer(state, a, (l) => logs.push(l));
    sealer.kick();
    await sealer.idle();
    const live = [...state.projects.get('p')!.days.keys()].sort();
    assert.deepEqual(live, ['2026-01-06', '2026-03-10'], 'the oversized day stays live, the others were sealed');
    assert.ok(logs.some((l) => l.startsWith('ALERT') && l.includes('2026-01-06')), 'the operator is told');
    assert.deepEqual(a.days('p', '2026-01-01', '2026-01-31').map((s) => s.date), ['2026-01-05', '2026-01-07']);
    assert.ok(a.month('p', '2026-01'), 'January is over and its rollup stored');

    // A node with an empty directory mirrors the bucket; one restarted resumes after what it applied.
    const b = await open(dir());
    await b.caughtUp();
    assert.deepEqual(b.days('p', '2026-01-01', '2026-01-31').map((s) => s.date), ['2026-01-05', '2026-01-07']);
    assert.deepEqual(b.readDays('p', '2026-01-05', '2026-01-05'), a.readDays('p', '2026-01-05', '2026-01-05'), 'the same rows on both copies');
    await a.close();
    stores.splice(stores.indexOf(a), 1);
    // written while a is down: another project's day
    const other = new AnalyticsState();
    apply(other, 1, visit('2026-01-09', '/x', 0, 'q'));
    apply(other, 2, visit('2026-03-10', '/later', Date.parse('2026-03-10T12:00:00Z'), 'q'));
    const s2 = new Sealer(other, b, (l) => logs.push(l));
    s2.kick();
    await s2.idle();
    const a2 = await open(dirA);
    await a2.caughtUp();
    assert.equal(a2.days('q', '2026-01-09', '2026-01-09').length, 1, 'the restarted copy caught up with what it missed');

    // Erasure: every row of p purged from the bucket, and both copies drop them.
    const purged = await b.eraseProject('p');
    assert.ok(purged >= 3, `purged ${purged} rows`);
    await a2.caughtUp();
    for (const s of [a2, b]) {
      assert.equal(s.days('p', '2026-01-01', '2026-01-31').length, 0);
      assert.equal(s.month('p', '2026-01'), undefined);
      assert.equal(s.days('q', '2026-01-09', '2026-01-09').length, 1, 'another project is untouched');
    }
  } finally {
    for (const s of stores) await s.close();
    await nc.close();
  }
});
