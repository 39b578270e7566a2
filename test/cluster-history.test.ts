import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { describe, test } from 'node:test';
import type { StoredEvent } from '../src/core/types.ts';
import { PartitionColumns } from '../src/cluster/cluster-columns.ts';
import { PartitionHistoryIds } from '../src/store/lmdb/partition-history-ids.ts';
import { api, createProject } from './helpers.ts';
import { waitForValue } from './nats-cluster.ts';
import { ownerNodes, settledOwner, type OwnerNode } from './owner-nodes.ts';

/**
 * History in cluster mode (POST /projects/{id}/history, GET /projects/{id}/export) on two owner-mode nodes over a real
 * 3-server nats-server cluster, against a single node given the same events: old days count once in their own day on
 * every node; a re-send counts nothing twice, through the other node, three days later (past the 48 h rule: only the
 * table of history ids knows them), after a restart whose table was lost (rebuilt from the stream up to the snapshot
 * it starts from); repeats that reach the stream are not exported; an export imported into an empty project answers
 * the same; a deleted project exports nothing and leaves no history id on any node.
 */

const DAY_MS = 86_400_000;
/** A partition's takeover after a stop, and its hand-back to the restarted preferred owner (as cluster-questions). */
const MOVE_DEADLINE_MS = 30_000;
const DAYS = ['2019-03-01', '2019-03-02'];
const at = (date: string, minute: number) => Date.parse(`${date}T10:00:00Z`) + minute * 60_000;

let clock = Date.now();
const nodes = ownerNodes('history', () => clock);
const startNode = nodes.start;
const stop = nodes.stop;
type Node = OwnerNode;

/** Two old days of a shop: visitors, referrers, browsers as an export gives them, an eventId each. */
function oldEvents(): object[][] {
  return DAYS.map((date, d) =>
    Array.from({ length: 40 }, (_, i) => ({
      event: i % 6 === 5 ? 'signup' : 'page_view',
      ...(i % 6 === 5 ? {} : { url: `https://shop.example/p${i % 4}` }),
      ...(i % 3 === 0 ? { referrer: 'https://www.google.com/search' } : {}),
      sessionId: `v${d}-${i % 7}`,
      timestamp: at(date, i),
      browser: i % 2 ? 'Firefox' : 'Chrome',
      os: 'Linux',
      device: 'desktop',
      country: 'FR',
      eventId: `old-${date}-${i}`,
    })),
  );
}

/** A day's /metrics without what names the project (and the ring of recent events, which keeps receive order). */
async function dayFigures(url: string, key: string, date: string): Promise<Record<string, unknown>> {
  const res = await api(url, `/metrics?date=${date}`, { key });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const { projectId: _p, recentEvents: _r, ...rest } = res.body as Record<string, unknown>;
  return rest;
}

async function figures(url: string, key: string): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const date of DAYS) out.push(await dayFigures(url, key, date));
  const q = await api(url, '/query', { key, body: { from: DAYS[0], to: DAYS[1], metrics: ['visitors', 'visits', 'pageviews', 'events'], dimensions: ['time:day'] } });
  assert.equal(q.status, 200, JSON.stringify(q.body));
  out.push(q.body.rows);
  return out;
}

async function exportLines(url: string, key: string, projectId: string, from: string, to: string): Promise<string[]> {
  const res = await fetch(`${url}/projects/${projectId}/export?from=${from}&to=${to}`, { headers: { authorization: `Bearer ${key}` } });
  assert.equal(res.status, 200, await res.clone().text());
  assert.match(res.headers.get('content-type') ?? '', /^application\/x-ndjson/);
  const text = (await res.text()).trim();
  return text === '' ? [] : text.split('\n');
}

async function collect(chunks: AsyncGenerator<StoredEvent[]>): Promise<StoredEvent[]> {
  const out: StoredEvent[] = [];
  for await (const c of chunks) out.push(...c);
  return out;
}

