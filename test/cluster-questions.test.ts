import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { ColumnStore } from '../src/store/lmdb/column-store.ts';
import { api, createProject } from './helpers.ts';
import { comparable, waitForValue } from './nats-cluster.ts';
import { ownerNodes, preferredBy, settledOwner, type OwnerNode } from './owner-nodes.ts';

/**
 * Questions in cluster mode (ANALYTICS_FOLD=owner): POST /query and /query/funnel asked on a node that does not own the
 * project's partition are answered by its owner from that partition's columns, and equal a single node's answers for
 * the same events; so after the owner restarts (the other node takes the partition, then hands it back to the
 * restarted node, whose columns resume from their marker). A deleted project leaves no segment in any node's columns.
 */

const DAY = '2026-11-20';
const NOW = Date.parse(`${DAY}T23:00:00Z`);
const at = (hhmm: string) => Date.parse(`${DAY}T${hhmm}:00Z`);
/** Takeover after a graceful stop, then hand-back to the restarted preferred owner (SETTLE_MS 2 s + catch-up; a loaded
 * 2-core machine running other cluster tests beside this one took over 15 s). */
const MOVE_DEADLINE_MS = 30_000;

const nodes = ownerNodes('questions', () => NOW);
const startNode = nodes.start;
const stop = nodes.stop;
type Node = OwnerNode;

/** Six batches of a day's traffic (pages, referrers, signups), then one repeating two events (eventIds) of the first two. */
function batches(): object[][] {
  const paths = ['/', '/pricing', '/docs/a', '/blog/x', '/pricing?plan=pro'];
  const out: object[][] = [];
  let i = 0;
  for (let b = 0; b < 6; b++) {
    const batch: object[] = [];
    for (let k = 0; k < 9; k++, i++) {
      // five visitors, an event every 3 minutes in turn (15 minutes apart each: one visit each until the gap)
      const session = `s${i % 5}`;
      const step = Math.floor(i / 5);
      const minutes = 8 * 60 + 3 * i + (step >= 7 ? 40 : 0); // a 40-minute pause: second visits
      const time = at(`${String(Math.floor(minutes / 60)).padStart(2, '0')}:${String(minutes % 60).padStart(2, '0')}`);
      batch.push(
        step % 5 === 2 && i % 5 < 3
          ? { event: 'signup', sessionId: session, timestamp: time, eventId: `ev-${i}` }
          : {
              event: 'page_view',
              url: `https://shop.example${paths[(step + i) % paths.length]}`,
              ...(i % 3 === 0 ? { referrer: 'https://news.example/item' } : {}),
              sessionId: session,
              timestamp: time,
              eventId: `ev-${i}`,
            },
      );
    }
    out.push(batch);
  }
  // repeats of two events: acknowledged, counted once (single node: refused at ingest; cluster: skipped by the fold)
  out.push([out[0]![0]!, out[1]![3]!]);
  return out;
}

const QUERIES = [
  { date: DAY, metrics: ['visitors', 'visits', 'pageviews', 'events', 'bounceRate'], dimensions: ['page'], filters: [['is', 'event', ['page_view']]] },
  { date: DAY, metrics: ['visitors', 'visits', 'conversionRate'], dimensions: ['source'], filters: [['is', 'goal', ['Signed up']]], orderBy: [['source', 'asc']] },
  { date: DAY, metrics: ['visitors', 'pageviews'], dimensions: ['entryPage'], filters: [['contains', 'page', ['/pricing']]] },
  { date: DAY, metrics: ['visits', 'events'], dimensions: ['time:hour', 'goal'] },
];
const FUNNEL = { date: DAY, steps: [{ page: '/' }, { page: '/pricing*' }, 'Signed up'] };

async function answers(url: string, key: string): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const body of QUERIES) {
    const r = await api(url, '/query', { key, body });
    assert.equal(r.status, 200, `${url} /query: ${JSON.stringify(r.body)}`);
    out.push(comparable(r.body));
  }
  const f = await api(url, '/query/funnel', { key, body: FUNNEL });
  assert.equal(f.status, 200, `${url} /query/funnel: ${JSON.stringify(f.body)}`);
  out.push(comparable(f.body));
  return out;
}

