import assert from 'node:assert/strict';
import { test } from 'node:test';
import { api, createProject, startTestService, todayUtc } from './helpers.ts';

const DAY_MS = 86_400_000;

/**
 * Deleting a project compacts the LMDB file online while writes go on: history imported during that copy keeps its
 * eventIds for good (the copy's history_ids), so the same import sent again after the swap, a restart and three days
 * (past the 48-hour window of live eventIds) counts nothing.
 */
test('history imported while another project is erased keeps its eventIds through the compaction and a restart', async () => {
  let shift = 0;
  let svc = await startTestService({}, { now: () => Date.now() + shift });
  try {
    const doomed = await createProject(svc.url, svc.adminKey, { name: 'doomed' });
    const kept = await createProject(svc.url, svc.adminKey, { name: 'kept' });
    // enough events that the erasure and its compaction take a while
    for (let b = 0; b < 40; b++) {
      const batch = Array.from({ length: 500 }, (_, i) => ({ event: 'page_view', url: `https://d.example/p${i}`, sessionId: `s${b}-${i % 50}`, eventId: `d-${b}-${i}` }));
      assert.equal((await api(svc.url, '/analytics', { key: doomed.keys.secret, body: batch })).status, 200);
    }
    const old = todayUtc(Date.now() - 400 * DAY_MS);
    const batch = (b: number) =>
      Array.from({ length: 100 }, (_, i) => ({ event: 'page_view', url: `https://k.example/h${i}`, sessionId: `h${b}`, timestamp: `${old}T10:${String(i % 60).padStart(2, '0')}:00Z`, eventId: `h-${b}-${i}` }));
    assert.equal((await api(svc.url, `/projects/${doomed.project.id}`, { key: svc.adminKey, method: 'DELETE' })).status, 200);
    // import for as long as the erasure (its slices, the online copy, the catch-up and the swap) is under way
    let erased = false;
    const settled = svc.service.engine.snapshotNow().then(() => (erased = true));
    let sent = 0;
    while (!erased || sent < 5) {
      const res = await api<{ accepted: number; duplicates: number }>(svc.url, `/projects/${kept.project.id}/history`, { key: kept.keys.secret, body: batch(sent) });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body.accepted, 100);
      sent++;
    }
    await settled;
    // three days later: the 48-hour table has forgotten every id; history ids are kept for good
    shift = 3 * DAY_MS;
    svc = await svc.restart();
    let duplicates = 0;
    for (let b = 0; b < sent; b++) {
      const res = await api<{ accepted: number; duplicates: number }>(svc.url, `/projects/${kept.project.id}/history`, { key: kept.keys.secret, body: batch(b) });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body.accepted, 0, 'nothing counted twice');
      duplicates += res.body.duplicates;
    }
    assert.equal(duplicates, sent * 100);
  } finally {
    await svc.destroy();
  }
});
