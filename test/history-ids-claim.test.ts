import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import type { LogRecord, StoredEvent } from '../src/core/types.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';

function event(p: string, eventId: string | undefined, h: 1 | undefined): StoredEvent {
  const e: StoredEvent = { t: 'e', p, ts: Date.UTC(2021, 4, 1), rt: 1, day: '2021-05-01', event: 'e', url: '', path: '', referrer: '', source: 'Direct', sessionId: 's', user: 's:s', country: 'Unknown', device: 'unknown', params: {} };
  if (eventId !== undefined) e.eventId = eventId;
  if (h !== undefined) e.h = h;
  return e;
}

const ids = (rs: readonly LogRecord[]) => rs.map((r) => (r.t === 'e' ? `${r.p}/${r.eventId ?? '-'}${r.h === 1 ? 'h' : ''}` : r.t));

test("history ids are claimed in the append's transaction: a repeat is dropped there, a batch of repeats appends nothing, and the claims outlive a restart", async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'history-claim-'));
  let store = LogStore.open(dir, 'commit');
  try {
    const history = store.openHistoryIds();
    const append = async (records: LogRecord[]) => {
      let kept: readonly LogRecord[] = records;
      await store.append(records, undefined, (given) => (kept = history.claim(given)));
      return ids(kept);
    };
    assert.deepEqual(await append([event('p1', 'a', 1), event('p1', 'b', 1), event('p2', 'a', 1)]), ['p1/ah', 'p1/bh', 'p2/ah']);
    assert.equal(store.lastSeq(), 3);
    // repeats of p1's ids are dropped; the same id in another project, a live event and an event without an id are not
    assert.deepEqual(await append([event('p1', 'a', 1), event('p1', 'c', 1), event('p1', 'b', 1), event('p3', 'b', 1), event('p1', 'a', undefined), event('p1', undefined, 1)]), ['p1/ch', 'p3/bh', 'p1/a', 'p1/-h']);
    assert.equal(store.lastSeq(), 7);
    // nothing new: no entry at all, the sequence does not move
    assert.deepEqual(await append([event('p1', 'a', 1), event('p1', 'c', 1)]), []);
    assert.equal(store.lastSeq(), 7);
    assert.equal([...store.readAfter(0)].length, 7);
    assert.deepEqual(await append([event('p1', 'd', 1)]), ['p1/dh']);
    // the claims are durable with their events
    await store.close();
    store = LogStore.open(dir, 'commit');
    const reopened = store.openHistoryIds();
    assert.equal(reopened.count('p1'), 4);
    let kept: readonly LogRecord[] = [];
    await store.append([event('p1', 'd', 1), event('p1', 'e', 1)], undefined, (given) => (kept = reopened.claim(given)));
    assert.deepEqual(ids(kept), ['p1/eh']);
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