describe('questions in cluster mode', () => {
  test('asked on a node that does not own the project, and after its owner restarts: the single node answers', async () => {
    const tag = `q${process.pid}`;
    const key = `ak_${randomBytes(24).toString('base64url')}`;
    let a = await startNode('a', tag, key);
    const b = await startNode('b', tag, key);
    const single = await nodes.single(key);

    const pc = await createProject(a.url, key, { name: 'shop' });
    const ps = await createProject(single.url, key, { name: 'shop' });
    const goal = { name: 'Signed up', event: 'signup' };
    assert.equal((await api(a.url, `/projects/${pc.project.id}/goals`, { key: pc.keys.secret, body: goal })).status, 200);
    assert.equal((await api(single.url, `/projects/${ps.project.id}/goals`, { key: ps.keys.secret, body: goal })).status, 200);
    await waitForValue('the goal on b', async () => ((await api(b.url, `/projects/${pc.project.id}/goals`, { key: pc.keys.secret })).body?.goals?.length === 1 ? true : undefined), 5_000);

    // The same batches in the same order: the cluster's through a and b in turn.
    const all = batches();
    for (const [i, batch] of all.slice(0, 5).entries()) {
      const via = i % 2 === 0 ? a : b;
      assert.equal((await api(via.url, '/analytics', { key: pc.keys.secret, body: batch })).status, 200);
      assert.equal((await api(single.url, '/analytics', { key: ps.keys.secret, body: batch })).status, 200);
    }
    const n = a.backend.partitionOfProject(pc.project.id);
    // The partition settles on its preferred owner over both nodes (rendezvous hashing), which takes it back after a
    // restart; not on a node both prefer while one of them has settled only that node so far (settledOwner).
    const owner = await waitForValue(`the preferred owner serving partition ${n}`, () => settledOwner([a, b], n), MOVE_DEADLINE_MS);
    const other = owner === a ? b : a;
    // The repeats through the node that does not fold the partition: its pre-check cannot refuse them, so they are
    // in the stream, and the fold (applyOnce) must keep them out of the columns.
    assert.equal((await api(other.url, '/analytics', { key: pc.keys.secret, body: all[6] })).status, 200);
    assert.equal((await api(single.url, '/analytics', { key: ps.keys.secret, body: all[6] })).status, 200);

    const expected = await answers(single.url, ps.keys.secret);
    const totals = (expected[0] as { totals: number[] }).totals;
    assert.ok(totals[0]! > 0 && totals[2]! > 0, `the fixture has page views: ${JSON.stringify(expected[0])}`);
    assert.ok((expected[4] as { steps: Array<{ visits: number }> }).steps[2]!.visits > 0, `the funnel reaches its last step: ${JSON.stringify(expected[4])}`);
    assert.deepEqual(await answers(other.url, pc.keys.secret), expected, 'forwarded to the owner');
    assert.deepEqual(await answers(owner.url, pc.keys.secret), expected, 'answered by the owner');

    // The owner stops; the other takes the partition (its columns start from nothing: the stream from its start).
    await stop(owner);
    await waitForValue(`${other.id} serving partition ${n}`, () => (other.backend.serving().includes(n) ? true : undefined), MOVE_DEADLINE_MS);
    // One more batch while the old owner is away, through the survivor.
    assert.equal((await api(other.url, '/analytics', { key: pc.keys.secret, body: all[5] })).status, 200);
    assert.equal((await api(single.url, '/analytics', { key: ps.keys.secret, body: all[5] })).status, 200);
    const expected2 = await answers(single.url, ps.keys.secret);
    assert.notDeepEqual(expected2, expected, 'the last batch changes the answers');
    assert.deepEqual(await answers(other.url, pc.keys.secret), expected2, 'the new owner answers from its own columns');

    // A snapshot past the old owner's columns: it must start its fold from an older one, at or below their marker.
    await other.backend.snapshotNow();
    await other.backend.snapshotNow(); // the first may join one in flight from before the batch
    // The old owner restarts on its data directory: its columns resume from their marker, it takes the partition back.
    const restarted = await startNode(owner.id, tag, key, owner.dataDir);
    if (owner === a) a = restarted;
    await waitForValue(`${restarted.id} serving partition ${n} again`, () => (restarted.backend.serving().includes(n) ? true : undefined), MOVE_DEADLINE_MS).catch((err: Error) => {
      const views = [restarted, other].map((x) => `${x.id} prefers ${JSON.stringify([0, 1, 2, 3].map((k) => preferredBy(x, k)))} and serves ${JSON.stringify(x.backend.serving())}`);
      throw new Error(`${err.message}; ${views.join('; ')}; ${restarted.id} said: ${restarted.logs.join(' | ')}; ${other.id} said: ${other.logs.slice(-20).join(' | ')}`);
    });
    assert.deepEqual(await answers(other.url, pc.keys.secret), expected2, `forwarded to the restarted owner (its log: ${restarted.logs.filter((l) => l.includes('columns')).join(' | ')})`);
    assert.deepEqual(await answers(restarted.url, pc.keys.secret), expected2, 'answered by the restarted owner');
    assert.ok(restarted.logs.some((l) => l.startsWith(`partition ${n}: columns at sequence `)), `the restarted owner's columns were behind the newest snapshot: ${restarted.logs.join(' | ')}`);

    // Deleting the project erases it from every node's columns (the erase marker in the fold).
    assert.equal((await api(other.url, `/projects/${pc.project.id}`, { key, method: 'DELETE' })).status, 200);
    const erased = (x: Node) => x.logs.some((l) => l.includes(`project ${pc.project.id} erased (`));
    await waitForValue('the columns erasure on the owner', () => (erased(restarted) ? true : undefined), 10_000);
    // The other node no longer folds the partition: its columns of it missed the marker and go when the floor rises.
    const removed = (x: Node) => x.logs.some((l) => l.includes(`partition ${n}: columns removed`));
    await waitForValue('the stale columns removed on the other node', () => (removed(other) || erased(other) ? true : undefined), 10_000);
    const dataDirs = [restarted.dataDir, other.dataDir];
    await stop(restarted);
    await stop(other);
    let segments = 0;
    for (const dir of dataDirs) {
      for (const part of readdirSync(path.join(dir, 'columns'))) {
        const store = ColumnStore.open(path.join(dir, 'columns', part), { readOnly: true });
        try {
          for (const s of store.verifyAll()) {
            assert.notEqual(s.projectId, pc.project.id, `${dir} ${part} still holds a segment of the deleted project`);
            segments++;
          }
        } finally {
          await store.close();
        }
      }
    }
    assert.equal(segments, 0, 'the only project is gone from every columns file');
  });
});
