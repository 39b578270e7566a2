import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { metrics } from '../src/core/metrics.ts';
import { AnalyticsState, applyOnce, dropProject, rememberedIdCount, storedThisMonth } from '../src/core/state.ts';
import type { StoredEvent } from '../src/core/types.ts';

/**
 * A deleted project's erase marker (cluster mode) is folded with dropProject: from that sequence on, the state must be
 * as if the project's earlier records had never been in the log — the other projects untouched, and a later record of
 * the same id starting from nothing (its remembered eventIds gone too).
 */

const DAYS = ['2026-11-18', '2026-11-19', '2026-11-20'];
const T0 = Date.parse('2026-11-21T00:00:00Z');

const genArb: fc.Arbitrary<Gen> = fc.record({
  p: fc.constantFrom('p_a', 'p_b'),
  day: fc.constantFrom(...DAYS),
  session: fc.integer({ min: 1, max: 6 }),
  path: fc.constantFrom('/', '/pricing', '/docs'),
  id: fc.option(fc.constantFrom('e1', 'e2', 'e3'), { nil: undefined }),
});

interface Gen {
  p: string;
  day: string;
  session: number;
  path: string;
  id: string | undefined;
}

function record(g: Gen, i: number): StoredEvent {
  return {
    t: 'e',
    p: g.p,
    ts: Date.parse(`${g.day}T00:00:00Z`) + i * 1000,
    rt: T0 + i * 60_000,
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
  };
}

function answers(state: AnalyticsState): unknown {
  return ['p_a', 'p_b'].map((p) => ({ m: metrics(state, p, 'UTC', DAYS[0]!, DAYS[2]!), month: storedThisMonth(state, p, T0), ids: [...(state.projects.get(p)?.eventIds ?? new Map())] }));
}

describe('dropProject (a folded erase marker)', () => {
  test('folding an erase marker equals a log without the project’s earlier records, and leaves the other project as it was', () => {
    fc.assert(
      fc.property(fc.array(genArb, { minLength: 1, maxLength: 60 }), fc.nat(), (gens, cut) => {
        const records = gens.map(record);
        const at = cut % (records.length + 1);
        // the log with the marker at `at`
        const erased = new AnalyticsState();
        records.slice(0, at).forEach((r, i) => applyOnce(erased, i + 1, r));
        const before = answers(erased) as Array<{ m: unknown }>;
        dropProject(erased, 'p_a');
        assert.equal(erased.projects.has('p_a'), false);
        assert.deepEqual((answers(erased) as Array<{ m: unknown }>)[1], before[1], 'p_b is untouched by the drop');
        records.slice(at).forEach((r, i) => applyOnce(erased, at + i + 1, r));
        // the same log with p_a's records before the marker removed
        const plain = new AnalyticsState();
        records.forEach((r, i) => {
          if (i < at && r.p === 'p_a') return;
          applyOnce(plain, i + 1, r);
        });
        assert.deepEqual(answers(erased), answers(plain));
      }),
      { numRuns: 200 },
    );
  });

  test('the drop takes days, ring, realtime, monthly count, eventIds and queued seal requests of that project only', () => {
    const s = new AnalyticsState();
    const g = { p: 'p_a', day: DAYS[0]!, session: 1, path: '/', id: 'e1' as string | undefined };
    // stamped when received: live traffic, so both projects hold realtime minutes
    applyOnce(s, 1, { ...record(g, 0), ts: T0 });
    applyOnce(s, 2, { ...record({ ...g, p: 'p_b' }, 1), ts: T0 + 60_000 });
    s.sealQueue.push({ projectId: 'p_a', day: s.projects.get('p_a')!.days.get(DAYS[0]!)! }, { projectId: 'p_b', day: s.projects.get('p_b')!.days.get(DAYS[0]!)! });
    assert.equal(rememberedIdCount(s), 2);
    assert.equal(s.realtimeHeld.size, 2);
    assert.equal(dropProject(s, 'p_a'), true);
    assert.deepEqual([...s.projects.keys()], ['p_b']);
    assert.equal(rememberedIdCount(s), 1);
    assert.equal(s.realtimeHeld.size, 1);
    assert.deepEqual(s.sealQueue.map((r) => r.projectId), ['p_b']);
    assert.equal(dropProject(s, 'p_a'), false, 'dropping again finds nothing');
    // the same id later starts from nothing: its old eventId counts again
    assert.equal(applyOnce(s, 3, record(g, 2)), true);
    assert.equal(storedThisMonth(s, 'p_a', T0), 1);
  });
});
