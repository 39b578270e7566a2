import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DayIds, SegmentBuilder } from '../src/core/columns/segment.ts';
import { utcMidnight } from '../src/core/dates.ts';
import { FingerprintSet } from '../src/core/fingerprint-set.ts';
import { freeNow } from '../src/core/free-now.ts';
import { NumberCounts, NumberSet } from '../src/core/number-table.ts';
import type { StoredEvent } from '../src/core/types.ts';
import { VisitTable } from '../src/core/visit-table.ts';

/**
 * Grown tables hand their old arrays' memory back at once (core/free-now.ts), and never an array they only view: a
 * table restored from a snapshot views the snapshot's arrays, which other days and tables may share.
 */

test('freeNow detaches a large array, and leaves a small one to the collector', () => {
  const big = new Float64Array(16_384);
  freeNow(big.buffer);
  assert.equal(big.byteLength, 0, 'detached: its memory went with the clone');
  const small = new Float64Array(1024);
  small[3] = 7;
  freeNow(small.buffer);
  assert.equal(small[3], 7);
});

/** A table form of `n` keys in `slots` slots over one shared buffer, as a snapshot's arrays may be (0 = empty). */
function sharedTable(slots: number, n: number): { buffer: ArrayBuffer; keys: Float64Array; values: Uint32Array } {
  const buffer = new ArrayBuffer(slots * 8 + slots * 4 + 64);
  const keys = new Float64Array(buffer, 0, slots);
  const values = new Uint32Array(buffer, slots * 8, slots);
  for (let i = 1; i <= n; i++) {
    let j = i & (slots - 1);
    while (keys[j] !== 0) j = (j + 1) & (slots - 1);
    keys[j] = i;
    values[j] = i * 10;
  }
  return { buffer, keys, values };
}

test('tables restored onto a snapshot arrays grow without freeing them; every key and counter is kept', () => {
  const counts = sharedTable(16_384, 40);
  const c = NumberCounts.fromRaw({ keys: counts.keys, values: counts.values, hasZero: false, zeroValue: 0, size: 40 });
  const set = sharedTable(16_384, 40);
  const s = NumberSet.fromRaw({ keys: set.keys, hasZero: false, size: 40 });
  for (let i = 41; i <= 50_000; i++) {
    c.set(i, i * 10);
    s.add(i);
  }
  assert.equal(counts.buffer.byteLength, counts.keys.length * 8 + counts.values.length * 4 + 64, 'the snapshot buffer is whole');
  assert.equal(counts.keys[1], 1, 'and still readable');
  assert.ok(set.buffer.byteLength > 0);
  for (let i = 1; i <= 50_000; i++) {
    assert.equal(c.get(i), i * 10);
    assert.ok(s.has(i));
  }

  // A visit table restored in its table form (capacity + 1 slots) views the arrays when it is large.
  const cap = 16_384;
  const keys = new Float64Array(cap + 1);
  const visitors = new Float64Array(cap + 1);
  const firsts = new Float64Array(cap + 1);
  for (let i = 1; i <= 40; i++) {
    let j = i & (cap - 1);
    while (keys[j] !== 0) j = (j + 1) & (cap - 1);
    keys[j] = i;
    visitors[j] = i + 1;
    firsts[j] = i + 2;
  }
  const v = VisitTable.fromRaw({ keys, visitors, firsts, hasZero: false, size: 40 });
  for (let i = 41; i <= 50_000; i++) v.add(i, i + 1, i + 2);
  assert.equal(keys.byteLength, (cap + 1) * 8, 'the restored arrays are not detached');
  for (let i = 1; i <= 50_000; i++) assert.equal(v.visitorAt(v.find(i)), i + 1);
});

test('tables of their own keep every entry through many doublings (each frees the arrays it outgrew)', () => {
  const c = new NumberCounts();
  const s = new NumberSet();
  const v = new VisitTable();
  const f = new FingerprintSet();
  for (let i = 1; i <= 100_000; i++) {
    c.set(i * 7919, i);
    s.add(i * 7919);
    v.add(i * 7919, i, i);
    f.add(i * 7919);
  }
  for (let i = 1; i <= 100_000; i++) {
    assert.equal(c.get(i * 7919), i);
    assert.ok(s.has(i * 7919));
    assert.equal(v.firstAt(v.find(i * 7919)), i);
    assert.ok(f.has(i * 7919));
  }
});

test('an open column segment frees the buffer it outgrew unless a view of it was handed out, which stays whole', () => {
  const day = '2026-03-01';
  const event = (i: number): StoredEvent => ({
    t: 'e', p: 'p1', ts: Date.parse(`${day}T00:00:00Z`) + i * 1000, rt: Date.parse(`${day}T00:00:00Z`) + i * 1000, day, event: i % 3 ? 'page_view' : 'click',
    url: `https://ex.example/${i % 50}`, path: `/${i % 50}`, referrer: '', source: 'Direct', sessionId: `s${i >> 2}`, user: `u${i >> 3}`,
    country: 'DE', device: 'desktop', params: {},
  });
  const b = new SegmentBuilder(utcMidnight(day), new DayIds());
  for (let i = 0; i < 3000; i++) b.append(i + 1, event(i));
  const frozen = b.freeze();
  const early = frozen.time;
  for (let i = 3000; i < 40_000; i++) b.append(i + 1, event(i));
  assert.equal(early.length, 3000, 'the viewed buffer was not freed');
  assert.equal(early[2999], 2999 * 1000);
  assert.equal(frozen.column('path')[49], frozen.column('path')[99]);
  const time = b.time;
  assert.equal(time.length, 40_000);
  for (let i = 0; i < 40_000; i += 997) assert.equal(time[i], i * 1000);
  const paths = b.column('path');
  const dict = b.dict('path');
  for (let i = 0; i < 40_000; i += 997) assert.equal(dict[paths[i]! - 1], `/${i % 50}`); // codes are 1-based
});
