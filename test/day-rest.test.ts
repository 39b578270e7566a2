import assert from 'node:assert/strict';
import { closeSync, existsSync, mkdtempSync, openSync, readSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { rng as random } from '../bench/lib/seeded-random.ts';
import { DayAggregate } from '../src/core/day-aggregate.ts';
import { FULL_WALK_PASSES, MAX_OLDER_IDLE_PASSES, OLDER_IDLE_PASSES, RECENT_IDLE_PASSES, REWAKE_PASSES, RestWatch } from '../src/core/day-rest.ts';
import { EXACT_USERS_PER_DAY } from '../src/core/limits.ts';
import { metrics } from '../src/core/metrics.ts';
import { sealDay, type SealedDay } from '../src/core/sealed-day.ts';
import { fromSnapshot } from '../src/core/snapshot.ts';
import { AnalyticsState, apply } from '../src/core/state.ts';
import type { StoredEvent } from '../src/core/types.ts';
import { DayRest, sleepDay } from '../src/engine/day-rest.ts';
import { Snapshotter } from '../src/engine/snapshotter.ts';
import { SnapshotFiles } from '../src/store/files/snapshot-files.ts';

/**
 * Live days nobody writes to go back to sleep (engine/day-rest.ts): held as their snapshot bytes, read through their
 * sealed form without waking, sealed from it, woken by the next event. Every answer must be the one the awake day
 * gives, and the fold must continue from a slept day as if it had never slept.
 */

const SMALL_DAYS = ['2026-11-10', '2026-11-11', '2026-11-12'];
/** A day past EXACT_USERS_PER_DAY: read through its sketch. */
const BIG_DAY = '2026-11-13';
const RT = Date.parse('2026-11-21T10:00:00Z');
const TRACKED = ['plan'];

function event(day: string, session: string, user: string, minute: number, i: number, rnd: () => number): StoredEvent {
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(rnd() * xs.length)]!;
  const kind = pick(['page_view', 'page_view', 'page_view', 'signup', 'purchase']);
  const p = `/p${Math.floor(rnd() * 30)}`;
  return {
    t: 'e', p: 'p_a', ts: Date.parse(`${day}T00:00:00Z`) + minute * 60_000, rt: RT + i, day, event: kind,
    url: `https://site.example${p}`, path: p, referrer: '', source: pick(['Direct', 'Google', 'a.example', 'b.example']),
    sessionId: session, user, country: pick(['DE', 'US', 'FR']), device: pick(['desktop', 'mobile']),
    params: (kind === 'purchase' ? { value: Math.round(rnd() * 10_000) / 100, currency: pick(['EUR', 'usd']) } : {}) as StoredEvent['params'],
    ...(rnd() < 0.5 ? { browser: pick(['Chrome', 'Firefox']) } : {}),
    ...(rnd() < 0.3 ? { props: { plan: pick(['free', 'pro']) } } : {}),
  };
}

/**
 * Small days of a few hundred visits and one large day; some visits get an event stamped before their first from
 * another visitor, so that visitor stops counting (and the large day's sketch is dropped and rebuilt).
 */
function events(): StoredEvent[] {
  const rnd = random(7);
  const out: StoredEvent[] = [];
  let i = 0;
  for (const day of SMALL_DAYS) {
    for (let v = 0; v < 300; v++) {
      const n = 1 + Math.floor(rnd() * 3);
      for (let k = 0; k < n; k++) out.push(event(day, `${day}-s${v}`, `u${Math.floor(rnd() * 250)}`, 600 + v + k, i++, rnd));
    }
  }
  for (let v = 0; v < 2 * EXACT_USERS_PER_DAY + 1_500; v++) out.push(event(BIG_DAY, `big-s${v}`, `bu${v}`, 600 + (v % 600), i++, rnd));
  // shuffle, so every day takes events in both halves of the fold
  for (let j = out.length - 1; j > 0; j--) {
    const k = Math.floor(rnd() * (j + 1));
    [out[j], out[k]] = [out[k]!, out[j]!];
  }
  // visits whose visitor moves: an earlier event of the same session from someone else, at the end of the log
  for (const day of [...SMALL_DAYS, BIG_DAY]) {
    const prefix = day === BIG_DAY ? 'big-s' : `${day}-s`;
    for (let v = 0; v < 20; v++) out.push({ ...event(day, `${prefix}${v}`, `mover${v}`, 1, i, rnd), rt: RT + i++ });
  }
  return out;
}

