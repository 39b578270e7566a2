import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { Distinct } from '../src/core/columns/distinct.ts';
import { hash53 } from '../src/core/hash.ts';
import type { FunnelQuestion, Goal, Question } from '../src/core/query/types.ts';
import type { StoredEvent } from '../src/core/types.ts';
import { ColumnProjection, OPEN_HISTORY_BOUND, RECENT_KEEP_FLUSHES } from '../src/engine/column-projection.ts';
import { OPEN_BYTES_BOUND, PROJECT_OPEN_BYTES } from '../src/engine/open-columns.ts';
import { ColumnStore } from '../src/store/lmdb/column-store.ts';
import { rng } from '../bench/lib/seeded-random.ts';

/**
 * A closed day's segments merged into one stored segment with its visit table (and a late event after the merge)
 * answer every question exactly as the same events held in many small segments do; across a restart too.
 * Distinct visitors over a range: exact while small, within the contract's 1 % when large, exact for one day.
 */

const DAY_MS = 86_400_000;
const START = Date.UTC(2026, 9, 1);
const GOALS: Goal[] = [{ id: 'g', name: 'Pricing', page: '/pricing', createdAt: 0 }];

/** Three days of visits whose events arrive interleaved and out of time order. */
function events(): StoredEvent[] {
  const rand = rng(3);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const out: StoredEvent[] = [];
  for (let i = 0; i < 3000; i++) {
    const d = Math.floor(rand() * 3);
    const s = Math.floor(rand() * 200);
    const day = new Date(START + d * DAY_MS).toISOString().slice(0, 10);
    const ts = START + d * DAY_MS + s * 300_000 + Math.floor(rand() * 600_000);
    const pv = rand() < 0.7;
    const p = pick(['/', '/pricing', '/docs', '/blog/a']);
    out.push({
      t: 'e',
      p: 'p_m',
      ts,
      rt: ts,
      day,
      event: pv ? 'page_view' : pick(['signup', 'click']),
      url: `https://x.example${p}`,
      path: p,
      referrer: '',
      source: pick(['Direct', 'Google']),
      sessionId: `s${d}-${s}`,
      user: `u:${s % 70}`,
      country: pick(['DE', 'US']),
      device: 'desktop',
      params: rand() < 0.3 ? { plan: pick(['free', 'pro']) } : {},
      browser: 'Chrome',
      os: 'Linux',
    });
  }
  return out;
}

const from = new Date(START).toISOString().slice(0, 10);
const to = new Date(START + 2 * DAY_MS).toISOString().slice(0, 10);
const q = (p: Partial<Question>): Question => ({ from, to, metrics: ['visitors', 'visits', 'pageviews', 'events', 'bounceRate', 'viewsPerVisit', 'visitDuration'], dimensions: [], filters: [], orderBy: [], limit: 100, offset: 0, ...p });
const QUESTIONS: Question[] = [
  q({}),
  q({ filters: [['is', 'country', ['DE']]] }),
  q({ dimensions: ['source'], filters: [['is', 'page', ['/pricing']]] }),
  q({ dimensions: ['time:hour'], from: to }),
  q({ dimensions: ['page', 'entryPage'], filters: [['contains', 'page', ['o']]] }),
  q({ dimensions: ['exitPage', 'prop:plan'] }),
  q({ metrics: ['visitors', 'conversionRate'], dimensions: ['goal', 'time:day'] }),
];
const FUNNEL: FunnelQuestion = { from, to, filters: [['is', 'source', ['Google']]], steps: [{ label: 'page:/', page: '/' }, { label: 'page:/pricing', page: '/pricing' }] };

async function answers(c: ColumnProjection): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const x of QUESTIONS) out.push(await c.query('p_m', 'UTC', GOALS, x));
  out.push(await c.funnel('p_m', 'UTC', FUNNEL));
  return out;
}

