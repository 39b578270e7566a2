import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { deserialize } from 'node:v8';
import fc from 'fast-check';
import { DEDUP_WINDOW_MS } from '../src/core/limits.ts';
import { metrics } from '../src/core/metrics.ts';
import { fromSnapshot, toSnapshot, type DaySnapshot, type SnapshotData } from '../src/core/snapshot.ts';
import { AnalyticsState, apply, applyOnce, pruneEventIds, rememberedIdCount } from '../src/core/state.ts';
import type { StoredEvent } from '../src/core/types.ts';
import { SnapshotFiles } from '../src/store/files/snapshot-files.ts';

/**
 * Cluster mode folds every copy of an event that reached the stream (a client retry through another node, a replay):
 * applyOnce must count an eventId once per 48 h by the records' own receive times, whatever order and snapshot point.
 */

const DAYS = ['2026-11-18', '2026-11-19', '2026-11-20'];
const T0 = Date.parse('2026-11-21T00:00:00Z');
const HOUR = 3_600_000;

interface Gen {
  p: string;
  day: string;
  session: number;
  path: string;
  id: string | undefined;
  /** hours after T0: spread past the 48 h window so ids count again */
  rtHour: number;
}

const genArb: fc.Arbitrary<Gen> = fc.record({
  p: fc.constantFrom('p_a', 'p_b'),
  day: fc.constantFrom(...DAYS),
  session: fc.integer({ min: 1, max: 9 }),
  path: fc.constantFrom('/', '/pricing', '/docs'),
  id: fc.option(fc.constantFrom('e1', 'e2', 'e3', 'e4', 'e5'), { nil: undefined }),
  rtHour: fc.integer({ min: 0, max: 120 }),
});

/** Records in log order: receive times mostly rising, with a little skew between nodes (± 2 h). */
function toRecords(gens: Gen[]): StoredEvent[] {
  const sorted = [...gens].sort((a, b) => a.rtHour - b.rtHour);
  return sorted.map((g, i) => ({
    t: 'e',
    p: g.p,
    ts: Date.parse(`${g.day}T00:00:00Z`) + i * 1000,
    rt: T0 + g.rtHour * HOUR + (i % 3) * 40 * 60_000 - 60 * 60_000,
    day: g.day,
    event: 'page_view',
    url: `https://site.example${g.path}`,
    path: g.path,
    referrer: '',
    source: 'Direct',
    sessionId: `s${g.session}`,
    user: `s:s${g.session}`,
    country: 'DE',
    device: 'desktop',
    params: {},
    ...(g.id !== undefined ? { eventId: g.id } : {}),
  }));
}

/** The contract, written plainly: an id counts unless a counted copy of it is within 48 h of this one. */
function withoutRepeats(records: StoredEvent[]): Array<[number, StoredEvent]> {
  const counted = new Map<string, number>();
  const kept: Array<[number, StoredEvent]> = [];
  records.forEach((r, i) => {
    if (r.eventId !== undefined) {
      const k = `${r.p}\u0000${r.eventId}`;
      const at = counted.get(k);
      if (at !== undefined && Math.abs(r.rt - at) < DEDUP_WINDOW_MS) return;
      counted.set(k, r.rt);
    }
    kept.push([i + 1, r]);
  });
  return kept;
}

/**
 * A day's tables in key order: their snapshot form lists entries in slot order, which a restored table may not keep.
 * A day asleep gives its stored bytes: decoded here.
 */
function inKeyOrder(day: unknown): unknown {
  if (day instanceof Uint8Array) day = deserialize(day);
  if (day === null || typeof day !== 'object' || !('visits' in day)) return day;
  const d = day as DaySnapshot;
  const sorted = <T extends { keys: Float64Array }>(t: T, cols: Array<keyof T>): T => {
    const order = [...t.keys.keys()].sort((a, b) => t.keys[a]! - t.keys[b]!);
    const out = { ...t };
    for (const c of ['keys', ...cols] as Array<keyof T>) {
      const col = t[c] as unknown as Float64Array | Uint32Array;
      (out[c] as unknown) = Array.from(order, (i) => col[i]);
    }
    return out;
  };
  if (d.visitPageviews) {
    const { visitPageviews, ...rest } = d;
    return { ...rest, visits: sorted({ ...d.visits, pageviews: visitPageviews }, ['visitors', 'firsts', 'pageviews']) };
  }
  return { ...d, sessions: sorted(d.sessions!, ['values']), users: sorted(d.users!, ['values']), visits: sorted(d.visits, ['visitors', 'firsts']) };
}

