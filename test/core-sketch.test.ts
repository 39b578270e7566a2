import assert from 'node:assert/strict';
import { test } from 'node:test';
import { hash53 } from '../src/core/hash.ts';
import { HyperLogLog } from '../src/core/hyperloglog.ts';
import { metrics } from '../src/core/metrics.ts';
import { sealDay } from '../src/core/sealed-day.ts';
import { AnalyticsState, apply } from '../src/core/state.ts';
import type { StoredEvent } from '../src/core/types.ts';

function visit(day: string, user: string): StoredEvent {
  return {
    t: 'e', p: 'p', ts: Date.parse(`${day}T12:00:00Z`), rt: 0, day, event: 'page_view', url: '/', path: '/',
    referrer: '', source: 'Direct', sessionId: user, user: `u:${user}`, country: 'DE', device: 'desktop', params: {},
  };
}

test('a HyperLogLog estimates distinct counts within 1 % from a thousand to a million', () => {
  for (const n of [1_000, 10_000, 100_000, 1_000_000]) {
    const h = new HyperLogLog();
    for (let i = 0; i < n; i++) h.add(hash53(`user-${i}`));
    const err = Math.abs(h.estimate() - n) / n;
    assert.ok(err < 0.01, `n=${n}: estimate ${h.estimate()} is ${(err * 100).toFixed(2)} % off`);
  }
});

test('merged sketches count the union, not the sum', () => {
  const a = new HyperLogLog();
  const b = new HyperLogLog();
  for (let i = 0; i < 60_000; i++) a.add(hash53(`u${i}`));
  for (let i = 30_000; i < 90_000; i++) b.add(hash53(`u${i}`));
  a.merge(b);
  assert.ok(Math.abs(a.estimate() - 90_000) / 90_000 < 0.01);
});

test('range users are exact for small days and within 1 % once days are sketched, while each day stays exact', () => {
  const state = new AnalyticsState();
  let seq = 0;
  // Three days of 20,000 users each, overlapping by half with the previous day: 40,000 distinct in all.
  const days = ['2026-11-01', '2026-11-02', '2026-11-03'];
  days.forEach((day, d) => {
    for (let i = d * 10_000; i < d * 10_000 + 20_000; i++) apply(state, ++seq, visit(day, `u${i}`));
  });
  const range = metrics(state, 'p', 'UTC', days[0]!, days[2]!);
  assert.ok(Math.abs(range.users - 40_000) / 40_000 < 0.01, `range users ${range.users}`);
  for (const d of range.daily) assert.equal(d.users, 20_000);

  const small = new AnalyticsState();
  days.forEach((day, d) => {
    for (let i = d * 100; i < d * 100 + 200; i++) apply(small, ++seq, visit(day, `u${i}`));
  });
  assert.equal(metrics(small, 'p', 'UTC', days[0]!, days[2]!).users, 400);
});

test('a sketched day whose visits move to an earlier event forgets the visitors they leave: day exact, range and sealed day within 1 %', () => {
  const state = new AnalyticsState();
  let seq = 0;
  const day = '2026-11-01';
  const noon = Date.parse(`${day}T12:00:00Z`);
  // 20,000 anonymous visits; then, for half of them, an earlier event naming a signed-in user (u0..u999): the visit
  // now counts for that user, and its anonymous visitor no longer counts.
  for (let i = 0; i < 20_000; i++) apply(state, ++seq, { ...visit(day, `s${i}`), user: `s:s${i}` });
  for (let i = 0; i < 10_000; i++) apply(state, ++seq, { ...visit(day, `s${i}`), ts: noon - 1000, user: `u:u${i % 1000}` });
  const want = 10_000 + 1_000;
  const m = metrics(state, 'p', 'UTC', day, day);
  assert.deepEqual([m.users, m.sessions], [want, 20_000]);
  const range = metrics(state, 'p', 'UTC', day, '2026-11-02');
  assert.ok(Math.abs(range.users - want) / want < 0.01, `range users ${range.users}, want ${want}`);
  const sealed = sealDay(state.project('p').days.get(day)!);
  assert.ok(sealed.sketch && !sealed.userHashes);
  const est = new HyperLogLog(sealed.sketch).estimate();
  assert.ok(Math.abs(est - want) / want < 0.01, `sealed sketch ${est}, want ${want}`);
  assert.equal(sealed.figures.users, want);
});

