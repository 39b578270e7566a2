import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { check, rebuild } from '../src/engine/maintenance.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';
import { testClock } from './contract-helpers.ts';
import { api, createProject, startTestService } from './helpers.ts';

/**
 * Sealed history meets the project lifecycle and the maintenance tools: DELETE /projects erases a project's sealed
 * days, month rollups and remembered eventIds too (no file keeps its strings); operator figures count sealed days;
 * `analytics rebuild` seals again from the log and `analytics check` verifies the sealed store.
 */

const DAY_MS = 86_400_000;

function allFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name);
    return statSync(full).isDirectory() ? allFiles(full) : [full];
  });
}

const filesContaining = (dir: string, needle: string) => allFiles(dir).filter((f) => readFileSync(f).includes(Buffer.from(needle)));

test('a deleted project leaves no sealed day, rollup or eventId on disk; rebuild and check cover sealed history', async () => {
  const clock = testClock(Math.floor(Date.now() / DAY_MS) * DAY_MS - 100 * DAY_MS);
  let svc = await startTestService({}, { now: clock.now });
  try {
    const doomed = await createProject(svc.url, svc.adminKey, { monthly_quota: 0 });
    const kept = await createProject(svc.url, svc.adminKey, { monthly_quota: 0 });
    const marker = `sealed-erase-${randomBytes(8).toString('hex')}`;
    // Days 1..3 back, for both projects; the marker only in the doomed project's pages and eventIds.
    const old = (p: string, tag: string) =>
      Array.from({ length: 60 }, (_, i) => ({
        event: 'page_view',
        url: `/${tag}/${i % 5}`,
        sessionId: `s${i % 12}`,
        eventId: `${tag}-${i}`,
        timestamp: clock.now() - (1 + (i % 3)) * DAY_MS,
      })).map((e) => ({ ...e, url: p === 'doomed' ? `/${marker}${e.url}` : e.url }));
    assert.equal((await api(svc.url, '/analytics', { key: doomed.keys.secret, body: old('doomed', marker) })).status, 200);
    assert.equal((await api(svc.url, '/analytics', { key: kept.keys.secret, body: old('kept', 'k') })).status, 200);
    // 70 days on (past the seal point of their month's last day): they are sealed and their month rolled up.
    clock.advance(70 * DAY_MS);
    assert.equal((await api(svc.url, '/analytics', { key: kept.keys.secret, body: { event: 'page_view', url: '/now', sessionId: 'n' } })).status, 200);
    await svc.service.engine.sealingIdle();
    await svc.service.engine.snapshotNow();
    const stats = svc.service.engine.stats();
    assert.ok(stats.sealedDays >= 6, `both projects' days are sealed (${stats.sealedDays})`);
    assert.equal(stats.liveDays, 1, 'only today is live');
    assert.ok(filesContaining(svc.dataDir, marker).length >= 1, 'the marker is on disk before the delete (the test can fail)');

    const range = `from=${new Date(clock.now() - 80 * DAY_MS).toISOString().slice(0, 10)}&to=${new Date(clock.now()).toISOString().slice(0, 10)}`;
    const keptBefore = (await api(svc.url, `/metrics?${range}`, { key: kept.keys.secret })).body;
    assert.equal(keptBefore.pageviews, 61);

    // Reads of sealed days and ingest with eventIds go on while the erasure compacts and swaps the LMDB file: never a
    // 500 (a read in the moment the file is swapped answers 503 with Retry-After; ingest waits for the swap).
    let deleting = true;
    const statuses: number[] = [];
    const hammer = (async () => {
      for (let i = 0; deleting; i++) {
        statuses.push((await api(svc.url, `/metrics?${range}`, { key: kept.keys.secret })).status);
        const body = { event: 'page_view', url: '/during', sessionId: `d${i}`, eventId: `during-${i}` };
        statuses.push((await api(svc.url, '/analytics', { key: kept.keys.secret, body })).status);
      }
    })();
    const del = await api(svc.url, `/projects/${doomed.project.id}`, { method: 'DELETE', key: svc.adminKey });
    deleting = false;
    await hammer;
    assert.equal(del.status, 200);
    assert.ok(statuses.length >= 2 && statuses.every((s) => s === 200 || s === 503), statuses.join(','));
    const during = statuses.filter((s, i) => i % 2 === 1 && s === 200).length;
    await svc.service.engine.snapshotNow();
    assert.deepEqual(filesContaining(svc.dataDir, marker), []);
    assert.equal(svc.service.engine.stats().sealedDays, stats.sealedDays / 2, "only the kept project's sealed days remain");
    const keptAfter = (await api(svc.url, `/metrics?${range}`, { key: kept.keys.secret })).body;
    assert.equal(keptAfter.pageviews, keptBefore.pageviews + during, 'every event acknowledged during the delete is counted');
    await svc.stop();

    // check: sealed days decode, rollups equal the merge of their days, live + sealed equal the log.
    const healthy = await check(svc.dataDir);
    assert.deepEqual(healthy.problems, []);
    assert.ok(healthy.sealedDays >= 3 && healthy.sealedMonths >= 1, JSON.stringify(healthy));

    // rebuild seals again from the log (same days, same rollups) and writes a fresh snapshot.
    const rebuilt = await rebuild(svc.dataDir);
    assert.equal(rebuilt.sealedDays, healthy.sealedDays);
    assert.deepEqual((await check(svc.dataDir)).problems, []);
    svc = await svc.restart();
    assert.deepEqual((await api(svc.url, `/metrics?${range}`, { key: kept.keys.secret })).body, keptAfter);
    await svc.stop();

    // A month rollup that no longer matches its days is named by check.
    const store = LogStore.open(svc.dataDir, 'flush');
    try {
      const sealed = store.openSealedStore();
      const month = [...sealed.allMonths()][0]!;
      const rollup = month.rollup!;
      rollup.daily = rollup.daily.map((d, i) => (i === 0 ? { ...d, pageviews: d.pageviews + 1 } : d));
      await sealed.write({ days: [], months: [{ projectId: month.projectId, month: rollup }] });
    } finally {
      await store.close();
    }
    const damaged = await check(svc.dataDir);
    assert.equal(damaged.ok, false);
    assert.ok(damaged.problems.some((p) => p.includes('month rollup') && p.includes('differs from the merge')), damaged.problems.join('\n'));
  } finally {
    await svc.destroy().catch(() => {});
  }
});
