import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import type { LogRecord } from '../src/core/types.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';
import { testClock } from './contract-helpers.ts';
import { api, createProject, startTestService } from './helpers.ts';

const DAY_MS = 86_400_000;

async function scenario(env: Record<string, string>) {
  const clock = testClock(Math.floor(Date.now() / DAY_MS) * DAY_MS - 100 * DAY_MS);
  let svc = await startTestService(env, { now: clock.now });
  const { keys } = await createProject(svc.url, svc.adminKey, { monthly_quota: 0 });
  const old = Array.from({ length: 300 }, (_, i) => ({ event: 'page_view', url: `/p${i % 7}`, sessionId: `s${i % 40}`, timestamp: clock.now() - (1 + (i % 3)) * DAY_MS }));
  for (let i = 0; i < old.length; i += 100) assert.equal((await api(svc.url, '/analytics', { key: keys.secret, body: old.slice(i, i + 100) })).status, 200);
  clock.advance(60 * DAY_MS);
  const recent = Array.from({ length: 50 }, (_, i) => ({ event: 'page_view', url: '/new', sessionId: `n${i}` }));
  assert.equal((await api(svc.url, '/analytics', { key: keys.secret, body: recent })).status, 200);
  await svc.service.engine.sealingIdle();
  await svc.service.engine.snapshotNow();
  const range = `from=${new Date(clock.now() - 70 * DAY_MS).toISOString().slice(0, 10)}&to=${new Date(clock.now()).toISOString().slice(0, 10)}`;
  const before = (await api(svc.url, `/metrics?${range}`, { key: keys.secret })).body;
  assert.equal(before.pageviews, 350);
  const removed = await svc.service.engine.applyRetention();
  const after = (await api(svc.url, `/metrics?${range}`, { key: keys.secret })).body;
  svc = await svc.restart();
  const restarted = (await api(svc.url, `/metrics?${range}`, { key: keys.secret })).body;
  await svc.stop();
  const store = LogStore.open(svc.dataDir, 'commit');
  const left = [...store.readAfter(0)].length;
  const firstSeq = store.logStart();
  await store.close();
  await svc.destroy();
  return { removed, before, after, restarted, left, firstSeq };
}

test('ANALYTICS_LOG_RETENTION_DAYS removes raw events of sealed days past it; every figure stays, before and after a restart', async () => {
  const r = await scenario({ ANALYTICS_LOG_RETENTION_DAYS: '40' });
  assert.equal(r.removed, 300);
  assert.equal(r.left, 50);
  assert.equal(r.firstSeq, 301);
  assert.deepEqual(r.after, r.before);
  assert.deepEqual(r.restarted, r.before);
});

test('without ANALYTICS_LOG_RETENTION_DAYS the log keeps everything', async () => {
  const r = await scenario({});
  assert.equal(r.removed, 0);
  assert.equal(r.left, 350);
  assert.equal(r.firstSeq, 1);
});

test('retention removes whole format 2 entries: the log starts at the first entry reaching the cut, and an emptied log continues after it', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'analytics-retention-'));
  const rec = (i: number): LogRecord => ({
    t: 'e', p: 'p_r', ts: 1_763_700_000_000 + i, rt: 1_763_700_000_000 + i, day: '2025-11-21', event: 'page_view', url: `/${i}`,
    path: `/${i}`, referrer: '', source: 'Direct', sessionId: `s${i}`, user: `s:s${i}`, country: '', device: 'desktop', params: {},
  });
  const batch = (from: number) => Array.from({ length: 100 }, (_, i) => rec(from + i));
  try {
    let store = LogStore.open(dir, 'commit');
    for (const from of [1, 101, 201]) await store.append(batch(from));
    // 150 falls inside the second entry (101..200): only the first entry can go.
    assert.equal(await store.deleteBelow(150), 100);
    assert.equal(store.logStart(), 101);
    const left = [...store.readAfter(0)].map((r) => r.seq);
    assert.deepEqual([left[0], left.at(-1), left.length], [101, 300, 200]);
    // Everything: the log is empty, and the next record still continues the sequence (not back at 1).
    assert.equal(await store.deleteBelow(301), 200);
    await store.close();
    store = LogStore.open(dir, 'commit');
    assert.equal(store.lastSeq(), 300);
    assert.equal(await store.append([rec(301)]), 301);
    assert.deepEqual([...store.readAfter(0)].map((r) => r.seq), [301]);
    await store.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
