import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { deserialize } from 'node:v8';
import { rng as random } from '../bench/lib/seeded-random.ts';
import { metrics } from '../src/core/metrics.ts';
import { fromSnapshot } from '../src/core/snapshot.ts';
import { AnalyticsState, apply } from '../src/core/state.ts';
import type { StoredEvent } from '../src/core/types.ts';
import { sleepDay } from '../src/engine/day-rest.ts';
import { Snapshotter } from '../src/engine/snapshotter.ts';
import { SnapshotFiles } from '../src/store/files/snapshot-files.ts';

/**
 * The service's snapshots reference unchanged days and rings in earlier files instead of copying them
 * (snapshot-format.ts): a snapshot writes what changed, restores to the same answers, keeps the files it references,
 * copies the frames of a file that has become mostly stale so the file can go, and names a damaged or missing base.
 */

const PROJECTS = Array.from({ length: 12 }, (_, i) => `p_${i}`);
const DAYS = ['2026-11-16', '2026-11-17', '2026-11-18', '2026-11-19', '2026-11-20'];
const RT = Date.parse('2026-11-21T10:00:00Z');

function event(project: string, day: string, i: number, rnd: () => number): StoredEvent {
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(rnd() * xs.length)]!;
  const p = `/p${Math.floor(rnd() * 20)}`;
  return {
    t: 'e', p: project, ts: Date.parse(`${day}T00:00:00Z`) + Math.floor(rnd() * 86_000) * 1000, rt: RT + i, day, event: pick(['page_view', 'page_view', 'signup']),
    url: `https://site.example${p}`, path: p, referrer: '', source: pick(['Direct', 'Google', 'a.example']),
    sessionId: `${project}-${day}-s${Math.floor(rnd() * 200)}`, user: `u${Math.floor(rnd() * 150)}`, country: pick(['DE', 'US']), device: pick(['desktop', 'mobile']),
    params: {} as StoredEvent['params'],
  };
}

/** `per` events on every day of every project, in a shuffled order. */
function events(per: number, seed: number, projects = PROJECTS, days = DAYS): StoredEvent[] {
  const rnd = random(seed);
  const out: StoredEvent[] = [];
  let i = 0;
  for (const p of projects) for (const d of days) for (let k = 0; k < per; k++) out.push(event(p, d, i++, rnd));
  for (let j = out.length - 1; j > 0; j--) {
    const k = Math.floor(rnd() * (j + 1));
    [out[j], out[k]] = [out[k]!, out[j]!];
  }
  return out;
}

function fold(state: AnalyticsState, evs: readonly StoredEvent[]): void {
  for (const e of evs) apply(state, state.lastSeq + 1, e);
}

function answers(state: AnalyticsState): unknown[] {
  return PROJECTS.flatMap((p) => [metrics(state, p, 'UTC', DAYS[0]!, DAYS.at(-1)!, {}), ...DAYS.map((d) => metrics(state, p, 'UTC', d, d, {}))]);
}

/** The headers' `bases` of a file, read the way a restart reads it (the sequences of the files it references). */
function basesOf(file: string): number[] {
  const data = readFileSync(file);
  const length = data.readUInt32LE(8);
  return (deserialize(data.subarray(12, 12 + length)) as { bases?: number[] }).bases ?? [];
}