test('merged days answer as their segments do, with a late event and after a restart', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'columns-merge-'));
  try {
    const all = events();
    const late = all.pop()!;
    let store = ColumnStore.open(dir);
    let cols = new ColumnProjection(store, () => {});
    // many small segments per day: a flush after every 250 events
    for (let i = 0; i < all.length; i += 250) {
      cols.fold(i + 1, all.slice(i, i + 250));
      await cols.flush();
    }
    const segmented = await answers(cols);
    assert.ok(store.day('p_m', from).length > 1);
    await cols.flush(); // every day idle: the oldest merged, the clock's two newest dates keep their numbering
    const middle = new Date(START + DAY_MS).toISOString().slice(0, 10);
    assert.equal(store.day('p_m', from).length, 1, 'an older idle day is merged at the next flush');
    assert.ok(store.day('p_m', to).length > 1 && store.day('p_m', middle).length > 1, 'the two newest dates are not merged yet');
    assert.deepEqual(await answers(cols), segmented);
    for (let n = 0; n < RECENT_KEEP_FLUSHES; n++) await cols.flush();
    for (const d of [from, middle, to]) {
      const stored = store.day('p_m', d);
      assert.equal(stored.length, 1, d);
      assert.ok(stored[0]!.table, 'merged segment carries its visit table');
    }
    assert.deepEqual(await answers(cols), segmented);

    // a late event for a merged day, after a restart (the day's numbering is read back from the merged segment)
    await cols.close();
    store = ColumnStore.open(dir);
    cols = new ColumnProjection(store, () => {});
    cols.fold(all.length + 1, [late]);
    const withLate = await answers(cols);
    await cols.flush();
    await cols.flush();
    assert.deepEqual(await answers(cols), withLate);
    await cols.close();

    // the reference: every event in one open segment, never sealed
    const dir2 = mkdtempSync(path.join(tmpdir(), 'columns-merge-ref-'));
    const ref = new ColumnProjection(ColumnStore.open(dir2), () => {});
    ref.fold(1, [...all, late]);
    assert.deepEqual(await answers(ref), withLate);
    await ref.close();
    rmSync(dir2, { recursive: true, force: true });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('distinct visitors: exact for one day and for small ranges, within 1 % for large ranges', () => {
  const small = new Distinct();
  for (let i = 0; i < 2000; i++) small.add(hash53(`u:${i}`), i % 4);
  for (let r = 0; r < 5; r++) for (let i = 0; i < 2000; i++) small.add(hash53(`u:${i}`), 7 + r);
  assert.equal(small.count(), 2000);
  const oneDay = new Distinct();
  for (let i = 0; i < 200_000; i++) oneDay.add(hash53(`v:${i}`), 0);
  assert.equal(oneDay.count(), 200_000);
  for (const n of [10_000, 50_000, 400_000]) {
    const d = new Distinct();
    for (let i = 0; i < n; i++) d.add(hash53(`w:${i}`), i % 30);
    for (let i = 0; i < n; i += 2) d.add(hash53(`w:${i}`), 31);
    assert.ok(Math.abs(d.count() - n) / n < 0.01, `${n}: ${d.count()}`);
  }
});

test('open history events are sealed at their own, lower bound; the same number of live events stays open', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'columns-history-bound-'));
  try {
    const store = ColumnStore.open(dir);
    const cols = new ColumnProjection(store, () => {});
    const base = events()[0]!;
    const batch = (first: number, n: number, h: boolean): StoredEvent[] =>
      Array.from({ length: n }, (_, i) => ({ ...base, sessionId: `s${first + i}`, ...(h ? { h: 1 as const } : {}) }));
    const n = OPEN_HISTORY_BOUND + 500;
    for (let i = 0; i < n; i += 500) cols.fold(i + 1, batch(i, 500, false));
    await new Promise((r) => setImmediate(r));
    assert.equal(cols.openCount(), n, 'live events below OPEN_EVENTS_BOUND stay open');
    await cols.flush();
    for (let i = 0; i < n; i += 500) cols.fold(n + i + 1, batch(i, 500, true));
    // the bound started a flush, which took the open segments at once
    assert.ok(cols.openCount() < OPEN_HISTORY_BOUND, `open after a history import: ${cols.openCount()}`);
    await cols.flush();
    assert.equal(store.marker(), 2 * n);
    await cols.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('one project whose events carry long new values is sealed at its byte budget, not held until 250,000 events', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'columns-budget-'));
  try {
    const store = ColumnStore.open(dir);
    const cols = new ColumnProjection(store, () => {});
    const base = events()[0]!;
    // 25 properties of 500 characters, new in every event: ~14 KB of dictionaries an event
    const heavy = (i: number): StoredEvent => ({
      ...base,
      sessionId: `h${i}`,
      params: Object.fromEntries(Array.from({ length: 25 }, (_, k) => [`k${k}`, `${i}-${k}-`.padEnd(500, 'x')])),
    });
    const light = (i: number): StoredEvent => ({ ...base, p: 'p_other', sessionId: `l${i}` });
    let maxBytes = 0;
    let seq = 0;
    for (let i = 0; i < 4000; i++) {
      cols.fold(++seq, [heavy(i)]);
      if (i % 10 === 0) cols.fold(++seq, [light(i)]);
      maxBytes = Math.max(maxBytes, cols.openStats().largestProjectBytes);
      if (i % 100 === 0) await new Promise((r) => setImmediate(r));
    }
    const stats = cols.openStats();
    assert.ok(stats.seals.project_bytes >= 2, `flushes at the project's budget: ${JSON.stringify(stats.seals)}`);
    assert.equal(stats.seals.events, 0);
    // the budget is checked after each event: one event past it at most (a flush under way takes the next ones)
    assert.ok(maxBytes < PROJECT_OPEN_BYTES + 2 * 2 ** 20, `largest project's open bytes: ${maxBytes}`);
    assert.ok(stats.bytes < OPEN_BYTES_BOUND);
    await cols.flush();
    assert.equal(cols.openStats().bytes, 0);
    assert.equal(store.marker(), seq);
    // nothing was lost on the way: every heavy event is in a sealed segment with its properties
    const ans = await cols.query('p_m', 'UTC', [], q({ from: base.day, to: base.day, metrics: ['events'], dimensions: ['prop:k3'] }));
    assert.equal(ans.totalRows, 4000, 'each event its own value of k3');
    assert.equal(ans.totals[0], 4000);
    await cols.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
