import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { crc32 } from 'node:zlib';
import { decodeDay, encodeSegment } from '../src/core/columns/codec.ts';
import { mergeDay } from '../src/core/columns/day-table.ts';
import { entryCount } from '../src/core/columns/props.ts';
import { DayIds, propString, SegmentBuilder, type SegmentView } from '../src/core/columns/segment.ts';
import type { Scalar, StoredEvent } from '../src/core/types.ts';
import { rng } from '../bench/lib/seeded-random.ts';

/**
 * Event properties are kept sparsely (src/core/columns/props.ts): every shape a segment takes (open, frozen, sealed,
 * merged from several, merged and sealed, and the dense format of older releases) answers each key's column exactly
 * as the events say, and a key new in every event costs bytes in proportion to the entries, not keys × events.
 */

const crc = (b: Uint8Array) => crc32(b);
const DAY = '2026-11-20';
const DAY_START = Date.UTC(2026, 10, 20);

function event(i: number, params: Record<string, Scalar>): StoredEvent {
  const ts = DAY_START + i * 1000;
  return {
    t: 'e',
    p: 'p1',
    ts,
    rt: ts,
    day: DAY,
    event: i % 2 ? 'page_view' : 'signup',
    url: '',
    path: `/p${i % 3}`,
    referrer: '',
    source: 'Direct',
    sessionId: `s${i % 7}`,
    user: `s:s${i % 7}`,
    country: 'DE',
    device: 'desktop',
    params,
  };
}

/** Events with a few common keys, keys new in each event, and events with none. */
function events(n: number, seed: number): StoredEvent[] {
  const rand = rng(seed);
  const out: StoredEvent[] = [];
  for (let i = 0; i < n; i++) {
    const params: Record<string, Scalar> = {};
    if (rand() < 0.5) params.plan = rand() < 0.5 ? 'pro' : 'free';
    if (rand() < 0.3) params.n = Math.floor(rand() * 5);
    if (rand() < 0.2) params[`only${i}`] = i % 3 === 0 ? null : true;
    if (rand() < 0.1) params.flag = false;
    out.push(event(i, params));
  }
  return out;
}

/** Each key's value per event, as the events say (undefined: the event does not carry it). */
function expected(evs: readonly StoredEvent[], order: readonly number[]): Map<string, Array<string | undefined>> {
  const out = new Map<string, Array<string | undefined>>();
  order.forEach((src, at) => {
    for (const [k, v] of Object.entries(evs[src]!.params)) {
      let col = out.get(k);
      if (!col) out.set(k, (col = new Array<string | undefined>(order.length).fill(undefined)));
      col[at] = propString(v);
    }
  });
  return out;
}

function assertProps(view: SegmentView, want: Map<string, Array<string | undefined>>, label: string): void {
  let entries = 0;
  for (const [key, col] of want) {
    const p = view.prop(key);
    assert.ok(p, `${label}: key ${key} is there`);
    const got = Array.from(p.codes, (c) => (c === 0 ? undefined : p.dict[c - 1]));
    assert.deepEqual(got, col, `${label}: key ${key}`);
    assert.equal(new Set(p.dict).size, p.dict.length, `${label}: ${key}'s dictionary holds each value once`);
    assert.ok(p.dict.length <= new Set(col.filter((v) => v !== undefined)).size, `${label}: ${key}'s dictionary holds only its own values`);
    entries += col.filter((v) => v !== undefined).length;
  }
  assert.equal(view.prop('never-sent'), undefined, `${label}: a key no event carries`);
  const ix = view.props();
  assert.equal(entryCount(ix), entries, `${label}: one entry per (event, key) carried`);
  assert.deepEqual(new Set(ix.keys), new Set(want.keys()), `${label}: the keys`);
}

/** Merged order: by visit (first-seen), then time: what mergeDay does with these events (time rises with i). */
function mergedOrder(evs: readonly StoredEvent[]): number[] {
  const first = new Map<string, number>();
  evs.forEach((e) => first.has(e.sessionId) || first.set(e.sessionId, first.size));
  return evs.map((_, i) => i).sort((a, b) => first.get(evs[a]!.sessionId)! - first.get(evs[b]!.sessionId)! || a - b);
}