const seqOf = (file: string) => Number(/(\d{16})\.bin$/.exec(file)![1]);

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'snapshot-deltas-'));
  try {
    await fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A state of every project and day, its first snapshot written (the base), every day asleep on it. */
async function based(dir: string): Promise<{ state: AnalyticsState; files: SnapshotFiles; snapshotter: Snapshotter; first: string }> {
  const state = new AnalyticsState();
  fold(state, events(60, 1));
  const files = new SnapshotFiles(dir, { deltas: true });
  const snapshotter = new Snapshotter(state, files);
  for (const p of state.projects.values()) for (const d of p.days.values()) sleepDay(d);
  await snapshotter.write();
  return { state, files, snapshotter, first: files.newestFile()! };
}

/** Closes the writer, restores the directory's newest snapshot and checks it answers as `state` does. */
async function restoresSame(dir: string, state: AnalyticsState, snapshotter: Snapshotter): Promise<void> {
  const expected = answers(state);
  await snapshotter.close();
  assert.deepEqual(answers(fromSnapshot(new SnapshotFiles(dir).loadNewest(state.lastSeq, (f, why) => assert.fail(`${f}: ${why}`))!)), expected);
}

describe('snapshots that write what changed', () => {
  test('a later snapshot references the unchanged days, is a fraction of the size, keeps its base and restores the same answers (lazily, eagerly and checked aside)', async () => {
    await withDir(async (dir) => {
      const { state, files, snapshotter, first } = await based(dir);
      assert.deepEqual(basesOf(first), [], 'the first file stands alone');
      // one project's newest day takes a few events: only it and that project's ring change
      for (let round = 0; round < 4; round++) {
        fold(state, events(5, 10 + round, ['p_3'], [DAYS.at(-1)!]));
        await snapshotter.write();
        const newest = files.newestFile()!;
        assert.deepEqual(basesOf(newest), [seqOf(first)], `snapshot ${round + 2} references the first`);
        assert.ok(statSync(newest).size * 10 < statSync(first).size, `${statSync(newest).size} bytes against ${statSync(first).size}`);
      }
      assert.ok(existsSync(first), 'the referenced file is kept past the two newest');
      assert.equal(files.files().length, 3, files.files().join(', '));
      // it is no restore point: the log's retention is held back by the two newest only, and a log that ends before
      // them (a backup of an older log) is replayed whole rather than restored onto the base
      assert.equal(files.oldestSeq(), seqOf(files.files()[1]!));
      const ahead: string[] = [];
      assert.equal(new SnapshotFiles(dir).loadNewest(seqOf(first), (f) => ahead.push(path.basename(f))), undefined);
      assert.deepEqual(ahead, files.files().slice(1).reverse());
      const expected = answers(state);
      await snapshotter.close();

      const skip = (f: string, why: string) => assert.fail(`${f}: ${why}`);
      assert.deepEqual(answers(fromSnapshot(new SnapshotFiles(dir).loadNewest(state.lastSeq, skip)!)), expected);
      const aside = new SnapshotFiles(dir);
      aside.prefetchNewest();
      assert.deepEqual(answers(fromSnapshot((await aside.loadNewestChecked(state.lastSeq, skip))!)), expected);
      const inspected = new SnapshotFiles(dir, { inspectOnly: true }).inspect();
      assert.deepEqual(inspected.map((s) => s.problem), [undefined, undefined, undefined]);
      assert.deepEqual(answers(fromSnapshot(inspected.at(-1)!.data!)), expected, 'an eager read resolves the references');

      // a restored state writes on from there: its first snapshot references the file it restored from
      const restored = fromSnapshot(new SnapshotFiles(dir).loadNewest(state.lastSeq, skip)!);
      const files2 = new SnapshotFiles(dir, { deltas: true });
      files2.restoredFrom = files.newestFile();
      const again = new Snapshotter(restored, files2);
      apply(restored, restored.lastSeq + 1, { t: 'k', rt: RT });
      await again.write();
      assert.ok(statSync(files2.newestFile()!).size * 10 < statSync(first).size);
      await again.close();
      assert.deepEqual(answers(fromSnapshot(new SnapshotFiles(dir).loadNewest(restored.lastSeq, skip)!)), expected);
    });
  });

  test('once most of a file is stale its remaining frames are copied, and the file goes', async () => {
    await withDir(async (dir) => {
      const { state, files, snapshotter, first } = await based(dir);
      // every project's last three days change: well over half of the first file is stale
      fold(state, events(20, 20, PROJECTS, DAYS.slice(2)));
      for (const p of state.projects.values()) for (const d of p.days.values()) if (!d.isAsleep) sleepDay(d);
      await snapshotter.write();
      const second = files.newestFile()!;
      assert.deepEqual(basesOf(second), [], 'the unchanged days are copied, not referenced');
      apply(state, state.lastSeq + 1, { t: 'k', rt: RT });
      await snapshotter.write();
      assert.deepEqual(basesOf(files.newestFile()!), [seqOf(second)]);
      assert.ok(!existsSync(first), 'the stale file is pruned');
      await restoresSame(dir, state, snapshotter);
    });
  });

  test('past eight referenced files the smaller ones are merged into the new file at once, and the next snapshots reference it', async () => {
    await withDir(async (dir) => {
      const { state, files, snapshotter } = await based(dir);
      const counts: number[] = [];
      // each round changes one project's newest day: that day and ring stay unchanged after it, so each file is a base
      for (let round = 0; round < 12; round++) {
        fold(state, events(5, 50 + round, [PROJECTS[round]!], [DAYS.at(-1)!]));
        for (const p of state.projects.values()) for (const d of p.days.values()) if (!d.isAsleep) sleepDay(d);
        await snapshotter.write();
        counts.push(basesOf(files.newestFile()!).length);
      }
      // 1, 2, … 8 files referenced, then the ninth merges all but the four largest into the new file
      assert.deepEqual(counts.slice(0, 8), [1, 2, 3, 4, 5, 6, 7, 8]);
      assert.equal(counts[8], 4, counts.join(', '));
      assert.ok(counts.slice(9).every((n) => n <= 8), counts.join(', '));
      assert.ok(files.files().length <= 10, files.files().join(', '));
      // a kept base may reference files pruned since: the check reads it through nothing but its own digest
      const checked = new SnapshotFiles(dir, { inspectOnly: true }).inspect();
      assert.deepEqual(checked.map((c) => c.problem), checked.map(() => undefined), checked.map((c) => c.problem).join('\n'));
      await restoresSame(dir, state, snapshotter);
    });
  });

  test('after an erasure the snapshot stands alone and every other file goes', async () => {
    await withDir(async (dir) => {
      const { state, files, snapshotter } = await based(dir);
      fold(state, events(5, 30, ['p_1'], [DAYS[0]!]));
      await snapshotter.write();
      assert.equal(files.files().length, 2);
      state.projects.delete('p_11');
      await snapshotter.write({ replaceAll: true });
      assert.equal(files.files().length, 1);
      assert.deepEqual(basesOf(files.newestFile()!), []);
      await snapshotter.close();
      const restored = fromSnapshot(new SnapshotFiles(dir).loadNewest(state.lastSeq, (f, why) => assert.fail(`${f}: ${why}`))!);
      assert.equal(restored.projects.has('p_11'), false);
      assert.deepEqual(answers(restored).slice(0, 6 * 11), answers(state).slice(0, 6 * 11));
    });
  });

  test('a damaged or missing base is named, and the newest file is not used', async () => {
    for (const damage of ['byte', 'gone'] as const) {
      await withDir(async (dir) => {
        const { state, files, snapshotter, first } = await based(dir);
        fold(state, events(5, 40, ['p_2'], [DAYS[1]!]));
        await snapshotter.write();
        const newest = files.newestFile()!;
        await snapshotter.close();
        if (damage === 'gone') unlinkSync(first);
        else {
          const bytes = readFileSync(first);
          const at = Math.floor(bytes.length / 2);
          bytes.writeUInt8(bytes.readUInt8(at) ^ 0xff, at);
          writeFileSync(first, bytes);
        }
        const skipped: string[] = [];
        const files2 = new SnapshotFiles(dir);
        files2.prefetchNewest();
        const got = await files2.loadNewestChecked(state.lastSeq, (f, why) => skipped.push(`${path.basename(f)}: ${why}`));
        assert.equal(got, undefined, 'no snapshot is usable: the log is replayed');
        assert.match(skipped[0]!, new RegExp(`^${path.basename(newest)}: .*${path.basename(first)}`), skipped.join('\n'));
        const eager = new SnapshotFiles(dir, { inspectOnly: true }).inspect().find((s) => s.file === newest)!;
        assert.match(eager.problem ?? '', new RegExp(path.basename(first)));
        skipped.length = 0;
        assert.equal(new SnapshotFiles(dir).loadNewest(state.lastSeq, (f, why) => skipped.push(`${path.basename(f)}: ${why}`)), undefined);
        assert.match(skipped[0]!, new RegExp(path.basename(first)), skipped.join('\n'));

      });
    }
  });
});
