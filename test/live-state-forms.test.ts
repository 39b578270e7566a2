// long because the compact live forms, sleeping restores and older snapshot layouts share one event generator and fold.
import assert from 'node:assert/strict';
import { closeSync, fstatSync, mkdtempSync, openSync, readdirSync, readSync, rmSync, utimesSync, writeFileSync, writeSync, mkdirSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { deserialize, serialize } from 'node:v8';
import fc from 'fast-check';
import { CappedCounter } from '../src/core/capped-counter.ts';
import { OTHER_KEY } from '../src/core/limits.ts';
import { metrics } from '../src/core/metrics.ts';
import { NumberCounts, NumberSet } from '../src/core/number-table.ts';
import { RecentRing, type RingEntry } from '../src/core/recent-ring.ts';
import { fromSnapshot, SNAPSHOT_VERSION, toSnapshot, type DaySnapshot, type SnapshotData } from '../src/core/snapshot.ts';
import { AnalyticsState, apply } from '../src/core/state.ts';
import type { StoredEvent } from '../src/core/types.ts';
import { Snapshotter } from '../src/engine/snapshotter.ts';
import { MAX_TRANSFERS, SnapshotFiles, worthTransferring } from '../src/store/files/snapshot-files.ts';
import { frameHeader, MAGIC_V2 } from '../src/store/files/snapshot-format.ts';
import { referenceMetrics } from './reference-model.ts';

/**
 * The compact live forms: a small day keeps its sessions and users as plain arrays and its breakdowns as short flat
 * lists, and takes hash tables and Maps once it grows past them (32 sessions or users, 8 keys a breakdown); a ring
 * keeps its entries as columns of ids into its own string table. Both must answer exactly as the full forms do, through
 * promotion, snapshots and restores at any point.
 */

const DAYS = ['2026-11-19', '2026-11-20'];
const PATHS = Array.from({ length: 24 }, (_, i) => `/p${i}`);
const TRACKED = ['plan'];

/** Wide enough that a day crosses every promotion threshold in some runs and none in others. */
const eventArb: fc.Arbitrary<StoredEvent> = fc
  .record({
    day: fc.constantFrom(...DAYS),
    event: fc.constantFrom('page_view', 'page_view', 'signup', 'click', 'purchase'),
    path: fc.constantFrom(...PATHS),
    source: fc.constantFrom('Direct', 'Google', 'a.example', 'b.example', 'c.example', 'd.example', 'e.example', 'f.example', 'g.example', 'h.example'),
    session: fc.integer({ min: 1, max: 60 }),
    user: fc.option(fc.integer({ min: 0, max: 45 }), { nil: undefined }),
    country: fc.constantFrom('DE', 'US', 'FR', 'Unknown'),
    ts: fc.integer({ min: 0, max: 86_399_999 }),
    browser: fc.option(fc.constantFrom('Chrome', 'Firefox'), { nil: undefined }),
    plan: fc.option(fc.constantFrom('free', 'pro', 'team'), { nil: undefined }),
    cents: fc.option(fc.integer({ min: 1, max: 100_000 }), { nil: undefined }),
    currency: fc.constantFrom('EUR', 'usd', 'GBP'),
    rtMinute: fc.integer({ min: 0, max: 40 }),
  })
  .map((r) => {
    const sessionId = `s${r.session}`;
    return {
      t: 'e',
      p: 'p_a',
      ts: Date.parse(`${r.day}T00:00:00Z`) + r.ts,
      rt: Date.parse('2026-11-21T00:00:00Z') + r.rtMinute * 60_000,
      day: r.day,
      event: r.event,
      url: `https://site.example${r.path}`,
      path: r.path,
      referrer: '',
      source: r.source,
      sessionId,
      user: r.user !== undefined ? `u:${r.user}` : `s:${sessionId}`,
      country: r.country,
      device: 'desktop',
      params: (r.cents === undefined ? {} : { value: r.cents / 100, currency: r.currency }) as StoredEvent['params'],
      ...(r.browser ? { browser: r.browser } : {}),
      ...(r.plan ? { props: { plan: r.plan } } : {}),
    } satisfies StoredEvent;
  });

function fold(events: StoredEvent[], state = new AnalyticsState(), from = 0, to = events.length): AnalyticsState {
  for (let i = from; i < to; i++) apply(state, i + 1, events[i]!);
  return state;
}

function restore(state: AnalyticsState): AnalyticsState {
  return fromSnapshot(deserialize(serialize(toSnapshot(state))) as SnapshotData);
}

const RANGES: Array<[string, string]> = [[DAYS[0]!, DAYS[0]!], [DAYS[1]!, DAYS[1]!], [DAYS[0]!, DAYS[1]!]];

describe('compact live days', () => {
  test('a day folded in its compact form, promoted at a random point, snapshotted and restored, answers like a naive recomputation', () => {
    let crossed = 0;
    fc.assert(
      fc.property(fc.array(eventArb, { maxLength: 260, size: 'max' }), fc.nat(), fc.nat(), (events, a, b) => {
        // Two restarts at random points: before, between or after the promotions.
        const cuts = [a % (events.length + 1), b % (events.length + 1)].sort((x, y) => x - y);
        let state = fold(events, new AnalyticsState(), 0, cuts[0]);
        state = restore(state);
        fold(events, state, cuts[0], cuts[1]);
        state = restore(state);
        fold(events, state, cuts[1]);
        const whole = fold(events);
        for (const d of whole.project('p_a').days.values()) if (d.sessions.size > 32 || d.users.size > 32) crossed++;
        for (const [from, to] of RANGES) {
          const got = metrics(state, 'p_a', 'UTC', from, to, { trackedProps: TRACKED });
          assert.deepEqual(got, metrics(whole, 'p_a', 'UTC', from, to, { trackedProps: TRACKED }));
          const { projectId, from: f, to: t, timezone, daily, bots, ...figures } = got;
          assert.deepEqual(figures, referenceMetrics(events, 'p_a', from, to, TRACKED));
        }
      }),
      { numRuns: 120 },
    );
    assert.ok(crossed > 20, `the runs must cross the promotion threshold often enough to test it (${crossed})`);
  });

  test('a breakdown answers like a Map with the same cap, below, across and past its list form', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 20 }),
        fc.array(fc.tuple(fc.constantFrom(...'abcdefghijklmnopq'.split(''), OTHER_KEY), fc.integer({ min: 1, max: 5 })), { maxLength: 80 }),
        (cap, adds) => {
          const c = new CappedCounter(cap);
          const ref = new Map<string, number>();
          for (const [k, n] of adds) {
            c.add(k, n);
            const had = ref.get(k);
            if (had !== undefined) ref.set(k, had + n);
            else if (ref.size < cap || k === OTHER_KEY) ref.set(k, n);
            else ref.set(OTHER_KEY, (ref.get(OTHER_KEY) ?? 0) + n);
          }
          assert.deepEqual(c.pairs(), [...ref]);
          assert.equal(c.size, ref.size);
          const summed = new Map<string, number>();
          c.sumInto(summed);
          assert.deepEqual([...summed], [...ref]);
          assert.deepEqual([...c.counts], [...ref], 'the Map view has the same keys in the same order');
        },
      ),
    );
  });

  test('hash tables answer like a Map and a Set in both forms, and come back from raw() in the form their size calls for', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.integer({ min: 0, max: 90 }), fc.nat(1000)), { maxLength: 150 }), (ops) => {
        const counts = new NumberCounts();
        const set = new NumberSet();
        const refCounts = new Map<number, number>();
        const refSet = new Set<number>();
        for (const [k0, v] of ops) {
          const k = k0 === 0 ? 0 : k0 * 1_234_567_891.5; // 0 is a key too
          counts.set(k, v);
          refCounts.set(k, v);
          assert.equal(set.add(k), !refSet.has(k));
          refSet.add(k);
        }
        for (const [k] of refCounts) assert.equal(counts.get(k), refCounts.get(k));
        assert.equal(counts.get(7), -1);
        assert.equal(counts.size, refCounts.size);
        assert.equal(set.size, refSet.size);
        const back = NumberCounts.fromRaw(deserialize(serialize(counts.raw())));
        const entries: Array<[number, number]> = [];
        back.forEachEntry((k, v) => entries.push([k, v]));
        assert.deepEqual(entries.sort((x, y) => x[0] - y[0]), [...refCounts].sort((x, y) => x[0] - y[0]));
        const backSet = NumberSet.fromRaw(deserialize(serialize(set.raw())));
        assert.deepEqual([...backSet.toArray()].sort((x, y) => x - y), [...refSet].sort((x, y) => x - y));
        for (const k of refSet) assert.ok(backSet.has(k));
      }),
    );
  });
});

