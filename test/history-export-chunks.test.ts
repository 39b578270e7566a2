import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import type { StoredEvent } from '../src/core/types.ts';
import { EXPORT_CHUNK_EVENTS, exportEvents } from '../src/engine/history-export.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';

const DAY_MS = 86_400_000;
const START = Date.UTC(2020, 0, 1);

function event(p: string, ts: number): StoredEvent {
  const day = new Date(ts).toISOString().slice(0, 10);
  return { t: 'e', p, ts, rt: 1, day, event: 'e', url: '', path: '', referrer: '', source: 'Direct', sessionId: 's', user: 's:s', country: 'Unknown', device: 'unknown', params: {}, h: 1 };
}

test('export reads the log in bounded chunks of whole days, a large day in time slices, every chunk in time order', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'export-chunks-'));
  const store = LogStore.open(dir, 'commit');
  try {
    // a large day (more than a chunk) received backwards in time, small days interleaved, another project around them
    const big = EXPORT_CHUNK_EVENTS + 10_000;
    const records: StoredEvent[] = [];
    for (let i = big - 1; i >= 0; i--) records.push(event('p1', START + Math.floor((i * DAY_MS) / big)));
    for (let d = 1; d <= 20; d++) for (let i = 0; i < 100; i++) records.push(event(i % 2 ? 'p1' : 'p2', START + d * DAY_MS + (99 - i) * 1000));
    for (let i = 0; i < records.length; i += 500) await store.append(records.slice(i, i + 500));
    const chunks: StoredEvent[][] = [];
    let reported = 0;
    for await (const c of exportEvents(store, 'p1', '2020-01-01', '2020-01-15', (done) => (reported = done))) chunks.push(c);
    const all = chunks.flat();
    assert.equal(all.length, big + 14 * 50);
    assert.equal(reported, all.length);
    assert.ok(chunks.every((c) => c.length <= EXPORT_CHUNK_EVENTS), chunks.map((c) => c.length).join());
    assert.ok(chunks.length >= 3, 'the large day is cut in two, the small days are one chunk');
    assert.ok(all.every((e, i) => e.p === 'p1' && e.day <= '2020-01-15' && (i === 0 || e.ts >= all[i - 1]!.ts)), 'time order across chunks');
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