test('every shape of a segment answers each property key as the events say', () => {
  const evs = events(3000, 11);
  const ids = new DayIds();
  const builders = [new SegmentBuilder(DAY_START, ids)];
  evs.forEach((e, i) => {
    if (i === 1000 || i === 2200) builders.push(new SegmentBuilder(DAY_START, ids));
    builders.at(-1)!.append(i + 1, e);
  });
  const logOrder = evs.map((_, i) => i);
  const one = new SegmentBuilder(DAY_START, new DayIds());
  evs.forEach((e, i) => one.append(i + 1, e));
  assertProps(one, expected(evs, logOrder), 'open');
  const frozen = one.freeze();
  one.append(evs.length + 1, event(evs.length, { late: 'x' }));
  assertProps(frozen, expected(evs, logOrder), 'frozen before a later event');
  assertProps(decodeDay(encodeSegment(frozen, crc)).view, expected(evs, logOrder), 'sealed');

  const want = expected(evs, mergedOrder(evs));
  const sealed = builders.map((b) => decodeDay(encodeSegment(b, crc)).view);
  const merged = mergeDay([sealed[0]!, sealed[1]!, builders[2]!.freeze()]);
  assertProps(merged.view, want, 'merged from sealed and open segments');
  const stored = decodeDay(encodeSegment(merged.view, crc, merged.table));
  assertProps(stored.view, want, 'merged and sealed');
  assertProps(mergeDay([stored.view]).view, want, 'a sealed merged day merged again');
});

test('a key new in every event costs entries, not keys × events', () => {
  const n = 20_000;
  const b = new SegmentBuilder(DAY_START, new DayIds());
  for (let i = 0; i < n; i++) b.append(i + 1, event(i, { [`k${i}`]: i, plan: 'pro' }));
  const t0 = performance.now();
  const bytes = encodeSegment(b, crc);
  const d = decodeDay(bytes).view;
  const dt = mergeDay([d]);
  const merged = encodeSegment(dt.view, crc, dt.table);
  const ms = performance.now() - t0;
  // a dense column per key took n × n bytes here (400 MB); entries take a few bytes each plus the key and value text
  assert.ok(bytes.byteLength < 60 * n, `sealed: ${bytes.byteLength} bytes for ${n} events`);
  assert.ok(merged.byteLength < 60 * n, `merged: ${merged.byteLength} bytes for ${n} events`);
  assert.ok(ms < 10_000, `encode, decode, merge and encode again took ${ms.toFixed(0)} ms`);
  assert.deepEqual(d.prop(`k${n - 1}`)!.dict, [String(n - 1)]);
  assert.equal(d.prop(`k${n - 1}`)!.codes[n - 1], 1);
  assert.equal(d.prop('plan')!.codes.filter((c) => c === 1).length, n);
  assert.equal(entryCount(decodeDay(merged).view.props()), 2 * n);
});

test('segments a release before sparse properties wrote are still read', () => {
  const fixture = JSON.parse(readFileSync(new URL('./fixtures/segment-v2.json', import.meta.url), 'utf8')) as { segment: string; merged: string };
  // the events the fixture was written from (its "about" says so)
  const v2: Array<Record<string, Scalar>> = [{ plan: 'pro', n: 3 }, {}, { plan: 'free', only2: true }, { plan: 'pro', n: null }, { k4: 'x' }];
  const evs = v2.map((p, i) => ({ ...event(i, p), sessionId: `s${i % 4}` }));
  const seg = decodeDay(Buffer.from(fixture.segment, 'base64')).view;
  assertProps(seg, expected(evs, [0, 1, 2, 3, 4]), 'version 2 segment');
  const merged = decodeDay(Buffer.from(fixture.merged, 'base64')).view;
  assertProps(merged, expected(evs, [0, 4, 1, 2, 3]), 'version 2 merged day');
  // and written again in today's format, as the store's merge does
  assertProps(decodeDay(encodeSegment(merged, crc)).view, expected(evs, [0, 4, 1, 2, 3]), 'version 2 re-encoded');
});