const TEXT = fc.oneof(
  fc.constantFrom('', '/', 'https://shop.example/', 'Direct', 'DE', 'desktop', 'page_view', '2026-11-20'),
  fc.string({ unit: 'grapheme', maxLength: 12 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom('ünïcødé/päth', '日本語のページ', '👩‍👩‍👧‍👦 family', '\u0000nul', 'x'.repeat(2048), '🙂'.repeat(600)),
);

const entryArb: fc.Arbitrary<RingEntry> = fc.record({
  day: fc.constantFrom('2026-11-19', '2026-11-20', '2026-11-21'),
  ts: fc.oneof(fc.integer({ min: 0, max: 2 ** 42 }), fc.double({ noNaN: true, noDefaultInfinity: true })),
  event: fc.oneof(fc.constantFrom('page_view', 'signup'), TEXT),
  url: TEXT,
  referrer: TEXT,
  source: TEXT,
  country: fc.constantFrom('DE', 'US', 'Unknown'),
  device: fc.constantFrom('desktop', 'mobile'),
  sessionId: fc.oneof(fc.constantFrom('s1', 's2', 's3', 'Direct', '/'), TEXT),
}).map((e) => ({ ...e })); // plain objects (fast-check's records have no prototype)

describe('compact recent-event rings', () => {
  test('round trips: entries read back newest first, through eviction, snapshots and further pushes (unicode and long strings)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 12 }), fc.array(entryArb, { maxLength: 60 }), fc.nat(), (capacity, entries, cut) => {
        const k = cut % (entries.length + 1);
        const ring = new RecentRing(capacity);
        const model: RingEntry[] = [];
        const push = (r: RecentRing, e: RingEntry) => {
          r.push({ ...e });
          model.push(e);
          if (model.length > capacity) model.shift();
        };
        for (const e of entries.slice(0, k)) push(ring, e);
        assert.deepEqual([...ring.newestFirst()], [...model].reverse());
        // Through v8 serialization, as the snapshot writer stores it, into a fresh ring; then both go on.
        const restored = new RecentRing(capacity);
        restored.restorePacked(deserialize(serialize(ring.packed())));
        assert.deepEqual([...restored.newestFirst()], [...model].reverse());
        const shadow: RingEntry[] = [...model];
        for (const e of entries.slice(k)) {
          push(restored, e);
          ring.push({ ...e });
          shadow.push(e);
        }
        assert.deepEqual([...restored.newestFirst()], [...model].reverse());
        assert.deepEqual([...ring.newestFirst()], shadow.slice(-capacity).reverse());
        assert.equal(restored.size, Math.min(capacity, entries.length));
        assert.deepEqual(restored.oldestFirst(), model);
      }),
      { numRuns: 300 },
    );
  });

  test('a full ring frees the strings of the entries it overwrites', () => {
    const ring = new RecentRing(1000);
    const base = { day: '2026-11-20', event: 'page_view', referrer: '', source: 'Direct', country: 'DE', device: 'desktop' };
    for (let i = 0; i < 50_000; i++) ring.push({ ...base, ts: i, url: `https://site.example/p${i}`, sessionId: `s${i}` });
    const packed = ring.packed();
    assert.ok(!(packed instanceof Uint8Array));
    const held = packed.strings.filter((s) => s !== undefined).length;
    // 1,000 urls and 1,000 session ids, plus the six shared strings: nothing of the 49,000 overwritten entries.
    assert.equal(held, 2006);
    const newest = [...ring.newestFirst()];
    assert.equal(newest.length, 1000);
    assert.equal(newest[0]!.sessionId, 's49999');
    assert.equal(newest[999]!.url, 'https://site.example/p49000');
  });

  test('a ring in the flat form of snapshot version 3 loads', () => {
    const ring = new RecentRing(4);
    const entries = Array.from({ length: 6 }, (_, i) => ({ day: '2026-11-20', ts: i, event: 'e', url: `/u${i}`, referrer: '', source: 'Direct', country: 'DE', device: 'desktop', sessionId: `s${i % 2}` }));
    ring.pushFlat(entries.flatMap((e) => [e.day, e.ts, e.event, e.url, e.referrer, e.source, e.country, e.device, e.sessionId]));
    assert.deepEqual(ring.oldestFirst(), entries.slice(2));
  });
});

