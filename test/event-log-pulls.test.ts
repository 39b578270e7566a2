import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { LogRecord } from '../src/core/types.ts';
import { connectNats, type NatsConnection } from '../src/store/nats/connect.ts';
import { batchIdFor, JetStreamEventLog } from '../src/store/nats/event-log.ts';
import { ensureEventStream } from '../src/store/nats/resources.ts';
import { startNatsCluster, type NatsCluster } from './nats-cluster.ts';

/**
 * Ingest mixes single events (one small message each) and batches (one large message each). A consumer pulling by
 * bytes stalled at the first large message after many small ones (client v3 against nats-server 2.9.10: the refill
 * pull asked for the few bytes its stale accounting had left, the server answered 409 "Message Size Exceeds
 * MaxBytes", and the client waited for heartbeats), so replays and followers lost 10 s to the watchdog at every
 * such change: found by bench/cluster.ts (replay 5.6k events/s instead of ~75k).
 */

const TEST_STREAM_BYTES = 64 * 1024 * 1024;
/** Enough small messages to use up more than one pull of 100 messages, then large ones. */
const SMALL = 250;
const LARGE = 60;

let cluster: NatsCluster;
let nc: NatsConnection;
let follow: NatsConnection;

before(async () => {
  cluster = await startNatsCluster();
  nc = await connectNats(cluster.urlList, 'pulls-test');
  follow = await connectNats(cluster.urlList, 'pulls-test-follow');
});

after(async () => {
  await follow?.close();
  await nc?.close();
  await cluster?.stop();
});

function record(i: number): LogRecord {
  const now = Date.now();
  return {
    t: 'e', p: 'p_mixed', ts: now, rt: now, day: new Date(now).toISOString().slice(0, 10), event: 'page_view',
    url: `https://site.example/a/${i % 40}`, path: `/a/${i % 40}`, referrer: '', source: 'Direct', sessionId: `s${i % 97}`,
    user: `s:s${i % 97}`, country: 'DE', device: 'desktop', eventId: `e${i}`,
  } as LogRecord;
}

test('a replay and a follower read single-event and batch messages mixed without stalling', async () => {
  const names = await ensureEventStream(nc, { tag: `pulls${process.pid}`, maxStreamBytes: TEST_STREAM_BYTES });
  const lines: string[] = [];
  const log = await JetStreamEventLog.open(nc, [follow], names, 1, { log: (l) => lines.push(l) });
  let n = 0;
  const append = async (size: number) => {
    const records = Array.from({ length: size }, () => record(n++));
    await log.append(0, records, batchIdFor('p_mixed', records));
  };
  // small, large, small, large: two changes from small to large messages
  for (const [count, size] of [[SMALL, 1], [LARGE, 100], [SMALL, 1], [LARGE, 100]] as const) {
    for (let i = 0; i < count; i += 16) await Promise.all(Array.from({ length: Math.min(16, count - i) }, () => append(size)));
  }
  const messages = 2 * (SMALL + LARGE);

  const started = Date.now();
  let read = 0;
  let events = 0;
  for await (const entries of log.read(0, 0)) {
    read += entries.length;
    for (const e of entries) events += e.records.length;
  }
  const readMs = Date.now() - started;
  assert.equal(read, messages);
  assert.equal(events, n);
  assert.deepEqual(lines.filter((l) => /stalled/.test(l)), [], `the replay never stalled (took ${readMs} ms)`);

  let folded = 0;
  const follower = log.follow(0, 0, () => folded++);
  const deadline = Date.now() + 60_000;
  while (folded < messages && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  await follower.stop();
  assert.equal(folded, messages);
  assert.equal(follower.restarts, 0, `the follower needed no watchdog restart: ${lines.join(' | ')}`);
  await log.close();
});