test('a range read again after events reach an old day or a new one counts them (remembered merges follow every part)', () => {
  const days = ['2026-11-01', '2026-11-02', '2026-11-03', '2026-11-04', '2026-11-05'];
  const events: StoredEvent[] = [];
  days.forEach((day, d) => {
    for (let i = d * 3_000; i < d * 3_000 + 5_000; i++) events.push(visit(day, `u${i}`));
  });
  const state = new AnalyticsState();
  let seq = 0;
  for (const e of events) apply(state, ++seq, e);
  /** the same range over a state folded afresh from every event so far: nothing remembered applies to its parts */
  const fresh = () => {
    const s = new AnalyticsState();
    events.forEach((e, i) => apply(s, i + 1, e));
    return metrics(s, 'p', 'UTC', days[0]!, days[4]!).users;
  };
  const read = () => metrics(state, 'p', 'UTC', days[0]!, days[4]!).users;
  const before = read();
  assert.equal(read(), before);
  assert.equal(before, fresh());
  // New visitors on the oldest day (a settled part of the range), then on the newest (a recent one).
  for (const [day, from] of [[days[0]!, 50_000], [days[4]!, 60_000]] as const) {
    for (let i = from; i < from + 2_000; i++) {
      const e = visit(day, `u${i}`);
      events.push(e);
      apply(state, ++seq, e);
    }
    const after = read();
    assert.equal(after, fresh());
    assert.ok(after > before + 1_500, `${day}: ${before} -> ${after}`);
  }
});

test('a large day snapshotted keeps its user count and sketch; restored, it wakes without recounting and reads the same', async () => {
  const { daySnapshot } = await import('../src/core/snapshot.ts');
  const { DayAggregate } = await import('../src/core/day-aggregate.ts');
  const { serialize, deserialize } = await import('node:v8');
  const state = new AnalyticsState();
  let seq = 0;
  const day = '2026-11-01';
  for (let i = 0; i < 6_000; i++) apply(state, ++seq, visit(day, `u${i}`));
  const live = state.project('p').days.get(day)!;
  const ds = deserialize(serialize(daySnapshot(live))) as import('../src/core/day-snapshot.ts').DaySnapshot;
  assert.equal(ds.userCount, 6_000);
  assert.ok(ds.sketch instanceof Uint8Array);
  const restored = DayAggregate.restore(ds);
  assert.equal(restored.userCount, 6_000);
  assert.deepEqual(restored.sketch!.registers, live.sketch!.registers);
  // an older snapshot without them restores the same by counting and building
  const { userCount: _c, sketch: _s, ...older } = ds;
  const rebuilt = DayAggregate.restore(older);
  assert.equal(rebuilt.userCount, 6_000);
  assert.deepEqual(rebuilt.sketch!.registers, live.sketch!.registers);
  // a visitor that stops counting drops the live sketch: the snapshot then carries none, and restore builds it
  apply(state, ++seq, { ...visit(day, 'u0'), ts: Date.parse(`${day}T01:00:00Z`), user: 'u:u1' });
  const afterDrop = daySnapshot(live) as import('../src/core/day-snapshot.ts').DaySnapshot;
  assert.equal(afterDrop.userCount, 5_999);
  assert.equal(afterDrop.sketch, undefined);
  assert.equal(DayAggregate.restore(afterDrop).sketch!.estimate(), live.sketch!.estimate());
});

