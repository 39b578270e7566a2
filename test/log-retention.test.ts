import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LogStore } from '../src/store/log-store.ts';
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