function answers(state: AnalyticsState) {
  const out: unknown[] = [];
  for (const p of ['p_a', 'p_b']) out.push(metrics(state, p, 'UTC', DAYS[0]!, DAYS[2]!));
  const snap = toSnapshot(state);
  for (const p of snap.projects) {
    delete p.ids;
    p.days = p.days.map(inKeyOrder) as typeof p.days;
  }
  return { metrics: out, snapshot: { ...snap, lastSeq: 0 } };
}

const dir = mkdtempSync(path.join(tmpdir(), 'apply-once-'));
after(() => rmSync(dir, { recursive: true, force: true }));

describe('applyOnce (cluster mode reducer)', () => {
  test('folding a log with repeats equals folding it with the repeats removed, pruned on the way or not', () => {
    fc.assert(
      fc.property(fc.array(genArb, { minLength: 1, maxLength: 80 }), fc.array(fc.nat(), { maxLength: 4 }), (gens, prunes) => {
        const records = toRecords(gens);
        const once = new AnalyticsState();
        const pruneAt = new Set(prunes.map((n) => n % records.length));
        records.forEach((r, i) => {
          applyOnce(once, i + 1, r);
          // the engine prunes with its clock, which is at least the newest receive time
          if (pruneAt.has(i)) pruneEventIds(once, r.rt + 5 * HOUR);
        });
        const plain = new AnalyticsState();
        for (const [seq, r] of withoutRepeats(records)) apply(plain, seq, r);
        assert.equal(once.lastSeq, records.length, 'lastSeq moves over skipped records too');
        assert.deepEqual(answers(once), answers(plain));
      }),
      { numRuns: 150 },
    );
  });

  test('a snapshot at any point plus the tail equals the whole fold, through the real snapshot files', async () => {
    const files = new SnapshotFiles(dir);
    try {
      await fc.assert(
        fc.asyncProperty(fc.array(genArb, { minLength: 2, maxLength: 60 }), fc.nat(), async (gens, cutAt) => {
          const records = toRecords(gens);
          const cut = 1 + (cutAt % (records.length - 1));
          const whole = new AnalyticsState();
          records.forEach((r, i) => applyOnce(whole, i + 1, r));
          const first = new AnalyticsState();
          records.slice(0, cut).forEach((r, i) => applyOnce(first, i + 1, r));
          await files.write(toSnapshot(first), { replaceAll: true });
          const loaded: SnapshotData | undefined = files.loadNewest(cut, () => {});
          assert.ok(loaded);
          const restored = fromSnapshot(loaded);
          assert.equal(rememberedIdCount(restored), rememberedIdCount(first), 'the remembered ids ride in the snapshot');
          records.slice(cut).forEach((r, i) => applyOnce(restored, cut + i + 1, r));
          assert.deepEqual(answers(restored), answers(whole));
        }),
        { numRuns: 25 },
      );
    } finally {
      await files.close();
    }
  });

  test('an id counts again once 48 hours have passed, and pruning forgets only ids no later record can repeat', () => {
    const [a] = toRecords([{ p: 'p_a', day: DAYS[0]!, session: 1, path: '/', id: 'x', rtHour: 0 }]);
    const state = new AnalyticsState();
    const at = (h: number) => ({ ...a!, rt: T0 + h * HOUR });
    assert.equal(applyOnce(state, 1, at(0)), true);
    assert.equal(applyOnce(state, 2, at(47.9)), false);
    assert.equal(pruneEventIds(state, T0 + 10 * HOUR), 0, 'young ids stay');
    assert.equal(applyOnce(state, 3, at(48)), true, 'a copy 48 h later counts again');
    assert.equal(applyOnce(state, 4, at(60)), false);
    assert.equal(rememberedIdCount(state), 1);
    // A replay hours behind the clock: maxRt holds the cutoff back.
    assert.equal(pruneEventIds(state, T0 + 500 * HOUR), 0);
    applyOnce(state, 5, { ...at(200), eventId: 'y' });
    assert.equal(pruneEventIds(state, T0 + 500 * HOUR), 1);
    assert.equal(state.lastSeq, 5);
  });
});
