import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { hrw, preferredOwner } from '../src/core/hrw.ts';
import {
  decide,
  emptyObserved,
  FENCE_MS,
  LEASE_MS,
  observe,
  RENEW_MS,
  SETTLE_MS,
  type Action,
  type Held,
  type Observed,
} from '../src/cluster/ownership.ts';

/** The lease rules of CLUSTER.md §6 as a pure function of what a node observed and when (times are made up). */

describe('rendezvous hashing picks the same owner everywhere and moves little when members change', () => {
  test('weights are deterministic and differ by partition and by node', () => {
    assert.equal(hrw(3, 'a'), hrw(3, 'a'));
    assert.notEqual(hrw(3, 'a'), hrw(4, 'a'));
    assert.notEqual(hrw(3, 'a'), hrw(3, 'b'));
    assert.notEqual(hrw(1, '2x'), hrw(12, 'x'));
    assert.equal(preferredOwner(0, []), undefined);
    for (let n = 0; n < 50; n++) {
      const ids = ['a', 'b', 'c'];
      const best = ids.reduce((x, y) => (hrw(n, y) > hrw(n, x) ? y : x));
      assert.equal(preferredOwner(n, ids), best);
      assert.equal(preferredOwner(n, [...ids].reverse()), best, 'order of members does not matter');
    }
  });

  test('3,000 partitions spread evenly over 3 nodes; removing one moves only its own, adding one takes about a quarter', () => {
    const P = 3_000;
    const three = ['node-a', 'node-b', 'node-c'];
    const counts = new Map<string, number>();
    const owner3: string[] = [];
    for (let n = 0; n < P; n++) {
      const o = preferredOwner(n, three)!;
      owner3.push(o);
      counts.set(o, (counts.get(o) ?? 0) + 1);
    }
    for (const id of three) assert.ok(counts.get(id)! > P * 0.28 && counts.get(id)! < P * 0.39, `${id}: ${counts.get(id)}`);
    let movedOnRemove = 0;
    for (let n = 0; n < P; n++) {
      const o = preferredOwner(n, ['node-a', 'node-b'])!;
      if (owner3[n] !== 'node-c') assert.equal(o, owner3[n], 'a partition not owned by the removed node stays');
      else movedOnRemove++;
    }
    assert.equal(movedOnRemove, counts.get('node-c'));
    let movedOnAdd = 0;
    for (let n = 0; n < P; n++) {
      const o = preferredOwner(n, [...three, 'node-d'])!;
      if (o !== owner3[n]) {
        assert.equal(o, 'node-d', 'only the new member takes partitions');
        movedOnAdd++;
      }
    }
    assert.ok(movedOnAdd > P * 0.2 && movedOnAdd < P * 0.3, `moved ${movedOnAdd}`);
  });
});

const P = 16;
const inc = (id: string, life = 1) => `${id}-life${life}`;

/** A tiny world: members heartbeat (revisions grow), leases change; `at` is the observer's clock. */
class World {
  o: Observed = emptyObserved();
  rev = 0;
  member(id: string, at: number, life = 1): void {
    observe(this.o, { kind: 'member', id, info: { id, http: '', grpc: '', version: '1', incarnation: inc(id, life) }, revision: ++this.rev }, at);
  }
  memberGone(id: string, at: number): void {
    observe(this.o, { kind: 'member', id, info: undefined, revision: ++this.rev }, at);
  }
  /** heartbeats of `ids` every RENEW_MS from `from` to `to` inclusive */
  beat(ids: string[], from: number, to: number): void {
    for (let t = from; t <= to; t += RENEW_MS) for (const id of ids) this.member(id, t);
  }
  part(n: number, owner: string, epoch: number, at: number): number {
    observe(this.o, { kind: 'part', partition: n, lease: { owner, epoch }, revision: ++this.rev }, at);
    return this.rev;
  }
  ready(n: number, id: string, at: number, life = 1): void {
    observe(this.o, { kind: 'ready', partition: n, id, mark: { incarnation: inc(id, life) }, revision: ++this.rev }, at);
  }
  decide(me: string, now: number, held = new Map<number, Held>(), busy = new Set<number>(), fold: 'owner' | 'all' = 'owner') {
    return decide({ me, partitions: P, now, observed: this.o, held, busy, fold });
  }
}

