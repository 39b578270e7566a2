import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { StoredEvent } from '../src/core/types.ts';
import { walkEnvironment } from '../src/store/lmdb/lmdb-probe.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';

/**
 * `npx tsx bench/lmdb-walk.ts [events]`: what the startup walk of analytics.lmdb (src/store/lmdb/lmdb-walk.mjs) costs.
 * Fills a log with `events` events with eventIds (remembered with them, as the service writes them), then times the
 * walk in its child process, whole and sampled only (budget 0), the file in the page cache. Not part of `npm run bench`.
 */

const TOTAL = Number(process.argv[2] ?? 1_000_000);
/** Events per append while filling: one request's batch (one project per entry, as the service writes them). */
const FILL_BATCH = 100;
/** Appends in flight at once while filling (lmdb-js groups them into few commits, as under load). */
const FILL_CONCURRENCY = 200;

function event(i: number): StoredEvent {
  return {
    t: 'e', p: 'p_bench', ts: 1_763_700_000_000 + i, rt: 1_763_700_000_000 + i, day: '2026-11-21', event: 'page_view',
    url: `https://shop.example/products/${i % 5000}?utm_source=news`, path: `/products/${i % 5000}`, referrer: 'google.com',
    source: 'Google', sessionId: `s${i % 20000}`, user: `s:s${i % 20000}`, country: 'DE', device: 'desktop', params: { plan: 'pro' },
    eventId: `e-${i}-${(i * 2654435761) % 1e9}`,
  };
}

const dir = mkdtempSync(path.join(tmpdir(), 'analytics-walk-'));
try {
  const store = LogStore.open(dir, 'commit');
  const ids = store.openRememberedIds();
  let inFlight: Promise<number>[] = [];
  for (let i = 0; i < TOTAL; i += FILL_BATCH) {
    const records = Array.from({ length: Math.min(FILL_BATCH, TOTAL - i) }, (_, j) => event(i + j));
    inFlight.push(store.append(records, () => ids.writeWith(records)));
    if (inFlight.length >= FILL_CONCURRENCY) {
      await Promise.all(inFlight);
      inFlight = [];
    }
  }
  await Promise.all(inFlight);
  await store.close();
  const file = path.join(dir, 'analytics.lmdb');
  const size = statSync(file).size;
  const gb = size / 1024 ** 3;
  for (const budget of [Number.MAX_SAFE_INTEGER, 0]) {
    walkEnvironment(file, { budget }); // warm the page cache
    const r = walkEnvironment(file, { budget });
    console.log(
      `${budget ? 'whole walk' : 'sampled (budget 0)'}: ${r.records} records read one by one, ${r.sampled} table(s) sampled, ${r.ms} ms for ${(size / 1024 ** 2).toFixed(0)} MiB ` +
        `(${Math.round(r.ms / gb)} ms/GiB, ${Math.round((r.ms / TOTAL) * 1e6)} ms per 1M events)`,
    );
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