describe('days and rings asleep after a restore', () => {
  test("startup's read ahead checks the file in a thread of its own: intact it restores as a plain read, a changed byte in a day's frame is skipped for the older file", async () => {
    const events = fc.sample(eventArb, { numRuns: 300, seed: 11 }).map((e, i) => ({ ...e, p: i % 2 === 0 ? 'p_b' : 'p_a' }));
    const dir = mkdtempSync(path.join(tmpdir(), 'hashed-aside-'));
    try {
      const files = new SnapshotFiles(dir);
      await files.write(toSnapshot(fold(events, new AnalyticsState(), 0, 100)));
      await files.write(toSnapshot(fold(events, new AnalyticsState(), 0, 200)));
      await files.close();
      const answers = (data: SnapshotData | undefined) => {
        const state = fromSnapshot(data!);
        return ['p_a', 'p_b'].map((p) => metrics(state, p, 'UTC', DAYS[0]!, DAYS.at(-1)!));
      };
      const plain = new SnapshotFiles(dir).loadNewest(200, (f, why) => assert.fail(`${f}: ${why}`));
      const ahead = new SnapshotFiles(dir);
      ahead.prefetchNewest();
      const checked = await ahead.loadNewestChecked(200, (f, why) => assert.fail(`${f}: ${why}`));
      assert.equal(checked?.lastSeq, 200);
      assert.deepEqual(answers(checked), answers(plain));
      // one byte in the middle of the newest file (inside a frame body: its lengths still parse)
      const newest = path.join(dir, 'snapshots', readdirSync(path.join(dir, 'snapshots')).sort().at(-1)!);
      const fd = openSync(newest, 'r+');
      const at = Math.floor(fstatSync(fd).size * 0.6);
      const b = Buffer.alloc(1);
      readSync(fd, b, 0, 1, at);
      b[0] = b[0]! ^ 0x01;
      writeSync(fd, b, 0, 1, at);
      closeSync(fd);
      const skipped: string[] = [];
      const again = new SnapshotFiles(dir);
      again.prefetchNewest();
      const older = await again.loadNewestChecked(200, (f, why) => skipped.push(`${path.basename(f)}: ${why}`));
      assert.deepEqual(skipped, [`${path.basename(newest)}: checksum mismatch`]);
      assert.equal(older?.lastSeq, 100, 'the older file instead');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a state restored from a snapshot file stays asleep until touched, is snapshotted again as it is, and answers like the whole fold', async () => {
    const events = fc.sample(eventArb, { numRuns: 400, seed: 5 }).map((e, i) => ({ ...e, p: i % 3 === 0 ? 'p_b' : 'p_a' }));
    const whole = fold(events);
    const dir = mkdtempSync(path.join(tmpdir(), 'asleep-'));
    try {
      const files = new SnapshotFiles(dir);
      const cut = 250;
      await files.write(toSnapshot(fold(events, new AnalyticsState(), 0, cut)));
      const first = fromSnapshot(files.loadNewest(cut, (f, why) => assert.fail(`${f}: ${why}`))!);
      for (const p of first.projects.values()) for (const d of p.days.values()) assert.ok(d.storedBytes(), 'restored days sleep');
      // A read leaves days asleep (it uses their sealed form); the fold's tables wake a day. Wake one project only:
      // the other stays asleep and is written again from its bytes.
      metrics(first, 'p_a', 'UTC', DAYS[0]!, DAYS[1]!);
      assert.ok([...first.project('p_a').days.values()].every((d) => d.isAsleep), 'a read wakes nothing');
      for (const d of first.project('p_a').days.values()) void d.sessions;
      assert.ok([...first.project('p_a').days.values()].every((d) => d.storedBytes() === undefined));
      assert.ok([...first.project('p_b').days.values()].every((d) => d.storedBytes() !== undefined));
      first.lastSeq = cut + 1; // a new file name (the state is the same)
      await files.write(toSnapshot(first));
      const second = fromSnapshot(files.loadNewest(cut + 1, (f, why) => assert.fail(`${f}: ${why}`))!);
      second.lastSeq = cut;
      fold(events, second, cut);
      await files.close();
      for (const p of ['p_a', 'p_b']) {
        for (const [from, to] of RANGES) {
          const opts = { trackedProps: TRACKED, compare: { from: DAYS[0]!, to: DAYS[0]! } };
          assert.deepEqual(metrics(second, p, 'UTC', from, to, opts), metrics(whole, p, 'UTC', from, to, opts));
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the snapshot writer is sent many small buffers by copy', () => {
  test('a snapshot of thousands of day tables (the largest transferred, the rest copied) restores every project like the whole fold', async () => {
    const buffers = Array.from({ length: MAX_TRANSFERS * 3 }, (_, i) => new ArrayBuffer(1 + ((i * 7919) % 5000)));
    const chosen = worthTransferring([...buffers, buffers[0]!]);
    assert.equal(chosen.length, MAX_TRANSFERS);
    assert.equal(new Set(chosen).size, MAX_TRANSFERS, 'no buffer twice');
    const smallestChosen = Math.min(...chosen.map((b) => b.byteLength));
    assert.ok(buffers.filter((b) => !chosen.includes(b)).every((b) => b.byteLength <= smallestChosen), 'the largest are transferred');

    const events = fc.sample(eventArb, { numRuns: 4_000, seed: 11 }).map((e, i) => ({ ...e, p: `p_${i % 900}` }));
    const whole = fold(events);
    const data = toSnapshot(whole); // ~7,800 buffers the capture made: tables, day bytes, rings
    const dir = mkdtempSync(path.join(tmpdir(), 'many-buffers-'));
    try {
      const files = new SnapshotFiles(dir);
      await files.write(data);
      const restored = fromSnapshot(files.loadNewest(whole.lastSeq, (f, why) => assert.fail(`${f}: ${why}`))!);
      await files.close();
      assert.equal(restored.projects.size, 900);
      for (const p of ['p_0', 'p_450', 'p_899']) {
        for (const [from, to] of RANGES) assert.deepEqual(metrics(restored, p, 'UTC', from, to, { trackedProps: TRACKED }), metrics(whole, p, 'UTC', from, to, { trackedProps: TRACKED }));
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a restored state leaves its days in the snapshot file', () => {
  test('days and rings asleep read their bytes from the held file, also after the file is removed; a file changed on disk fails the read, naming it', async () => {
    const events = fc.sample(eventArb, { numRuns: 300, seed: 17 }).map((e, i) => ({ ...e, p: i % 2 === 0 ? 'p_b' : 'p_a' }));
    const whole = fold(events);
    const dir = mkdtempSync(path.join(tmpdir(), 'held-'));
    try {
      const files = new SnapshotFiles(dir);
      await files.write(toSnapshot(whole));
      await files.close();
      const file = path.join(dir, 'snapshots', readdirSync(path.join(dir, 'snapshots')).find((f) => f.endsWith('.bin'))!);
      const restored = fromSnapshot(new SnapshotFiles(dir, { inspectOnly: true }).loadNewest(whole.lastSeq, (f, why) => assert.fail(`${f}: ${why}`))!);
      const day = [...restored.project('p_a').days.values()][0]!;
      const once = day.storedBytes()!;
      assert.notEqual(day.storedBytes(), once, 'read from the file each time, not held');
      assert.deepEqual(day.storedBytes(), once);
      // Removed (as a newer snapshot prunes it): the open file still serves every day and ring.
      rmSync(file);
      for (const p of ['p_a', 'p_b']) {
        for (const [from, to] of RANGES) assert.deepEqual(metrics(restored, p, 'UTC', from, to, { trackedProps: TRACKED }), metrics(whole, p, 'UTC', from, to, { trackedProps: TRACKED }));
        for (const d of restored.project(p).days.values()) void d.sessions; // wakes
        assert.deepEqual(metrics(restored, p, 'UTC', DAYS[0]!, DAYS[1]!), metrics(whole, p, 'UTC', DAYS[0]!, DAYS[1]!));
      }

      // Another restore, then the file is written by someone else: the next read of a sleeping day names it.
      const again = new SnapshotFiles(dir);
      await again.write(toSnapshot(whole));
      await again.close();
      const file2 = path.join(dir, 'snapshots', readdirSync(path.join(dir, 'snapshots')).find((f) => f.endsWith('.bin'))!);
      const second = fromSnapshot(new SnapshotFiles(dir, { inspectOnly: true }).loadNewest(whole.lastSeq, (f, why) => assert.fail(`${f}: ${why}`))!);
      const later = new Date(Date.now() + 60_000);
      utimesSync(file2, later, later);
      assert.throws(() => [...second.project('p_a').days.values()][0]!.storedBytes(), (err: Error) => err.message.includes(file2) && /changed on disk/.test(err.message));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the snapshot writer holds idle state by place, not by bytes', () => {
  test('asleep days and rings are copied from the file they came from, checked; a byte changed on disk fails that write only, and every restore answers like the whole fold', async () => {
    const events = fc.sample(eventArb, { numRuns: 600, seed: 11 }).map((e, i) => ({ ...e, p: ['p_a', 'p_b', 'p_c'][i % 3]! }));
    const whole = fold(events);
    const dir = mkdtempSync(path.join(tmpdir(), 'by-place-'));
    const expectSame = (state: AnalyticsState, upTo: AnalyticsState) => {
      for (const p of ['p_a', 'p_b', 'p_c']) {
        for (const [from, to] of RANGES) {
          const opts = { trackedProps: TRACKED, compare: { from: DAYS[0]!, to: DAYS[0]! } };
          assert.deepEqual(metrics(state, p, 'UTC', from, to, opts), metrics(upTo, p, 'UTC', from, to, opts));
        }
      }
    };
    const load = (files: SnapshotFiles, seq: number) => fromSnapshot(files.loadNewest(seq, (f, why) => assert.fail(`${f}: ${why}`))!);
    try {
      const cut = 300;
      const first = new SnapshotFiles(dir);
      await new Snapshotter(fold(events, new AnalyticsState(), 0, cut), first).write();
      await first.close();

      // A restart: everything asleep, the writer told where each day and ring is in the restored file.
      const files = new SnapshotFiles(dir);
      const state = load(files, cut);
      const restored = files.restoredFrom!;
      assert.ok(restored, 'the file read lazily is remembered');
      assert.ok([...state.project('p_c').days.values()].every((d) => d.storedAt() !== undefined), 'restored days know their place');
      const snapshotter = new Snapshotter(state, files);
      await snapshotter.prewarm();
      // p_a takes the rest of its events (awake, sent as bytes); p_b and p_c stay asleep (copied from the file).
      const rest = events.map((e, i) => ({ e, seq: i + 1 })).slice(cut);
      for (const { e, seq } of rest) if (e.p === 'p_a') apply(state, seq, e);
      state.lastSeq = cut + 1;
      await snapshotter.write();
      assert.ok([...state.project('p_b').days.values()].every((d) => d.storedBytes() !== undefined), 'p_b still asleep');
      const upTo = fold(events.filter((e, i) => i < cut || e.p === 'p_a'));
      expectSame(load(new SnapshotFiles(dir, { inspectOnly: true }), cut + 1), upTo);

      // A byte of an asleep day changes in the newest file: the next write copying from it fails, naming it...
      const newest = path.join(dir, 'snapshots', files.files().at(-1)!);
      const at = [...load(new SnapshotFiles(dir, { inspectOnly: true }), cut + 1).project('p_c').days.values()][0]!.storedAt()!;
      const fd = openSync(newest, 'r+');
      try {
        const b = Buffer.alloc(1);
        readSync(fd, b, 0, 1, at.at + 2);
        writeSync(fd, Buffer.from([b[0]! ^ 0xff]), 0, 1, at.at + 2);
      } finally {
        closeSync(fd);
      }
      state.lastSeq = cut + 2;
      await assert.rejects(snapshotter.write(), /changed on disk/);
      // ...and the one after it sends the asleep days as bytes: those moved onto the changed file are read from the file
      // they were moved from (the restored one), so it is whole and correct.
      state.lastSeq = cut + 3;
      await snapshotter.write();
      await files.close();
      expectSame(load(new SnapshotFiles(dir, { inspectOnly: true }), cut + 3), upTo);
      // A restart whose first snapshot comes before any warm-up: the capture itself gives the asleep state by place.
      const again = new SnapshotFiles(dir);
      const restarted = load(again, cut + 3);
      restarted.lastSeq = cut + 4;
      await new Snapshotter(restarted, again).write();
      await again.close();
      expectSame(load(new SnapshotFiles(dir, { inspectOnly: true }), cut + 4), upTo);
      const all = load(new SnapshotFiles(dir, { inspectOnly: true }), cut + 4);
      for (const { e, seq } of rest) if (e.p !== 'p_a') apply(all, seq, e);
      expectSame(all, whole);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('older snapshots', () => {
  /**
   * A file in the previous layout (MAGIC ASNAP002, the ring as a flat array in the project frame) still reads; one of
   * a version before visits were kept (3, 4) is refused by fromSnapshot, so startup replays the log (recovery.ts).
   */
  for (const version of [SNAPSHOT_VERSION, 5, 3]) {
    const what = version === 3 ? 'read, then refused (the log is replayed)' : version === 5 ? 'restores (days with their sessions and visitors tables), and the fold goes on from it' : 'restores';
    test(`a snapshot file of the previous layout, version ${version}: ${what}`, () => {
      const events = fc.sample(eventArb, { numRuns: 300, seed: 11 });
      const state = fold(events);
      const data = toSnapshot(state);
      const frames: Buffer[] = [serialize({ version, lastSeq: data.lastSeq, maxRt: data.maxRt, projects: data.projects.length })];
      for (const p of data.projects) {
        const ring = state.project(p.id).recent.oldestFirst();
        const flat = ring.flatMap((e) => [e.day, e.ts, e.event, e.url, e.referrer, e.source, e.country, e.device, e.sessionId]);
        frames.push(serialize({ id: p.id, monthly: p.monthly, realtime: p.realtime, recent: serialize(flat), days: p.days.length }));
        for (const d of p.days) {
          if (version !== 5) frames.push(serialize(d));
          else {
            // version 5 wrote a day's sessions and visitors' visit counts as tables beside its visits
            const { visitPageviews: _, ...rest } = d as DaySnapshot;
            const live = state.project(p.id).days.get((d as DaySnapshot).day)!;
            frames.push(serialize({ ...rest, sessions: live.sessions.raw(), users: live.users.raw() }));
          }
        }
      }
      const dir = mkdtempSync(path.join(tmpdir(), 'old-snapshot-'));
      try {
        mkdirSync(path.join(dir, 'snapshots'));
        const hash = createHash('sha256');
        const parts: Buffer[] = [MAGIC_V2];
        for (const f of frames) {
          const head = frameHeader(f.length);
          hash.update(head).update(f);
          parts.push(head, f);
        }
        parts.push(frameHeader(0), hash.digest());
        writeFileSync(path.join(dir, 'snapshots', `snapshot-${String(data.lastSeq).padStart(16, '0')}.bin`), Buffer.concat(parts));
        const loaded = new SnapshotFiles(dir).loadNewest(data.lastSeq, (f, why) => assert.fail(`${f}: ${why}`));
        assert.ok(loaded);
        if (version === 3) {
          assert.throws(() => fromSnapshot(loaded), /unsupported snapshot version 3/);
          return;
        }
        const restored = fromSnapshot(loaded);
        for (const [from, to] of RANGES) {
          assert.deepEqual(metrics(restored, 'p_a', 'UTC', from, to, { trackedProps: TRACKED }), metrics(state, 'p_a', 'UTC', from, to, { trackedProps: TRACKED }));
        }
        if (version === 5) {
          // more events on both sides: the days woken from the old form count on as the ones that never slept
          const more = fc.sample(eventArb, { numRuns: 200, seed: 12 });
          fold(more, restored, 0, more.length);
          fold(more, state, 0, more.length);
          for (const [from, to] of RANGES) {
            assert.deepEqual(metrics(restored, 'p_a', 'UTC', from, to, { trackedProps: TRACKED }), metrics(state, 'p_a', 'UTC', from, to, { trackedProps: TRACKED }));
          }
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});