const of = (actions: Action[], type: Action['type']) => actions.filter((a) => a.type === type).map((a) => a.partition);
const preferredSet = (me: string, ids: string[]) => Array.from({ length: P }, (_, n) => n).filter((n) => preferredOwner(n, ids) === me);

describe('the lease rules decide from revisions and the local clock alone', () => {
  test('a fresh cluster: nobody claims before members have settled, then each claims what it is preferred for', () => {
    const w = new World();
    w.beat(['a', 'b', 'c'], 0, 1_000);
    assert.deepEqual(w.decide('a', 1_500).actions, [], 'members seen for less than SETTLE_MS are not candidates');
    w.beat(['a', 'b', 'c'], 2_000, 2_000);
    const d = w.decide('a', SETTLE_MS);
    assert.deepEqual(of(d.actions, 'claim'), preferredSet('a', ['a', 'b', 'c']));
    for (const a of d.actions) assert.deepEqual(a, { type: 'claim', partition: a.partition, revision: 0, epoch: 1 }, 'an absent key is created');
    assert.deepEqual([...d.standby].sort((x, y) => x - y), preferredSet('a', ['a', 'b', 'c']), 'preferred but not held: fold as standby');
  });

  test('a member key seen once and never changing (a node dead before this one watched) is never preferred; a live one is, after SETTLE_MS', () => {
    const w = new World();
    w.member('x', 0); // x crashed before a joined: its last heartbeat is what a's watch delivers first
    w.beat(['a', 'b'], 0, 4_000);
    for (const at of [SETTLE_MS, 4_000]) {
      const d = w.decide('a', at);
      assert.ok(!d.preferred.includes('x'), `at ${at} ms x is not a candidate (alive by its age, but never seen to heartbeat)`);
      assert.deepEqual(of(d.actions, 'claim'), preferredSet('a', ['a', 'b']), 'a claims its share of a and b, none of it waits for x');
    }
    w.member('x', 4_100); // x heartbeats after all: a candidate SETTLE_MS after it was first seen alive
    assert.ok(w.decide('a', 4_200).preferred.includes('x'));
  });

  test('an owner renews every RENEW_MS, and fences itself FENCE_MS after its last successful renewal was sent', () => {
    const w = new World();
    w.beat(['a'], 0, 10_000);
    const held = new Map<number, Held>([[0, { epoch: 1, revision: 5, lastRenewSent: 4_000 }]]);
    assert.deepEqual(w.decide('a', 4_500, held).actions.filter((a) => a.partition === 0), []);
    assert.deepEqual(w.decide('a', 4_000 + RENEW_MS, held).actions.filter((a) => a.partition === 0), [{ type: 'renew', partition: 0, revision: 5, epoch: 1 }]);
    assert.deepEqual(w.decide('a', 4_000 + FENCE_MS - 1, held, new Set([0])).actions.filter((a) => a.partition === 0), [], 'a renewal in flight: wait for it');
    assert.deepEqual(w.decide('a', 4_000 + FENCE_MS, held).actions.filter((a) => a.partition === 0), [{ type: 'fenced', partition: 0 }]);
  });

  test('a live lease of another node is left alone; unchanged for LEASE_MS it is claimed at the observed revision', () => {
    const w = new World();
    w.beat(['a', 'b'], 0, 3_000);
    const n = preferredSet('b', ['a', 'b'])[0]!;
    const rev = w.part(n, 'b', 7, 3_000);
    // b dies at 3 s: no more heartbeats or renewals; a goes on
    w.beat(['a'], 4_000, 8_000);
    assert.equal(of(w.decide('a', 7_999).actions, 'claim').includes(n), false, 'b is still alive and preferred');
    const d = w.decide('a', 3_000 + LEASE_MS);
    assert.deepEqual(d.preferred[n], 'a', 'b dead: a is preferred');
    assert.deepEqual(
      d.actions.find((x) => x.partition === n),
      { type: 'claim', partition: n, revision: rev, epoch: 8 },
    );
  });

  test('a lease kept alive by its owner is not claimed even by the preferred member (it waits for ready)', () => {
    const w = new World();
    w.beat(['a', 'b'], 0, 20_000);
    const n = preferredSet('b', ['a', 'b'])[0]!;
    for (let t = 0; t <= 20_000; t += RENEW_MS) w.part(n, 'a', 1, t);
    const d = w.decide('b', 20_000);
    assert.equal(d.actions.some((x) => x.partition === n), false);
    assert.ok(d.standby.has(n), 'b should fold n as a standby');
  });

  test('a released lease is claimed at once by its preferred member and by nobody else', () => {
    const w = new World();
    w.beat(['a', 'b', 'c'], 0, 4_000);
    const n = preferredSet('c', ['a', 'b', 'c'])[0]!;
    const rev = w.part(n, '', 3, 4_000);
    assert.deepEqual(w.decide('c', 4_000).actions.find((x) => x.partition === n), { type: 'claim', partition: n, revision: rev, epoch: 4 });
    assert.equal(w.decide('a', 4_000).actions.some((x) => x.partition === n), false);
    assert.equal(w.decide('b', 4_000).actions.some((x) => x.partition === n), false);
  });

  test('hand-over: the owner releases to the settled preferred member only once that incarnation marked it ready', () => {
    const w = new World();
    w.beat(['a'], 0, 10_000);
    const n = preferredSet('b', ['a', 'b'])[0]!;
    const held = new Map<number, Held>([[n, { epoch: 2, revision: 40, lastRenewSent: 10_000 }]]);
    w.beat(['b'], 10_000, 10_000);
    w.ready(n, 'b', 10_000, 0); // a mark of b's earlier life
    w.beat(['a', 'b'], 11_000, 12_000);
    assert.equal(w.decide('a', 12_000, held).preferred[n], 'b');
    assert.equal(of(w.decide('a', 12_000, held).actions, 'release').length, 0, 'a stale mark (other incarnation) does not count');
    w.ready(n, 'b', 12_100);
    assert.deepEqual(w.decide('a', 12_200, held).actions.find((x) => x.partition === n), { type: 'release', partition: n, revision: 40, epoch: 2, held: true });
  });

  test('a returning member counts as new: a new incarnation, or a member seen dead, settles again', () => {
    const w = new World();
    w.beat(['a', 'b'], 0, 5_000);
    const n = preferredSet('b', ['a', 'b'])[0]!;
    assert.equal(w.decide('a', 5_000).preferred[n], 'b');
    w.member('b', 5_500, 2); // restarted quickly under the same id
    w.beat(['a'], 6_000, 6_000);
    assert.equal(w.decide('a', 6_000).preferred[n], 'a');
    w.member('b', 7_500, 2);
    assert.equal(w.decide('a', 7_500).preferred[n], 'b', 'settled after SETTLE_MS');
    // silent for LEASE_MS, then back with the same incarnation (a frozen process thawed)
    w.beat(['a'], 8_000, 14_000);
    assert.equal(w.decide('a', 13_000).preferred[n], 'a');
    w.member('b', 14_000, 2);
    assert.equal(w.decide('a', 14_000).preferred[n], 'a');
    w.member('b', 15_000, 2);
    w.member('b', 16_000, 2);
    w.beat(['a'], 16_000, 16_000);
    assert.equal(w.decide('a', 16_000).preferred[n], 'b');
  });

  test('a deleted member (graceful stop) stops being preferred at once', () => {
    const w = new World();
    w.beat(['a', 'b'], 0, 4_000);
    const n = preferredSet('b', ['a', 'b'])[0]!;
    w.memberGone('b', 4_100);
    const rev = w.part(n, '', 1, 4_100);
    assert.deepEqual(w.decide('a', 4_150).actions.find((x) => x.partition === n), { type: 'claim', partition: n, revision: rev, epoch: 2 });
  });

  test('a lease naming this node that it does not hold (an earlier life) is released, or claimed if preferred', () => {
    const w = new World();
    w.beat(['a', 'b'], 0, 4_000);
    const mineButB = preferredSet('b', ['a', 'b'])[0]!;
    const mineAndA = preferredSet('a', ['a', 'b'])[0]!;
    const r1 = w.part(mineButB, 'a', 3, 4_000);
    const r2 = w.part(mineAndA, 'a', 5, 4_000);
    const d = w.decide('a', 4_000);
    assert.deepEqual(d.actions.find((x) => x.partition === mineButB), { type: 'release', partition: mineButB, revision: r1, epoch: 3, held: false });
    assert.deepEqual(d.actions.find((x) => x.partition === mineAndA), { type: 'claim', partition: mineAndA, revision: r2, epoch: 6 });
  });

  test('a node that sees itself dead (its heartbeats fail) claims nothing', () => {
    const w = new World();
    w.beat(['a', 'b'], 0, 2_000);
    w.beat(['b'], 3_000, 8_000);
    assert.deepEqual(of(w.decide('a', 8_000).actions, 'claim'), []);
  });

  test('a silent watch (the bucket down for 7 s) ages nothing: after it resumes, members stay settled and leases get a new LEASE_MS', async () => {
    const w = new World();
    w.beat(['a', 'b', 'c'], 0, 4_000);
    const nb = preferredSet('b', ['a', 'b', 'c'])[0]!;
    const rev = w.part(nb, 'b', 2, 4_000);
    // no delivery from 4 s to 11 s: a leader failover of the owners bucket
    let d = w.decide('a', 10_500);
    assert.equal(d.actions.some((x) => x.partition === nb), false, 'blind: a live-looking lease is not claimed');
    assert.equal(d.preferred[nb], 'b', 'blind: nobody died');
    w.beat(['a', 'c'], 11_000, 11_000); // a and c come back first
    d = w.decide('a', 11_100);
    assert.equal(d.preferred[nb], 'b', 'b is not dead: its key could not change while the bucket was down');
    assert.equal(d.actions.some((x) => x.partition === nb), false);
    w.member('b', 11_200);
    assert.equal(w.o.members.get('b')!.liveSince, 0, 'still settled: no new SETTLE_MS wait');
    // b really died during the outage: it is judged from 11 s on
    w.beat(['a', 'c'], 12_000, 17_000);
    assert.equal(w.decide('a', 15_900).actions.some((x) => x.partition === nb && x.type === 'claim'), false);
    const later = w.decide('a', 16_200);
    if (later.preferred[nb] === 'a') assert.deepEqual(later.actions.find((x) => x.partition === nb), { type: 'claim', partition: nb, revision: rev, epoch: 3 });
    else assert.equal(later.preferred[nb], 'c');
  });

  test('a member dead before the watch went silent stays dead after it resumes', async () => {
    const w = new World();
    w.beat(['a', 'b', 'c'], 0, 2_000);
    w.beat(['a', 'b'], 3_000, 9_000); // c crashed at 2 s
    assert.equal(w.decide('a', 9_000).preferred.includes('c'), false);
    w.beat(['a', 'b'], 15_000, 15_000); // silent from 9 s to 15 s
    const d = w.decide('a', 15_000);
    assert.equal(d.preferred.includes('c'), false, 'c is still dead');
    assert.deepEqual(new Set(d.preferred), new Set(['a', 'b']), 'a and b are still alive and settled');
  });

  test('older revisions delivered again (a restarted watch) change nothing', () => {
    const w = new World();
    w.member('a', 0);
    const before = w.o.members.get('a')!;
    assert.equal(observe(w.o, { kind: 'member', id: 'a', info: before.info, revision: before.revision }, 4_000), false);
    assert.equal(w.o.members.get('a')!.changedAt, 0);
  });

  test('ANALYTICS_FOLD=all: every partition is folded everywhere; leases still pick one writer each', () => {
    const w = new World();
    w.beat(['a', 'b'], 0, 2_000);
    const d = w.decide('a', 2_000, new Map(), new Set(), 'all');
    assert.equal(d.standby.size, P);
    assert.deepEqual(of(d.actions, 'claim'), preferredSet('a', ['a', 'b']));
  });
});
