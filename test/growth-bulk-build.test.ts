import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { buildBulk } from '../bench/growth/build-bulk.ts';
import { projectIds, type BuildArgs } from '../bench/growth/build-common.ts';
import { buildReplay } from '../bench/growth/build-replay.ts';
import { addDays } from '../src/core/dates.ts';
import { RECENT_RING_SIZE } from '../src/core/limits.ts';
import { RecentRing, type PackedRing } from '../src/core/recent-ring.ts';
import { generateKey } from '../src/engine/keys.ts';
import { SnapshotFiles } from '../src/store/files/snapshot-files.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';
import { api, startTestService } from './helpers.ts';

/**
 * The growth bench's bulk build (bench/growth/build-bulk.ts) writes what the service's own per-batch path writes
 * (build-replay.ts: the reducer, the real Sealer and column projection, batch by batch). The same small traffic is
 * built both ways and compared: every sealed day and month rollup as stored, the log's records, the snapshot's live
 * state, and what a fresh service on each directory answers to GET /metrics (30 days, 12 months, calendar months,
 * single days, every project) and POST /query. Small batches make many batch ends, and the Zipf tail's projects have
 * days without events, so months get a rollup or none as the Sealer decides.
 */

const PROJECTS = 12;
const EVENTS = 30_000;
const DAYS = 100;
/** 15 batch ends, each sealing a few days: the rollup of a month is written at some and not at others. */
const BATCH = 2_000;

const lastDay = new Date().toISOString().slice(0, 10);
const now = Date.now();
let root: string;
const args = (dir: string, mode: 'bulk' | 'replay'): BuildArgs => ({ dir, projects: PROJECTS, events: EVENTS, days: DAYS, lastDay, appendBatch: BATCH, mode, adminKey, secretKey });
const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
const secretKey = generateKey('secret');
let replayDir: string;
let bulkDir: string;

before(async () => {
  root = mkdtempSync(path.join(tmpdir(), 'growth-bulk-'));
  replayDir = path.join(root, 'replay');
  bulkDir = path.join(root, 'bulk');
  await Promise.all([buildReplay(args(replayDir, 'replay')), buildBulk(args(bulkDir, 'bulk'))]);
});
after(() => rmSync(root, { recursive: true, force: true }));

function stored(dir: string) {
  const store = LogStore.open(dir, 'commit', { readOnly: true });
  try {
    const sealed = store.openSealedStore();
    return { days: [...sealed.allDays()], months: [...sealed.allMonths()], records: [...store.readAfter(0)], lastSeq: store.lastSeq() };
  } finally {
    void store.close();
  }
}

/**
 * The snapshot, each project's ring as its entries (oldest first): the bulk build pushes only a project's newest events
 * (build-bulk.ts RING_SAFETY), so its string table is numbered differently; the entries must be the same.
 */
function snapshot(dir: string) {
  const files = new SnapshotFiles(dir, { inspectOnly: true });
  const all = files.inspect();
  assert.equal(all.length, 1, `one snapshot in ${dir}`);
  assert.ok(all[0]!.data, all[0]!.problem);
  const data = all[0]!.data;
  return {
    ...data,
    projects: data.projects.map((p) => {
      const ring = new RecentRing(RECENT_RING_SIZE);
      ring.restorePacked(p.recent as PackedRing);
      return { ...p, recent: ring.oldestFirst() };
    }),
  };
}

test('sealed days, month rollups, the log and the snapshot are the same as the replay build wrote', () => {
  const r = stored(replayDir);
  const b = stored(bulkDir);
  assert.equal(b.lastSeq, EVENTS);
  assert.deepEqual(b.records, r.records);
  assert.ok(r.days.length > PROJECTS * 30, `sealed days: ${r.days.length}`);
  assert.deepEqual(b.days, r.days);
  // Not every project-month whose days are sealed has a rollup: the rule the bulk build follows is exercised both ways.
  const monthsWithDays = new Set(r.days.map((d) => `${d.projectId} ${d.date.slice(0, 7)}`));
  assert.ok(r.months.length > PROJECTS, `rollups: ${r.months.length}`);
  assert.ok(r.months.length < monthsWithDays.size, `rollups ${r.months.length} of ${monthsWithDays.size} sealed project-months`);
  assert.deepEqual(b.months, r.months);
  const bulkSnap = snapshot(bulkDir);
  const replaySnap = snapshot(replayDir);
  // the busiest project's ring is full: the bulk build left most of its events out of it
  assert.equal((replaySnap.projects.find((p) => p.id === projectIds(PROJECTS)[0])!.recent as unknown[]).length, RECENT_RING_SIZE);
  assert.deepEqual(bulkSnap, replaySnap);
});

test('a fresh service on each directory answers GET /metrics and POST /query the same', async () => {
  const ids = projectIds(PROJECTS);
  const first = addDays(lastDay, -(DAYS - 1));
  const month = (d: string) => [`${d.slice(0, 7)}-01`, addDays(`${addDays(`${d.slice(0, 7)}-28`, 4).slice(0, 7)}-01`, -1)] as const;
  const ranges: Array<readonly [string, string]> = [
    [addDays(lastDay, -29), lastDay],
    [addDays(lastDay, -364), lastDay],
    [first, lastDay],
    month(first),
    month(addDays(first, 40)),
    month(addDays(first, 70)),
    [first, first],
    [addDays(first, 31), addDays(first, 31)],
    [addDays(lastDay, -40), addDays(lastDay, -40)],
    [lastDay, lastDay],
  ];
  const questions = [
    { metrics: ['visitors', 'visits', 'pageviews', 'events', 'bounceRate', 'viewsPerVisit', 'visitDuration'], from: first, to: lastDay },
    { metrics: ['visitors', 'pageviews'], dimensions: ['source', 'device'], from: addDays(lastDay, -59), to: lastDay },
    { metrics: ['visits', 'bounceRate'], dimensions: ['time:week'], from: first, to: lastDay },
    { metrics: ['visitors'], dimensions: ['page'], filters: [['is', 'country', ['US', 'DE']]], from: addDays(lastDay, -20), to: lastDay },
    { metrics: ['visitDuration', 'visits'], dimensions: ['entryPage', 'exitPage'], date: addDays(lastDay, -45) },
  ];
  const answers = async (dir: string) => {
    const svc = await startTestService({}, { dataDir: dir, adminKey, now: () => now });
    try {
      const out: unknown[] = [];
      for (const id of ids) {
        for (const [from, to] of ranges) {
          const r = await api(svc.url, `/metrics?projectId=${id}&from=${from}&to=${to}`, { key: adminKey });
          assert.equal(r.status, 200, JSON.stringify(r.body));
          out.push(r.body);
        }
        for (const q of id === ids[0] || id === ids.at(-1) ? questions : []) {
          const r = await api(svc.url, '/query', { key: adminKey, body: { projectId: id, ...q } });
          assert.equal(r.status, 200, JSON.stringify(r.body));
          out.push(r.body);
        }
      }
      return out;
    } finally {
      await svc.stop();
    }
  };
  const r = await answers(replayDir);
  const b = await answers(bulkDir);
  // The answers hold traffic (not a pair of empty projects answering zeros alike).
  const year = r[1] as { pageviews: number };
  assert.ok(year.pageviews > EVENTS / 4, JSON.stringify(year).slice(0, 200));
  assert.equal(b.length, r.length);
  for (let i = 0; i < r.length; i++) assert.deepEqual(b[i], r[i], `answer ${i}`);
});
