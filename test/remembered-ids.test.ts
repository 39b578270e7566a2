import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { FingerprintSet } from '../src/core/fingerprint-set.ts';
import { hash53 } from '../src/core/hash.ts';
import { DEDUP_WINDOW_MS } from '../src/core/limits.ts';
import type { StoredEvent } from '../src/core/types.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';

const event = (p: string, eventId: string, rt: number): StoredEvent => ({
  t: 'e', p, ts: rt, rt, day: new Date(rt).toISOString().slice(0, 10), event: 'x', url: '', path: '', referrer: '', source: 'Direct',
  sessionId: 's', user: 's:s', country: 'DE', device: 'desktop', params: {}, eventId,
});

test('eventIds are durable with their events (no snapshot), per project, and expire after 48 hours in LMDB and in memory', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'analytics-ids-'));
  try {
    const t0 = Date.parse('2026-11-01T00:00:00Z');
    let store = LogStore.open(dir, 'commit');
    const written = store.openRememberedIds();
    // Appended as the engine does: the ids in the append's own transaction.
    const append = (records: StoredEvent[]) => store.append(records, () => written.writeWith(records));
    // 25,000 ids: more than two expiry slices.
    const old = Array.from({ length: 25_000 }, (_, i) => event('p_a', `old-${i}`, t0));
    for (let i = 0; i < old.length; i += 5000) await append(old.slice(i, i + 5000));
    await append([event('p_a', 'fresh', t0 + DEDUP_WINDOW_MS), event('p_b', 'old-1', t0 + DEDUP_WINDOW_MS)]);
    await store.close();

    // A restart: what the engine remembers comes from LMDB alone.
    store = LogStore.open(dir, 'commit');
    let ids = store.openRememberedIds();
    const now = t0 + DEDUP_WINDOW_MS - 1;
    assert.equal(ids.load(now), 25_002);
    assert.ok(ids.has('p_a', 'old-17', now));
    assert.ok(!ids.has('p_a', 'old-17', t0 + DEDUP_WINDOW_MS), 'expired after 48 h even before the expiry pass');
    assert.ok(!ids.has('p_c', 'old-17', now), 'ids belong to their project');
    assert.ok(!ids.has('p_a', 'never-sent', now));

    const later = t0 + DEDUP_WINDOW_MS + 1;
    // a new slice every 64 records: a pass resumed by a key that skips records leaves some of them behind
    assert.equal(await ids.expire(later, false, 0), 25_000);
    assert.equal(ids.size, 2);
    assert.ok(ids.has('p_a', 'fresh', later));
    assert.ok(ids.has('p_b', 'old-1', later));
    assert.ok(!ids.has('p_a', 'old-1', later));
    await store.close();

    store = LogStore.open(dir, 'commit');
    ids = store.openRememberedIds();
    assert.equal(ids.load(later), 2);
    // Read as of before they expired: an id still stored would count again (the pass once removed nothing from LMDB).
    assert.equal(ids.load(t0), 2, 'expired ids are gone from LMDB too');
    await store.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('an expiry pass resumed every 64 records keeps every id still in the window (keys of every length, interleaved)', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'analytics-ids-'));
  try {
    const t0 = Date.parse('2026-11-01T00:00:00Z');
    const store = LogStore.open(dir, 'commit');
    const ids = store.openRememberedIds();
    // ids of 1 to 6 digits, old and fresh side by side in key order: a resumed range that skipped keys would drop
    // fresh ones from the table (counted twice later) and leave old ones in LMDB
    const records = Array.from({ length: 30_000 }, (_, i) => event('p_a', `id-${i}`, i % 3 === 0 ? t0 + DEDUP_WINDOW_MS : t0));
    for (let i = 0; i < records.length; i += 5000) {
      const part = records.slice(i, i + 5000);
      await store.append(part, () => ids.writeWith(part));
    }
    const later = t0 + DEDUP_WINDOW_MS + 1;
    assert.equal(await ids.expire(later, true, 0), 20_000);
    assert.equal(ids.size, 10_000);
    for (let i = 0; i < 30_000; i += 3) assert.ok(ids.has('p_a', `id-${i}`, later), `id-${i} is still remembered`);
    assert.equal(ids.load(t0), 10_000, 'the expired ids are gone from LMDB');
    await store.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the fingerprint filter in front of LMDB knows every id added, through its growth, and rarely claims one it was not given', () => {
  const set = new FingerprintSet();
  const N = 300_000;
  for (let i = 0; i < N; i++) set.add(hash53(`p\u0000id-${i}`));
  set.add(hash53('p\u0000id-0')); // again: no second entry
  // distinct fingerprints: ids sharing their low 32 bits count once (about N² / 2^33 of them, ~10 here)
  assert.ok(set.size <= N && set.size > N - 100, `${set.size} distinct fingerprints`);
  for (let i = 0; i < N; i++) assert.ok(set.has(hash53(`p\u0000id-${i}`)), `id-${i} added`);
  let claimed = 0;
  for (let i = 0; i < N; i++) if (set.has(hash53(`p\u0000other-${i}`))) claimed++;
  // ~load / 2^(32 - log2(slots)) of lookups: about 0.01 % here; a claim costs an LMDB read, never an answer
  assert.ok(claimed < N * 0.001, `${claimed} of ${N} never-added ids claimed`);
  assert.ok(set.byteLength <= 4 * 2 ** 19, `${set.byteLength} bytes for ${N} ids`);
  // a hash whose low 32 bits are 0 (the empty slot) is still kept
  const zeroLow = 2 ** 32 * 5;
  set.add(zeroLow);
  assert.ok(set.has(zeroLow));
});
