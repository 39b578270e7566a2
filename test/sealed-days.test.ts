import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { deserialize, serialize } from 'node:v8';
import fc from 'fast-check';
import { metrics } from '../src/core/metrics.ts';
import { sealedSource } from '../src/core/sealed-source.ts';
import { fromSnapshot, toSnapshot } from '../src/core/snapshot.ts';
import { AnalyticsState, apply, collectSealable } from '../src/core/state.ts';
import type { StoredEvent } from '../src/core/types.ts';
import { Sealer } from '../src/engine/sealer.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';
import { referenceMetrics } from './reference-model.ts';

/**
 * Days are sealed (written to LMDB, dropped from the heap) while events keep arriving over 100 days of receive
 * time, with snapshots and restarts at random points: every range, live, sealed or both, must equal a naive
 * recomputation from the events.
 */

const DAY_MS = 86_400_000;
const START = Date.parse('2026-01-01T00:00:00Z');
const SPAN_DAYS = 100;
const dayOf = (ms: number) => new Date(ms).toISOString().slice(0, 10);
const LAST_DAY = dayOf(START + (SPAN_DAYS - 1) * DAY_MS);

const dir = mkdtempSync(path.join(tmpdir(), 'analytics-sealed-'));
const store = LogStore.open(dir, 'commit');
const sealedStore = store.openSealedStore();
const sealed = sealedSource(sealedStore);
after(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

let run = 0;

const eventArb = (projects: string[]) =>
  fc
    .record({
      p: fc.constantFrom(...projects),
      day: fc.integer({ min: 0, max: SPAN_DAYS - 1 }),
      at: fc.integer({ min: 0, max: DAY_MS - 1 }),
      delay: fc.integer({ min: 0, max: 3 * DAY_MS }),
      event: fc.constantFrom('page_view', 'page_view', 'signup'),
      path: fc.constantFrom('/', '/a', '/b'),
      source: fc.constantFrom('Direct', 'Google'),
      session: fc.integer({ min: 1, max: 8 }),
      user: fc.option(fc.integer({ min: 1, max: 5 }), { nil: undefined }),
      country: fc.constantFrom('DE', 'US'),
    })
    .map((r): StoredEvent => {
      const ts = START + r.day * DAY_MS + r.at;
      const sessionId = `s${r.session}`;
      return {
        t: 'e', p: r.p, ts, rt: ts + r.delay, day: dayOf(ts), event: r.event, url: `https://x.example${r.path}`, path: r.path,
        referrer: '', source: r.source, sessionId, user: r.user !== undefined ? `u:${r.user}` : `s:${sessionId}`,
        country: r.country, device: 'desktop', params: {},
      };
    });

const RANGES: Array<[string, string]> = [
  ['2026-01-01', LAST_DAY],
  ['2026-01-01', '2026-01-31'],
  ['2026-02-01', '2026-03-31'],
  ['2026-01-20', '2026-02-10'],
  ['2026-03-15', LAST_DAY],
  ['2026-01-05', '2026-01-05'],
  ['2026-02-28', '2026-03-01'],
];

test('a fold that seals days at random points, with snapshots and restarts between, equals a naive recomputation', async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(fc.nat(), { minLength: 1, maxLength: 1 }).chain(() => {
      run++;
      const projects = [`p_${run}_a`, `p_${run}_b`];
      return fc.tuple(fc.constant(projects), fc.array(eventArb(projects), { minLength: 1, maxLength: 250 }), fc.array(fc.nat(), { maxLength: 4 }));
    }), async ([projects, unsorted, cuts]) => {
      // The log is in receive order.
      const events = [...unsorted].sort((a, b) => a.rt - b.rt);
      const restartAt = new Set(cuts.map((c) => c % events.length));
      let state = new AnalyticsState();
      let sealer = new Sealer(state, sealedStore, () => {});
      for (let i = 0; i < events.length; i++) {
        apply(state, i + 1, events[i]!);
        if (restartAt.has(i)) {
          await sealer.idle();
          sealer.kick();
          // A snapshot through v8 (as the files store it), a restart from it: the sealed store stays.
          state = fromSnapshot(deserialize(serialize(toSnapshot(state))));
          collectSealable(state);
          sealer = new Sealer(state, sealedStore, () => {});
          sealer.kick();
        }
      }
      sealer.kick();
      await sealer.idle();
      const live = projects.reduce((n, p) => n + (state.projects.get(p)?.days.size ?? 0), 0);
      const all = new Set(events.map((e) => `${e.p} ${e.day}`)).size;
      if (events.at(-1)!.rt - events[0]!.rt > 40 * DAY_MS) assert.ok(live < all, `some days were sealed (${live} live of ${all})`);
      for (const p of projects) {
        for (const [from, to] of RANGES) {
          const got = metrics(state, p, 'UTC', from, to, { sealed });
          const { projectId, from: f, to: t, timezone, daily, bots, ...figures } = got;
          assert.deepEqual(figures, referenceMetrics(events, p, from, to), `${p} ${from}..${to}`);
          for (const d of daily) {
            const want = referenceMetrics(events, p, d.date, d.date);
            assert.deepEqual([d.users, d.sessions, d.pageviews, d.bounceRate], [want.users, want.sessions, want.pageviews, want.bounceRate], d.date);
          }
        }
      }
    }),
    { numRuns: 40 },
  );
});

test('a project idle for months holds no live days, and a 12-month read merges month rollups', async () => {
  const state = new AnalyticsState();
  const sealer = new Sealer(state, sealedStore, () => {});
  let seq = 0;
  const events: StoredEvent[] = [];
  for (let d = 0; d < 400; d++) {
    const ts = START + d * DAY_MS + 3_600_000;
    for (let k = 0; k < 3; k++) {
      events.push({
        t: 'e', p: 'p_year', ts, rt: ts + 1000, day: dayOf(ts), event: 'page_view', url: '/', path: '/', referrer: '', source: 'Direct',
        sessionId: `s${d}-${k}`, user: `s:s${d}-${k}`, country: 'DE', device: 'desktop', params: {},
      });
    }
  }
  for (const e of events) {
    apply(state, ++seq, e);
    sealer.kick();
    await sealer.idle();
  }
  // Another project's traffic moves the sealing clock on; p_year, idle, keeps only its last ~34 days live.
  const later = START + 440 * DAY_MS;
  apply(state, ++seq, { ...events[0]!, p: 'p_other', ts: later, rt: later, day: dayOf(later) });
  sealer.kick();
  await sealer.idle();
  assert.equal(state.projects.get('p_year')!.days.size, 0);
  for (const month of ['2026-01', '2026-06', '2026-12']) assert.ok(sealedStore.hasMonth('p_year', month), month);
  const from = '2026-01-01';
  const to = '2026-12-31';
  const parts = sealed.parts('p_year', from, to, new Map());
  assert.equal(parts.length, 12, 'one rollup per month');
  const m = metrics(state, 'p_year', 'UTC', from, to, { sealed });
  assert.deepEqual(m, { ...m, users: 365 * 3, sessions: 365 * 3, pageviews: 365 * 3 });
  assert.equal(m.daily.length, 365);
  assert.ok(m.daily.every((d) => d.sessions === 3));
});