describe('history in cluster mode', () => {
  test('imported on one node, counted once in its own day on every node, exported in time order, erased with its ids', async () => {
    const tag = `h${process.pid}`;
    const key = `ak_${randomBytes(24).toString('base64url')}`;
    let a = await startNode('a', tag, key);
    let b = await startNode('b', tag, key);
    const single = await nodes.single(key);

    const pc = await createProject(a.url, key, { name: 'shop' });
    const ps = await createProject(single.url, key, { name: 'shop' });
    const pid = pc.project.id;
    const batches = oldEvents();
    for (const batch of batches) {
      const r = await api(a.url, `/projects/${pid}/history`, { key: pc.keys.secret, body: batch });
      assert.deepEqual([r.status, r.body], [200, { ok: true, accepted: 40, duplicates: 0 }]);
      assert.equal((await api(single.url, `/projects/${ps.project.id}/history`, { key: ps.keys.secret, body: batch })).status, 200);
    }
    let want = await figures(single.url, ps.keys.secret);
    assert.equal((want[0] as { pageviews: number }).pageviews, 34, 'the single node counted what was sent');
    const n = a.backend.partitionOfProject(pid);
    // the pre-check knows history ids where a node folds the partition and has caught up with its stream
    const folders = () =>
      [a, b].filter((x) => {
        const part = (x.backend as unknown as { parts: Array<{ active: boolean; caughtUp: boolean }> }).parts[n]!;
        return part.active && part.caughtUp;
      });
    // Reads once the partition is on its preferred owner over both nodes, caught up: until then the nodes settle it
    // (a read can fall between one's release and the other's claim, or on a fold just begun: a 503, retry later).
    const owner = await waitForValue(`the preferred owner of partition ${n} serving it, caught up`, () => {
      const o = settledOwner([a, b], n);
      return o && folders().includes(o) ? o : undefined;
    }, MOVE_DEADLINE_MS);
    await waitForValue('the project on b', async () => ((await api(b.url, `/metrics?date=${DAYS[0]}`, { key: pc.keys.secret })).status === 200 ? true : undefined), 5_000);
    assert.deepEqual(await figures(b.url, pc.keys.secret), want, 'read on the other node');
    assert.deepEqual(await figures(a.url, pc.keys.secret), want, 'read on the importing node');
    const realtime = await api(b.url, '/metrics/realtime', { key: pc.keys.secret });
    assert.equal(realtime.status, 200);
    assert.deepEqual([realtime.body.visitors, realtime.body.pageviews], [0, 0], 'history is never in realtime');

    // The same batch again through b; and three days later (past the 48 h rule) through a: nothing counts twice.
    for (const via of [b, a]) {
      const r = await api(via.url, `/projects/${pid}/history`, { key: pc.keys.secret, body: batches[0] });
      assert.equal(r.status, 200);
      assert.equal(r.body.accepted + r.body.duplicates, 40);
      if (folders().includes(via)) assert.deepEqual(r.body, { ok: true, accepted: 0, duplicates: 40 }, `${via.id} folds the partition: its pre-check knows them`);
      assert.deepEqual(await figures(b.url, pc.keys.secret), want, `after a re-send through ${via.id}`);
      clock += 3 * DAY_MS;
    }

    // A repeat that reaches the stream (no pre-check): the fold skips it, and export leaves it out.
    const stored = await collect(b.backend.exportEvents(pid, DAYS[0]!, DAYS[1]!));
    assert.equal(stored.length, 80);
    assert.ok(await b.backend.commit(pid, [{ ...stored[3]!, rt: clock }, { ...stored[50]!, rt: clock }], new Set(), 0));
    assert.deepEqual(await figures(a.url, pc.keys.secret), want, 'repeats in the stream are not counted');
    // More of the second day after them, so the repeats lie inside the stretch of stream an export reads back.
    const late = Array.from({ length: 10 }, (_, i) => ({ event: 'page_view', url: 'https://shop.example/late', sessionId: `late-${i % 3}`, timestamp: at(DAYS[1]!, 100 + i), eventId: `late-${i}` }));
    assert.deepEqual((await api(a.url, `/projects/${pid}/history`, { key: pc.keys.secret, body: late })).body, { ok: true, accepted: 10, duplicates: 0 });
    assert.equal((await api(single.url, `/projects/${ps.project.id}/history`, { key: ps.keys.secret, body: late })).status, 200);
    want = await figures(single.url, ps.keys.secret);
    assert.deepEqual(await figures(b.url, pc.keys.secret), want, 'the later events counted');

    // The partition's owner restarts without its table of history ids; the other node folds the partition meanwhile
    // (from the stream's start: its columns are new). Back, the owner's fold starts from a snapshot at or below its
    // columns' marker, and its table is rebuilt from the stream up to that snapshot.
    const other = owner === a ? b : a;
    await owner.backend.snapshotNow();
    await owner.backend.snapshotNow(); // the first may join one in flight
    await stop(owner);
    const table = PartitionHistoryIds.file(PartitionColumns.dir(owner.dataDir, n));
    rmSync(table, { force: true });
    rmSync(`${table}-lock`, { force: true });
    await waitForValue(`${other.id} serving partition ${n}`, () => (other.backend.serving().includes(n) ? true : undefined), MOVE_DEADLINE_MS);
    clock += 3 * DAY_MS;
    const viaOther = await api(other.url, `/projects/${pid}/history`, { key: pc.keys.secret, body: batches[1] });
    assert.deepEqual(viaOther.body, { ok: true, accepted: 0, duplicates: 40 }, `${other.id} took the partition over and knows every id`);
    const back = await startNode(owner.id, tag, key, owner.dataDir);
    if (owner === a) a = back;
    else b = back;
    await waitForValue(`${back.id} serving partition ${n} again`, () => (back.backend.serving().includes(n) ? true : undefined), MOVE_DEADLINE_MS);
    assert.ok(back.logs.some((l) => l.startsWith(`partition ${n}: history ids caught up from 0 to `)), `the table was rebuilt from the stream: ${back.logs.filter((l) => l.startsWith(`partition ${n}:`)).join(' | ')}`);
    assert.equal(await back.backend.historyIdCount(pid), 90);
    clock += 3 * DAY_MS;
    const again = await api(back.url, `/projects/${pid}/history`, { key: pc.keys.secret, body: batches[1] });
    assert.deepEqual(again.body, { ok: true, accepted: 0, duplicates: 40 }, 'the restarted node knows every id');
    assert.deepEqual(await figures(b.url, pc.keys.secret), want, 'after a restart and a re-send');
    assert.deepEqual(await figures(a.url, pc.keys.secret), want);

    // Export on either node: what was imported, in time order, as the single node exports it.
    const reference = await exportLines(single.url, ps.keys.secret, ps.project.id, '2019-01-01', '2019-12-31');
    assert.equal(reference.length, 90);
    for (const x of [a, b]) {
      const lines = await exportLines(x.url, pc.keys.secret, pid, '2019-01-01', '2019-12-31');
      assert.deepEqual(lines, reference, `export through ${x.id}`);
    }
    const oneDay = await exportLines(a.url, pc.keys.secret, pid, DAYS[1]!, DAYS[1]!);
    assert.deepEqual(oneDay, reference.slice(40));
    assert.ok(oneDay.every((l, i) => i === 0 || (JSON.parse(l).timestamp as number) >= (JSON.parse(oneDay[i - 1]!).timestamp as number)), 'time order');

    // Round trip: the export imported into an empty project answers every day the same.
    const copy = await createProject(b.url, key, { name: 'copy' });
    const events = reference.map((l) => JSON.parse(l) as object);
    for (let i = 0; i < events.length; i += 50) {
      const r = await api(b.url, `/projects/${copy.project.id}/history`, { key: copy.keys.secret, body: events.slice(i, i + 50) });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    await waitForValue('the copy on a', async () => ((await api(a.url, `/metrics?date=${DAYS[0]}`, { key: copy.keys.secret })).status === 200 ? true : undefined), 5_000);
    assert.deepEqual(await figures(a.url, copy.keys.secret), want, 'the copy answers as the original');

    // Deleting the project: it exports nothing, and no node keeps its history ids.
    assert.equal((await api(a.url, `/projects/${pid}`, { key, method: 'DELETE' })).status, 200);
    const gone = await fetch(`${b.url}/projects/${pid}/export?from=2019-01-01&to=2019-12-31`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(gone.status, 404);
    for (const x of [a, b]) {
      assert.deepEqual(await collect(x.backend.exportEvents(pid, '2019-01-01', '2019-12-31')), [], `${x.id} exports nothing of it`);
      if (folders().includes(x)) await waitForValue(`${x.id}'s history ids of the project removed`, async () => ((await x.backend.historyIdCount(pid)) === 0 ? true : undefined), 10_000);
    }
    const keeper = [a, b].find((x) => (x.backend as unknown as { parts: Array<{ active: boolean }> }).parts[x.backend.partitionOfProject(copy.project.id)]!.active);
    if (keeper) assert.equal(await keeper.backend.historyIdCount(copy.project.id), 90, 'the copy keeps its own');
  });
});
