import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { deserialize, serialize } from 'node:v8';
import fc from 'fast-check';
import { metrics } from '../src/core/metrics.ts';
import { fromSnapshot, toSnapshot } from '../src/core/snapshot.ts';
import { AnalyticsState, apply } from '../src/core/state.ts';
import type { StoredEvent } from '../src/core/types.ts';
import { referenceMetrics } from './reference-model.ts';

const DAYS = ['2026-11-18', '2026-11-19', '2026-11-20'];
const PROJECTS = ['p_a', 'p_b'];

const eventArb: fc.Arbitrary<StoredEvent> = fc
  .record({
    p: fc.constantFrom(...PROJECTS),
    day: fc.constantFrom(...DAYS),
    event: fc.constantFrom('page_view', 'page_view', 'page_view', 'signup', 'click', 'purchase'),
    path: fc.constantFrom('/', '/pricing', '/blog/a', '/docs'),
    source: fc.constantFrom('Direct', 'Google', 'news.example', 'Hacker News'),
    session: fc.integer({ min: 1, max: 12 }),
    user: fc.option(fc.integer({ min: 1, max: 6 }), { nil: undefined }),
    country: fc.constantFrom('DE', 'US', 'Unknown'),
    device: fc.constantFrom('desktop', 'mobile'),
    ts: fc.integer({ min: 0, max: 86_399_999 }),
    browser: fc.option(fc.constantFrom('Chrome', 'Firefox'), { nil: undefined }),
    os: fc.option(fc.constantFrom('Linux', 'iOS'), { nil: undefined }),
    utmMedium: fc.option(fc.constantFrom('email', 'cpc'), { nil: undefined }),
    utmCampaign: fc.option(fc.constantFrom('launch', 'sale'), { nil: undefined }),
    plan: fc.option(fc.constantFrom('free', 'pro'), { nil: undefined }),
    cents: fc.option(fc.integer({ min: -500, max: 100_000 }), { nil: undefined }),
    currency: fc.constantFrom('EUR', 'usd', 'EURO', 'eur'),
    rtMinute: fc.integer({ min: 0, max: 40 }),
  })
  .map((r) => {
    const sessionId = `s${r.session}`;
    return {
      t: 'e',
      p: r.p,
      ts: Date.parse(`${r.day}T00:00:00Z`) + r.ts,
      rt: Date.parse('2026-11-21T00:00:00Z') + r.rtMinute * 60_000,
      day: r.day,
      event: r.event,
      url: `https://site.example${r.path}?q=1`,
      path: r.path,
      referrer: '',
      source: r.source,
      sessionId,
      user: r.user !== undefined ? `u:${r.user}` : `s:${sessionId}`,
      country: r.country,
      device: r.device,
      params: (r.cents === undefined ? {} : { value: r.cents / 100, currency: r.currency }) as StoredEvent['params'],
      ...(r.browser ? { browser: r.browser } : {}),
      ...(r.os ? { os: r.os } : {}),
      ...(r.utmMedium ? { utmMedium: r.utmMedium } : {}),
      ...(r.utmCampaign ? { utmCampaign: r.utmCampaign } : {}),
      ...(r.plan ? { props: { plan: r.plan } } : {}),
    } satisfies StoredEvent;
  });

const TRACKED = ['plan', 'absent'];

function fold(events: StoredEvent[], state = new AnalyticsState(), from = 0): AnalyticsState {
  for (let i = from; i < events.length; i++) apply(state, i + 1, events[i]!);
  return state;
}

function ranges(): Array<[string, string]> {
  return [...DAYS.map((d): [string, string] => [d, d]), [DAYS[0]!, DAYS[2]!], [DAYS[1]!, DAYS[2]!]];
}