function fold(evs: readonly StoredEvent[], state = new AnalyticsState(), from = 0, to = evs.length): AnalyticsState {
  for (let i = from; i < to; i++) apply(state, i + 1, evs[i]!);
  return state;
}

const RANGES: Array<[string, string]> = [...SMALL_DAYS, BIG_DAY].map((d) => [d, d] as [string, string]).concat([[SMALL_DAYS[0]!, BIG_DAY], [SMALL_DAYS[1]!, SMALL_DAYS[2]!]]);

function answers(state: AnalyticsState): unknown[] {
  return RANGES.map(([from, to]) => metrics(state, 'p_a', 'UTC', from, to, { trackedProps: TRACKED, compare: { from: SMALL_DAYS[0]!, to: SMALL_DAYS[0]! } }));
}

function days(state: AnalyticsState): DayAggregate[] {
  return [...state.project('p_a').days.values()];
}

/** A sealed form with its hashes in a fixed order (a table's order is not part of the form). */
function comparable(s: SealedDay): unknown {
  return { ...s, userHashes: s.userHashes ? [...s.userHashes].sort((a, b) => a - b) : undefined, sketch: s.sketch ? [...s.sketch] : undefined };
}

describe('live days put back to sleep', () => {
  const evs = events();
  const half = Math.floor(evs.length / 2);

  test('a slept day answers every read as awake and wakes for none, seals to the same form, and the fold goes on from it', () => {
    const awake = fold(evs, new AnalyticsState(), 0, half);
    const slept = fold(evs, new AnalyticsState(), 0, half);
    for (const d of days(slept)) sleepDay(d);
    assert.ok(days(slept).every((d) => d.isAsleep));
    assert.ok(days(awake).some((d) => d.userCount > EXACT_USERS_PER_DAY), 'a day is read through its sketch');
    assert.deepEqual(answers(slept), answers(awake));
    assert.ok(days(slept).every((d) => d.isAsleep), 'reads wake nothing');
    for (const d of days(awake)) {
      const twin = slept.project('p_a').days.get(d.day)!;
      assert.deepEqual(comparable(sealDay(twin)), comparable(sealDay(d)), `${d.day} seals the same asleep`);
      assert.equal(twin.userCount, d.userCount);
      assert.equal(twin.pageviews, d.pageviews);
    }
    assert.ok(days(slept).every((d) => d.isAsleep), 'sealing wakes nothing');

    // The rest of the log: every day wakes for its next event and ends as the whole fold.
    fold(evs, slept, half);
    const whole = fold(evs);
    assert.ok(days(slept).every((d) => !d.isAsleep));
    assert.deepEqual(answers(slept), answers(whole));
    for (const d of days(whole)) assert.deepEqual(comparable(sealDay(slept.project('p_a').days.get(d.day)!)), comparable(sealDay(d)));
  });

  test('a slept day is written to the snapshot as its bytes and restores to the same answers; it sleeps again after it wakes', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'day-rest-'));
    try {
      const state = fold(evs, new AnalyticsState(), 0, half);
      const files = new SnapshotFiles(dir);
      const snapshotter = new Snapshotter(state, files);
      await snapshotter.write(); // the writer holds every day awake
      for (const d of days(state)) sleepDay(d);
      fold(evs, state, half, half + 50); // a few days wake
      for (const d of days(state)) if (!d.isAsleep) sleepDay(d);
      await snapshotter.write();
      const expected = answers(state);
      await snapshotter.close();
      const restored = fromSnapshot(new SnapshotFiles(dir).loadNewest(state.lastSeq, (f, why) => assert.fail(`${f}: ${why}`))!);
      assert.deepEqual(answers(restored), expected);
      fold(evs, restored, half + 50);
      assert.deepEqual(answers(restored), answers(fold(evs)));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a slept day moves onto the snapshot file once written (its bytes leave memory), then onto each newer file; it answers, wakes and restores the same', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'day-rest-'));
    try {
      const state = fold(evs, new AnalyticsState(), 0, half);
      const expected = answers(fold(evs, new AnalyticsState(), 0, half));
      const files = new SnapshotFiles(dir);
      const snapshotter = new Snapshotter(state, files);
      await snapshotter.write();
      for (const d of days(state)) sleepDay(d);
      assert.ok(days(state).every((d) => d.storedAt() === undefined), 'put to sleep on bytes in memory');
      const inMemory = days(state).map((d) => d.storedBytes()!);
      await snapshotter.write();
      const first = files.newestFile();
      assert.equal(snapshotter.rehomed, days(state).length);
      assert.ok(inMemory.every((b) => b.byteLength === 0), 'the bytes in memory are freed at once (detached)');
      assert.ok(days(state).every((d) => d.isAsleep && d.storedAt()?.file === first), 'every day sleeps on the file just written');
      assert.deepEqual(answers(state), expected);

      // Each write moves them onto the newest file, so an older one can close; the first is pruned by the third. (A
      // clock record moves the sequence, which names the file, and touches no day.)
      const tick = () => apply(state, state.lastSeq + 1, { t: 'k', rt: RT });
      tick();
      await snapshotter.write();
      const second = files.newestFile();
      assert.notEqual(second, first);
      assert.ok(days(state).every((d) => d.storedAt()?.file === second));
      tick();
      await snapshotter.write();
      assert.ok(!existsSync(first!), 'the first file is pruned');
      assert.deepEqual(answers(state), expected);

      // A writer that holds nothing (another SnapshotFiles, as after its thread died) copies them from their file.
      await snapshotter.close();
      const files2 = new SnapshotFiles(dir);
      const again = new Snapshotter(state, files2);
      await again.write();
      await again.close();
      const restored = fromSnapshot(new SnapshotFiles(dir).loadNewest(state.lastSeq, (f, why) => assert.fail(`${f}: ${why}`))!);
      assert.deepEqual(answers(restored), expected);

      // The rest of the log wakes every day from its file and ends as the whole fold.
      fold(evs, state, half);
      assert.ok(days(state).every((d) => !d.isAsleep));
      assert.deepEqual(answers(state), answers(fold(evs)));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a day asleep on a file this process wrote names the file when its bytes changed on disk', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'day-rest-'));
    try {
      const state = fold(evs, new AnalyticsState(), 0, half);
      const files = new SnapshotFiles(dir);
      const snapshotter = new Snapshotter(state, files);
      for (const d of days(state)) sleepDay(d);
      await snapshotter.write();
      await snapshotter.close();
      const d = days(state)[0]!;
      const at = d.storedAt()!;
      // the same bytes written back over themselves with one flipped: the size stays, the CRC-32 does not match
      const fd = openSync(at.file, 'r+');
      const b = Buffer.alloc(1);
      readSync(fd, b, 0, 1, at.at + 10);
      b[0]! ^= 0xff;
      writeSync(fd, b, 0, 1, at.at + 10);
      closeSync(fd);
      assert.throws(() => d.storedDay!.bytes, (err: Error) => err.message.includes(at.file) && /changed on disk/.test(err.message));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a pass puts to sleep the days idle for a pass, the two newest dates only after RECENT_IDLE_PASSES, and a write starts the count again', () => {
    const state = new AnalyticsState();
    const rnd = random(3);
    let seq = 0;
    const add = (day: string) => apply(state, ++seq, event(day, `${day}-s${seq}`, `u${seq}`, 60, seq, rnd));
    for (const day of ['2026-11-10', '2026-11-20', '2026-11-21']) add(day); // the clock (rt) is 2026-11-21
    const watch = new RestWatch();
    let calls = 0;
    const due = () => {
      calls++;
      return watch.due(state).map(([d]) => d.day);
    };
    assert.deepEqual(due(), [], 'first sight: nothing is idle yet');
    for (let n = 1; n < OLDER_IDLE_PASSES; n++) assert.deepEqual(due(), []);
    assert.deepEqual(due(), ['2026-11-10']);
    add('2026-11-10');
    assert.deepEqual(due(), [], 'written since: idle again from here');
    for (let n = 1; n < OLDER_IDLE_PASSES; n++) due();
    assert.deepEqual(due(), ['2026-11-10']);
    let recent: string[] = [];
    while (recent.length === 0 && calls < RECENT_IDLE_PASSES + 10) recent = due().filter((d) => d !== '2026-11-10');
    // seen first by the first pass, unchanged since: due on the pass RECENT_IDLE_PASSES after it
    assert.equal(calls, RECENT_IDLE_PASSES + 1, 'the newest dates wait RECENT_IDLE_PASSES');
    assert.deepEqual(recent, ['2026-11-20', '2026-11-21']);
  });

  test('an older day woken soon after it slept needs twice the passes next time, up to a bound; one that slept long starts again', () => {
    const state = new AnalyticsState();
    const rnd = random(5);
    let seq = 0;
    const add = (day: string) => apply(state, ++seq, event(day, `${day}-s${seq}`, `u${seq}`, 60, seq, rnd));
    add('2026-11-21'); // the clock
    add('2026-11-10');
    const d = state.projects.get('p_a')!.days.get('2026-11-10')!;
    const watch = new RestWatch();
    /** passes until the day is due, putting it to sleep then (as the engine does) */
    const passesToSleep = (): number => {
      for (let n = 1; n <= MAX_OLDER_IDLE_PASSES + 2; n++) {
        const due = watch.due(state);
        if (due.some(([x]) => x === d)) {
          sleepDay(d);
          return n;
        }
      }
      return -1;
    };
    // first sight, then OLDER_IDLE_PASSES unchanged
    assert.equal(passesToSleep(), OLDER_IDLE_PASSES + 1);
    const needs: number[] = [];
    for (let k = 0; k < 7; k++) {
      add('2026-11-10'); // woken at once
      assert.ok(!d.isAsleep);
      needs.push(passesToSleep() - 1);
    }
    const want: number[] = [];
    for (let n = OLDER_IDLE_PASSES; want.length < 7; ) want.push((n = Math.min(n * 2, MAX_OLDER_IDLE_PASSES)));
    assert.deepEqual(needs, want, 'each wake soon after sleeping doubles the need, up to MAX_OLDER_IDLE_PASSES');
    for (let n = 0; n < REWAKE_PASSES + 1; n++) watch.due(state); // asleep for longer than REWAKE_PASSES
    add('2026-11-10');
    assert.equal(passesToSleep() - 1, OLDER_IDLE_PASSES, 'a wake long after it slept: back to OLDER_IDLE_PASSES');
    assert.equal(watch.need(d), OLDER_IDLE_PASSES);
  });

  test('a pass looks at the days the state lists as woken; every FULL_WALK_PASSES passes it walks every day', () => {
    const state = new AnalyticsState();
    const rnd = random(9);
    apply(state, 1, event('2026-11-21', 's1', 'u1', 60, 1, rnd));
    apply(state, 2, event('2026-11-10', 's2', 'u2', 60, 2, rnd));
    assert.equal(state.woken.size, 2, 'the records created two days');
    const watch = new RestWatch();
    watch.due(state);
    assert.equal(state.woken.size, 0, 'a pass takes them');
    // a day awake that no record of this state woke (put in place directly, as a restore of an older snapshot form does)
    const other = new AnalyticsState();
    apply(other, 3, event('2026-11-09', 's3', 'u3', 60, 3, rnd));
    const hidden = other.projects.get('p_a')!.days.get('2026-11-09')!;
    state.projects.get('p_a')!.days.set('2026-11-09', hidden);
    let foundAt = -1;
    for (let n = 2; n <= FULL_WALK_PASSES + OLDER_IDLE_PASSES + 2 && foundAt < 0; n++) {
      if (watch.due(state).some(([x]) => x === hidden)) foundAt = n;
    }
    assert.equal(foundAt, FULL_WALK_PASSES + 1 + OLDER_IDLE_PASSES, 'found by the full walk, then idle for OLDER_IDLE_PASSES');
  });

  test('a list of woken days past its bound gives way to one walk of every day', () => {
    const state = new AnalyticsState();
    const rnd = random(11);
    const watch = new RestWatch();
    watch.due(state); // the first pass (a walk of nothing)
    for (let i = 0; i < 20_000; i++) apply(state, i + 1, { ...event('2026-11-10', `s${i}`, `u${i}`, 60, i, rnd), p: `p${i}` });
    assert.ok(state.wokenOverflow && state.woken.size < 20_000, 'the list stops growing and asks for a walk');
    let due = 0;
    for (let n = 0; n <= OLDER_IDLE_PASSES; n++) due += watch.due(state).length;
    assert.equal(due, 20_000, 'the walk watched every day, the list lost some');
    assert.equal(state.wokenOverflow, false);
  });

  test('the engine pass sleeps what is due, in slices, and leaves every answer as it was', async () => {
    const state = fold(evs);
    const before = answers(state);
    const rest = new DayRest(() => state);
    assert.equal(await rest.pass(), 0);
    for (let n = 1; n < OLDER_IDLE_PASSES; n++) await rest.pass();
    // the clock's date is 2026-11-21: every day here is older than its two newest dates
    assert.equal(await rest.pass(), days(state).length);
    assert.ok(days(state).every((d) => d.isAsleep));
    assert.equal(rest.slept, days(state).length);
    assert.deepEqual(answers(state), before);
  });
});