test('an exact range read again after events reach any of its days counts exactly the distinct visitors (remembered unions follow every part)', () => {
  const days = ['2026-11-01', '2026-11-02', '2026-11-03', '2026-11-04', '2026-11-05'];
  const state = new AnalyticsState();
  const users = new Set<string>();
  let seq = 0;
  const send = (day: string, from: number, to: number) => {
    for (let i = from; i < to; i++) {
      apply(state, ++seq, visit(day, `u${i}`));
      users.add(`u${i}`);
    }
  };
  // overlapping visitors: 5 × 600 hashes, 2,000 distinct (well under RANGE_EXACT_HASHES: the exact union)
  days.forEach((day, d) => send(day, d * 350, d * 350 + 600));
  const read = () => metrics(state, 'p', 'UTC', days[0]!, days[4]!).users;
  assert.equal(read(), users.size);
  assert.equal(read(), users.size, 'the remembered count');
  // new visitors on the oldest day (a settled part), a middle day (settled), the newest (recent), and a repeat visitor
  for (const [day, from, to] of [[days[0]!, 10_000, 10_300], [days[2]!, 20_000, 20_010], [days[4]!, 30_000, 30_200], [days[1]!, 0, 5]] as const) {
    send(day, from, to);
    assert.equal(read(), users.size, `after events on ${day}`);
    assert.equal(read(), users.size, `read again after events on ${day}`);
  }
  // a narrower range shares settled parts with the wide one and counts its own
  const narrow = new Set<string>();
  for (let d = 1; d <= 2; d++) for (let i = d * 350; i < d * 350 + 600; i++) narrow.add(`u${i}`);
  for (let i = 20_000; i < 20_010; i++) narrow.add(`u${i}`);
  for (let i = 0; i < 5; i++) narrow.add(`u${i}`);
  assert.equal(metrics(state, 'p', 'UTC', days[1]!, days[2]!).users, narrow.size);
});

test('a range read again after events reach any of its days sums its breakdowns afresh (remembered sums follow every part)', () => {
  const days = ['2026-11-01', '2026-11-02', '2026-11-03', '2026-11-04', '2026-11-05'];
  const state = new AnalyticsState();
  const pages = new Map<string, number>();
  const sources = new Map<string, number>();
  let seq = 0;
  const send = (day: string, n: number, path: string, source: string) => {
    for (let i = 0; i < n; i++) {
      const e = visit(day, `${day}-${path}-${seq}`);
      apply(state, ++seq, { ...e, url: path, path, source });
      pages.set(path, (pages.get(path) ?? 0) + 1);
      sources.set(source, (sources.get(source) ?? 0) + 1);
    }
  };
  days.forEach((day, d) => {
    send(day, 20 + d, '/', 'Direct');
    send(day, 5, `/day-${d}`, 'Google');
  });
  const read = () => metrics(state, 'p', 'UTC', days[0]!, days[4]!);
  const same = (why: string) => {
    for (let r = 0; r < 2; r++) {
      const m = read();
      assert.deepEqual(new Map(Object.entries(m.pages)), pages, `pages ${why}${r ? ', read again' : ''}`);
      assert.deepEqual(new Map(Object.entries(m.trafficSources)), sources, `sources ${why}${r ? ', read again' : ''}`);
    }
  };
  same('at first');
  // the oldest day (settled), a middle day (settled), the newest (recent), a name new to the range on a settled day
  for (const [day, n, path, source] of [[days[0]!, 7, '/', 'Bing'], [days[2]!, 3, '/day-1', 'Direct'], [days[4]!, 11, '/late', 'Google'], [days[1]!, 2, '/new', 'DuckDuckGo']] as const) {
    send(day, n, path, source);
    same(`after events on ${day}`);
  }
  // a narrower range shares no remembered sum with the wide one
  const narrow = metrics(state, 'p', 'UTC', days[3]!, days[4]!);
  assert.equal(narrow.pages['/'], 23 + 24);
  assert.equal(narrow.pages['/late'], 11);
  assert.equal(narrow.pages['/new'], undefined);
});