describe('the reducer', () => {
  test('folding all events equals restoring a snapshot taken midway and replaying the rest', () => {
    fc.assert(
      fc.property(fc.array(eventArb, { maxLength: 300 }), fc.nat(), (events, cut) => {
        const k = events.length === 0 ? 0 : cut % (events.length + 1);
        const whole = fold(events);
        const half = fold(events.slice(0, k));
        // Through v8 serialization, exactly as the snapshot files store it.
        const restored = fromSnapshot(deserialize(serialize(toSnapshot(half))));
        fold(events, restored, k);
        assert.equal(restored.lastSeq, whole.lastSeq);
        for (const p of PROJECTS) {
          for (const [from, to] of ranges()) {
            const opts = { trackedProps: TRACKED, compare: { from: DAYS[0]!, to: DAYS[1]! } };
            assert.deepEqual(metrics(restored, p, 'UTC', from, to, opts), metrics(whole, p, 'UTC', from, to, opts));
          }
          for (const minute of [0, 20, 40, 80]) {
            const now = Date.parse('2026-11-21T00:00:30Z') + minute * 60_000;
            assert.deepEqual(restored.project(p).realtime.read(now), whole.project(p).realtime.read(now));
          }
        }
      }),
      { numRuns: 150 },
    );
  });

  test('metrics equal a naive reference computation over the same events', () => {
    fc.assert(
      fc.property(fc.array(eventArb, { maxLength: 400 }), (events) => {
        const state = fold(events);
        for (const p of PROJECTS) {
          for (const [from, to] of ranges()) {
            const got = metrics(state, p, 'UTC', from, to, { trackedProps: TRACKED });
            const want = referenceMetrics(events, p, from, to, TRACKED);
            const { projectId, from: f, to: t, timezone, daily, bots, ...figures } = got;
            assert.deepEqual(figures, want);
            assert.equal(daily.length, DAYS.indexOf(to) - DAYS.indexOf(from) + 1);
            assert.equal(daily.reduce((n, d) => n + d.sessions, 0), want.sessions, 'sessions sum exactly over days');
            assert.equal(daily.reduce((n, d) => n + d.pageviews, 0), want.pageviews);
            assert.deepEqual([projectId, f, t, timezone, bots], [p, from, to, 'UTC', 0]);
          }
        }
      }),
      { numRuns: 150 },
    );
  });

  test('a visit counts for the visitor of its earliest event, so users never exceed sessions', () => {
    // Coarse times (ties decided by log order) and identities that change within a visit, in any arrival order.
    const visitEvent = eventArb.chain((e) =>
      fc.record({ minute: fc.integer({ min: 0, max: 5 }), user: fc.constantFrom('u:a', 'u:b', 'f:x', `s:${e.sessionId}`) }).map(({ minute, user }) => ({
        ...e,
        ts: Date.parse(`${e.day}T12:00:00Z`) + minute * 60_000,
        user,
      })),
    );
    fc.assert(
      fc.property(fc.array(visitEvent, { maxLength: 300 }), fc.nat(), (events, cut) => {
        const k = events.length === 0 ? 0 : cut % (events.length + 1);
        const whole = fold(events);
        const restored = fold(events, fromSnapshot(deserialize(serialize(toSnapshot(fold(events.slice(0, k)))))), k);
        for (const p of PROJECTS) {
          for (const [from, to] of ranges()) {
            const got = metrics(whole, p, 'UTC', from, to);
            assert.ok(got.users <= got.sessions, `${got.users} users > ${got.sessions} sessions`);
            for (const d of got.daily) assert.ok(d.users <= d.sessions, `${d.date}: ${d.users} users > ${d.sessions} sessions`);
            assert.equal(got.users, referenceMetrics(events, p, from, to).users);
            assert.deepEqual(metrics(restored, p, 'UTC', from, to), got);
          }
        }
      }),
      { numRuns: 150 },
    );
  });

  test('breakdowns are ordered by count, highest first', () => {
    const events = fc.sample(eventArb, { numRuns: 500, seed: 7 });
    const m = metrics(fold(events), 'p_a', 'UTC', DAYS[0]!, DAYS[2]!);
    for (const breakdown of [m.trafficSources, m.countries, m.devices, m.pages, m.events, m.entryPages, m.browsers, m.operatingSystems, m.utmMediums, m.utmCampaigns]) {
      const counts = Object.values(breakdown);
      assert.deepEqual(counts, [...counts].sort((a, b) => b - a));
    }
  });
});

test('a clock record moves only the fold clock: the same figures, and days whose window closed are handed over for sealing', () => {
  fc.assert(
    fc.property(fc.array(eventArb, { minLength: 1, maxLength: 60 }), (events) => {
      const plain = new AnalyticsState();
      const ticked = new AnalyticsState();
      events.forEach((e, i) => {
        apply(plain, i + 1, e);
        apply(ticked, i + 1, e);
      });
      const rt = ticked.maxRt;
      apply(ticked, events.length + 1, { t: 'k', rt: rt - 1 }); // a clock behind changes nothing
      assert.equal(ticked.maxRt, rt);
      assert.equal(ticked.sealQueue.length, 0);
      for (const p of PROJECTS) assert.deepEqual(metrics(ticked, p, 'UTC', DAYS[0]!, DAYS[2]!), metrics(plain, p, 'UTC', DAYS[0]!, DAYS[2]!));
      apply(ticked, events.length + 2, { t: 'k', rt: Date.parse('2027-01-01T00:00:00Z') });
      assert.equal(ticked.lastSeq, events.length + 2);
      const queued = new Set(ticked.sealQueue.map((r) => `${r.projectId} ${r.day.day}`));
      const live = new Set<string>();
      for (const [id, p] of ticked.projects) for (const d of p.days.keys()) live.add(`${id} ${d}`);
      assert.deepEqual(queued, live, 'every live day is handed over once the clock passed its window');
      for (const p of PROJECTS) assert.deepEqual(metrics(ticked, p, 'UTC', DAYS[0]!, DAYS[2]!), metrics(plain, p, 'UTC', DAYS[0]!, DAYS[2]!));
    }),
    { numRuns: 50 },
  );
});
