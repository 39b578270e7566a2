import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { StoredEvent } from '../src/core/types.ts';
import { LogStore } from '../src/store/log-store.ts';

/**
 * `npx tsx bench/erase.ts [events]`: what DELETE /projects/{id} costs in storage. Fills a log with `events` events
 * (a tenth of its 100-event batches in the project to delete), then times the erasure (scan + tombstones) and the
 * compaction (copy of live pages + swap) separately, with the file size before and after. Not part of `npm run bench`.
 */

const TOTAL = Number(process.argv[2] ?? 1_000_000);
/** Events per append while filling: one request's batch (one project per entry, as the service writes them). */
const FILL_BATCH = 100;
/** Appends in flight at once while filling (lmdb-js groups them into few commits, as under load). */
const FILL_CONCURRENCY = 200;

function event(i: number, project: string): StoredEvent {
  return {
    t: 'e', p: project, ts: 1_763_700_000_000 + i, rt: 1_763_700_000_000 + i, day: '2026-11-21', event: 'page_view',
    url: `https://shop.example/products/${i % 5000}?utm_source=news`, path: `/products/${i % 5000}`, referrer: 'google.com',
    source: 'Google', sessionId: `s${i % 20000}`, user: `s:s${i % 20000}`, country: 'DE', device: 'desktop', params: { plan: 'pro' },
    eventId: `e-${i}`,
  };
}

const dir = mkdtempSync(path.join(tmpdir(), 'analytics-erase-'));
try {
  const store = LogStore.open(dir, 'commit');
  let inFlight: Promise<number>[] = [];
  for (let i = 0; i < TOTAL; i += FILL_BATCH) {
    const project = (i / FILL_BATCH) % 10 === 0 ? 'p_doomed' : 'p_kept'; // a tenth of the batches
    inFlight.push(store.append(Array.from({ length: Math.min(FILL_BATCH, TOTAL - i) }, (_, j) => event(i + j, project))));
    if (inFlight.length >= FILL_CONCURRENCY) {
      await Promise.all(inFlight);
      inFlight = [];
    }
  }
  await Promise.all(inFlight);
  const file = path.join(dir, 'analytics.lmdb');
  const before = statSync(file).size;
  let t = performance.now();
  // eraseProjectEvents = scan + tombstones + compaction; time compaction alone afterwards on the same data
  const erased = await store.eraseProjectEvents('p_doomed');
  const eraseAndCompactMs = performance.now() - t;
  t = performance.now();
  await store.compact();
  const compactMs = performance.now() - t;
  const after = statSync(file).size;
  await store.close();
  const mb = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MiB`;
  console.log(`events ${TOTAL}, erased ${erased}`);
  console.log(`erase + compaction: ${Math.round(eraseAndCompactMs)} ms (compaction alone, same data: ${Math.round(compactMs)} ms)`);
  console.log(`file: ${mb(before)} before, ${mb(after)} after`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
