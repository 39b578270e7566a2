import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import type { LogRecord, StoredEvent } from '../src/core/types.ts';
import { LmdbEventLog } from '../src/store/lmdb/lmdb-event-log.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';
import { connectNats, type NatsConnection } from '../src/store/nats/connect.ts';
import { batchIdFor, JetStreamEventLog, LogUnavailable, WATCHDOG_STALL_MS } from '../src/store/nats/event-log.ts';
import { ensureEventStream, partitionOf, resourceNames } from '../src/store/nats/resources.ts';
import type { EventLog, LogEntry } from '../src/store/seams.ts';
import { startNatsCluster, type NatsCluster } from './nats-cluster.ts';

/**
 * One contract for both event logs (CLUSTER.md §3, §11 test 1): the LMDB log of single-node mode and the JetStream
 * stream of cluster mode, each on real storage (LMDB in a temp dir; a real 3-server nats-server cluster).
 */

const DAY = '2026-11-23';
const T0 = Date.UTC(2026, 10, 23, 12);
/** Streams are tiny in tests: each reserves max_bytes of the servers' 4 GB file store. */
const TEST_STREAM_BYTES = 64 * 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function ev(projectId: string, n: number, eventId?: string): StoredEvent {
  const e: StoredEvent = {
    t: 'e',
    p: projectId,
    ts: T0 + n,
    rt: T0 + n,
    day: DAY,
    event: 'pageview',
    url: `https://example.com/p/${n}`,
    path: `/p/${n}`,
    referrer: '',
    source: 'Direct',
    sessionId: `s${n % 7}`,
    user: `s:s${n % 7}`,
    country: 'DE',
    device: 'desktop',
    params: {},
  };
  if (eventId !== undefined) e.eventId = eventId;
  return e;
}

async function collect(log: EventLog, p: number, after: number): Promise<LogEntry[]> {
  const out: LogEntry[] = [];
  for await (const chunk of log.read(p, after)) out.push(...chunk);
  return out;
}

async function waitFor(what: string, cond: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(50);
  }
}

interface Subject {
  name: string;
  make(): Promise<{ log: EventLog; partition: number; cleanup: () => Promise<void> }>;
  transportDuplicates: boolean;
  /** the sequence a fold holds after an entry: LMDB numbers records (an entry covers seq … seq + n − 1), JetStream messages */
  end(e: { seq: number; records: readonly unknown[] }): number;
}

let cluster: NatsCluster;
let nc: NatsConnection;
let followNc: NatsConnection;
let tagN = 0;
const tag = () => `c${process.pid}_${tagN++}`;

const subjects: Subject[] = [
  {
    name: 'LMDB',
    transportDuplicates: false,
    end: (e) => e.seq + e.records.length - 1,
    async make() {
      const dir = mkdtempSync(path.join(tmpdir(), 'event-log-lmdb-'));
      const store = LogStore.open(dir, 'commit');
      const log = new LmdbEventLog(store);
      return {
        log,
        partition: 0,
        cleanup: async () => {
          await log.close();
          await store.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  },
  {
    name: 'JetStream',
    transportDuplicates: true,
    end: (e) => e.seq,
    async make() {
      const res = { names: await ensureEventStream(nc, { tag: tag(), maxStreamBytes: TEST_STREAM_BYTES }), partitions: 4 };
      const log = await JetStreamEventLog.open(nc, [followNc], res.names, res.partitions);
      return { log, partition: partitionOf('proj-a', res.partitions), cleanup: () => log.close() };
    },
  },
];

before(async () => {
  cluster = await startNatsCluster();
  nc = await connectNats(cluster.urls, 'contract-ingest');
  followNc = await connectNats(cluster.urlList, 'contract-follow');
});

after(async () => {
  await nc?.close();
  await followNc?.close();
  await cluster?.stop();
});

for (const s of subjects) {
  describe(`the event log contract holds for ${s.name}`, { concurrency: true }, () => {
    test('appends come back in order, a batch is one entry, read starts after the given sequence and lastSeq is the newest', async () => {
      const { log, partition: p, cleanup } = await s.make();
      try {
        assert.equal(await log.lastSeq(p), 0, 'an empty log ends at 0');
        assert.deepEqual(await collect(log, p, 0), []);
        const batches: LogRecord[][] = [];
        const seqs: number[] = [];
        for (let b = 0; b < 30; b++) {
          const size = 1 + (b % 5);
          const recs = Array.from({ length: size }, (_, i) => ev('proj-a', b * 10 + i, `id-${b}-${i}`));
          batches.push(recs);
          const a = await log.append(p, recs, batchIdFor('proj-a', recs));
          assert.equal(a.duplicate, false);
          seqs.push(a.seq);
        }
        for (let i = 1; i < seqs.length; i++) assert.ok(seqs[i]! > seqs[i - 1]!, 'sequences increase');
        assert.equal(await log.lastSeq(p), s.end({ seq: seqs.at(-1)!, records: batches.at(-1)! }), 'lastSeq is where the newest entry ends');
        const all = await collect(log, p, 0);
        assert.equal(all.length, 30, 'one entry per batch');
        assert.deepEqual(all.map((e) => e.seq), seqs);
        assert.deepEqual(all.map((e) => e.records), batches, 'records as appended, in order');
        if (s.transportDuplicates) assert.deepEqual(all.map((e) => e.batchId), batches.map((b) => batchIdFor('proj-a', b)), 'each entry carries its batch id');
        const tail = await collect(log, p, s.end(all[19]!));
        assert.deepEqual(tail.map((e) => e.seq), seqs.slice(20), 'read after an entry starts at the next one');
        assert.deepEqual(await collect(log, p, await log.lastSeq(p)), [], 'nothing after the end');
        // read is bounded by the end as of the call: later appends are not part of it
        const it = log.read(p, 0)[Symbol.asyncIterator]();
        const first = await it.next();
        await log.append(p, [ev('proj-a', 999)], batchIdFor('proj-a', [ev('proj-a', 999)]));
        let n = first.done ? 0 : first.value.length;
        for (let r = await it.next(); !r.done; r = await it.next()) n += r.value.length;
        assert.equal(n, 30);
      } finally {
        await cleanup();
      }
    });

    test(s.transportDuplicates ? 'the same batch id stored twice is answered duplicate and stored once' : 'LMDB has no transport duplicates: a repeated batch id is a new entry (ingest refuses a repeated eventId instead)', async () => {
      const { log, partition: p, cleanup } = await s.make();
      try {
        const recs = [ev('proj-a', 1, 'dup-1'), ev('proj-a', 2, 'dup-2')];
        const id = batchIdFor('proj-a', recs);
        assert.equal(id, batchIdFor('proj-a', [...recs].reverse()), 'the id of a batch of eventIds does not depend on their order');
        assert.match(batchIdFor('proj-a', [ev('proj-a', 3)]), /^r:/, 'a batch without eventIds gets a random id');
        const a = await log.append(p, recs, id);
        const b = await log.append(p, recs, id);
        assert.equal(a.duplicate, false);
        if (s.transportDuplicates) {
          assert.equal(b.duplicate, true);
          assert.equal(b.seq, a.seq, 'the duplicate answer names the stored entry');
          assert.equal((await collect(log, p, 0)).length, 1);
        } else {
          assert.equal(b.duplicate, false);
          assert.equal((await collect(log, p, 0)).length, 2);
          assert.throws(() => log.follow(p, 0, () => {}), /folds each batch inline/, 'LMDB has no live tail: the engine folds inline');
        }
      } finally {
        await cleanup();
      }
    });
  });
}

// These share the cluster without faulting it: concurrently (the watchdog test mostly waits out its 10 s stall).
describe('the JetStream event log', { concurrency: true }, () => {
  test('keeps partitions apart: each subject reads and ends on its own', async () => {
    const res = { names: await ensureEventStream(nc, { tag: tag(), maxStreamBytes: TEST_STREAM_BYTES }), partitions: 3 };
    const log = await JetStreamEventLog.open(nc, [followNc], res.names, res.partitions);
    try {
      const seqs: number[][] = [[], [], []];
      for (let i = 0; i < 12; i++) seqs[i % 3]!.push((await log.append(i % 3, [ev(`proj-${i % 3}`, i)], `r:${i}`)).seq);
      for (let p = 0; p < 3; p++) {
        assert.equal(await log.lastSeq(p), seqs[p]!.at(-1));
        assert.deepEqual((await collect(log, p, 0)).map((e) => e.seq), seqs[p]);
      }
      await assert.rejects(log.append(3, [ev('x', 1)], 'r:x'), RangeError);
      // what a snapshot's resume check asks
      assert.equal(await log.batchIdAt(seqs[1]![2]!), 'r:7');
      assert.equal(await log.batchIdAt(seqs[2]!.at(-1)! + 1000), undefined);
      assert.equal(await log.firstSeq(), 1);
    } finally {
      await log.close();
    }
  });

  test('a follower delivers past and live entries in order, each once, and stops', async () => {
    const res = { names: await ensureEventStream(nc, { tag: tag(), maxStreamBytes: TEST_STREAM_BYTES }), partitions: 2 };
    const log = await JetStreamEventLog.open(nc, [followNc], res.names, res.partitions);
    try {
      const appended: number[] = [];
      for (let i = 0; i < 5; i++) appended.push((await log.append(1, [ev('p', i)], `r:a${i}`)).seq);
      const got: LogEntry[] = [];
      const f = log.follow(1, appended[1]!, (e) => got.push(e));
      await waitFor('the past entries', () => got.length === 3, 10_000);
      for (let i = 5; i < 25; i++) {
        appended.push((await log.append(1, [ev('p', i)], `r:a${i}`)).seq);
        await log.append(0, [ev('q', i)], `r:b${i}`); // another partition: never delivered here
      }
      await log.append(1, [ev('p', 5)], 'r:a5'); // a transport retry: stored once, delivered once
      await waitFor('the live entries', () => got.length === 23, 10_000);
      assert.deepEqual(got.map((e) => e.seq), appended.slice(2));
      assert.equal(f.lastSeq, appended.at(-1));
      await f.stop();
      await log.append(1, [ev('p', 99)], 'r:after-stop');
      await sleep(300);
      assert.equal(got.length, 23, 'nothing after stop');
    } finally {
      await log.close();
    }
  });

  test('the watchdog revives a follower whose consumer was deleted server-side', async () => {
    const res = { names: await ensureEventStream(nc, { tag: tag(), maxStreamBytes: TEST_STREAM_BYTES }), partitions: 1 };
    const lines: string[] = [];
    const log = await JetStreamEventLog.open(nc, [followNc], res.names, res.partitions, { consumerPrefix: 'wd', log: (l) => lines.push(l) });
    const jsm = await jetstreamManager(nc);
    try {
      const got: number[] = [];
      const f = log.follow(0, 0, (e) => got.push(e.seq));
      let last = 0;
      for (let i = 0; i < 5; i++) last = (await log.append(0, [ev('p', i)], `r:w${i}`)).seq;
      await waitFor('the first entries', () => got.length === 5, 10_000);
      // delete every consumer of the stream on the servers: the follower's ordered consumer is gone
      let deleted = 0;
      for await (const ci of jsm.consumers.list(res.names.stream)) {
        if (ci.name.startsWith('wd_fold_p0_')) deleted += (await jsm.consumers.delete(res.names.stream, ci.name)) ? 1 : 0;
      }
      assert.ok(deleted >= 1, 'the follower had a consumer to delete');
      const started = Date.now();
      for (let i = 5; i < 15; i++) {
        last = (await log.append(0, [ev('p', i)], `r:w${i}`)).seq;
        await sleep(100);
      }
      await waitFor('folding to resume', () => f.lastSeq === last, WATCHDOG_STALL_MS + 20_000);
      const seqs = got;
      assert.equal(new Set(seqs).size, seqs.length, 'no entry twice');
      assert.deepEqual([...seqs].sort((a, b) => a - b), seqs, 'in order');
      assert.equal(seqs.length, 15);
      console.log(`# resumed ${Date.now() - started} ms after the delete; watchdog restarts: ${f.restarts}; ${lines.join(' | ')}`);
      await f.stop();
    } finally {
      await log.close();
    }
  });

  test('a replay whose consumer is deleted server-side midway is resumed by a fresh consumer and reads every entry once', async () => {
    const res = { names: await ensureEventStream(nc, { tag: tag(), maxStreamBytes: TEST_STREAM_BYTES }), partitions: 1 };
    const lines: string[] = [];
    const log = await JetStreamEventLog.open(nc, [followNc], res.names, res.partitions, { consumerPrefix: 'rd', log: (l) => lines.push(l) });
    const jsm = await jetstreamManager(nc);
    try {
      // ~40 KB per entry: more than the chunk (256 entries) and one 5 MiB pull together, so the rest needs new pulls
      const batch = Array.from({ length: 100 }, (_, i) => ev('p', i));
      const TOTAL = 600;
      for (let i = 0; i < TOTAL; i += 50) await Promise.all(Array.from({ length: 50 }, (_, j) => log.append(0, batch, `r:rd${i + j}`)));
      const it = log.read(0, 0)[Symbol.asyncIterator]();
      const first = await it.next();
      assert.ok(!first.done);
      const seqs = first.value.map((e) => e.seq);
      for await (const ci of jsm.consumers.list(res.names.stream)) if (ci.name.startsWith('rd_read_p0_')) await jsm.consumers.delete(res.names.stream, ci.name);
      for (let r = await it.next(); !r.done; r = await it.next()) seqs.push(...r.value.map((e) => e.seq));
      assert.equal(seqs.length, TOTAL, 'every entry');
      assert.equal(new Set(seqs).size, TOTAL, 'each once');
      assert.deepEqual([...seqs].sort((x, y) => x - y), seqs, 'in order');
      console.log(`# replay after its consumer was deleted: ${lines.join(' | ') || 'no stall (the client recovered by itself)'}`);
    } finally {
      await log.close();
    }
  });

  test('an append nobody acknowledges is retried under its id until the deadline, then fails as LogUnavailable', async () => {
    // no stream listens on these subjects: every attempt meets no responders, as while a stream has no leader
    const log = await JetStreamEventLog.open(nc, [followNc], resourceNames(`absent${process.pid}`), 1, { publishDeadlineMs: 1_000 });
    const started = Date.now();
    const err = await log.append(0, [ev('p', 1)], 'r:never').then(() => undefined, (e: unknown) => e);
    const took = Date.now() - started;
    assert.ok(err instanceof LogUnavailable, `LogUnavailable, not ${String(err)}`);
    assert.equal(err.reason, 'deadline');
    assert.ok(took >= 900 && took < 10_000, `gave up after the deadline (${took} ms)`);
  });

  test('a full stream refuses appends at once as LogUnavailable (discard: new keeps history)', async () => {
    const res = { names: await ensureEventStream(nc, { tag: tag(), maxStreamBytes: 64 * 1024 }), partitions: 1 };
    const log = await JetStreamEventLog.open(nc, [followNc], res.names, res.partitions);
    const big = Array.from({ length: 40 }, (_, i) => ev('p', i));
    let stored = 0;
    let refused: unknown;
    for (let i = 0; i < 50 && refused === undefined; i++) {
      try {
        await log.append(0, big, `r:full${i}`);
        stored++;
      } catch (err) {
        refused = err;
      }
    }
    assert.ok(refused instanceof LogUnavailable, `refused as LogUnavailable, not ${String(refused)}`);
    assert.equal(refused.reason, 'full');
    assert.ok(stored > 0);
    assert.equal((await collect(log, 0, 0)).length, stored, 'what was stored stays');
  });

});

describe('the JetStream event log across a stream-leader kill', () => {
  test('appends across a stream-leader kill lose nothing: every acknowledged batch is stored exactly once', { timeout: 120_000 }, async () => {
    const res = { names: await ensureEventStream(nc, { tag: tag(), maxStreamBytes: TEST_STREAM_BYTES }), partitions: 2 };
    const log = await JetStreamEventLog.open(nc, [followNc], res.names, res.partitions);
    try {
      const acked = new Map<string, number>();
      const failures: unknown[] = [];
      const TOTAL = 400;
      let next = 0;
      let longest = 0;
      let duplicates = 0;
      const worker = async () => {
        while (next < TOTAL) {
          const i = next++;
          const recs = [ev(`proj-${i % 2}`, i, `k-${i}`)];
          try {
            const t = Date.now();
            const a = await log.append(i % 2, recs, batchIdFor(`proj-${i % 2}`, recs));
            longest = Math.max(longest, Date.now() - t);
            if (a.duplicate) duplicates++;
            acked.set(`k-${i}`, a.seq);
          } catch (err) {
            failures.push(err);
          }
          await sleep(5);
        }
      };
      const workers = Array.from({ length: 8 }, worker);
      await waitFor('some appends', () => acked.size >= 50, 20_000);
      const leader = await cluster.streamLeader(res.names.stream);
      assert.ok(leader, 'the stream has a leader');
      const idx = cluster.servers.findIndex((s) => s.name === leader);
      await cluster.kill(idx);
      await Promise.all(workers);
      await cluster.start(idx);
      assert.deepEqual(failures.filter((e) => !(e instanceof LogUnavailable)), [], 'only LogUnavailable may fail an append');
      assert.equal(failures.length, 0, 'no append failed within the 30 s deadline');
      assert.equal(acked.size, TOTAL);
      const seen = new Map<string, number>();
      for (let p = 0; p < 2; p++) {
        for (const e of await collect(log, p, 0)) {
          for (const r of e.records) {
            const id = (r as StoredEvent).eventId!;
            seen.set(id, (seen.get(id) ?? 0) + 1);
          }
        }
      }
      for (const id of acked.keys()) assert.equal(seen.get(id), 1, `${id} stored exactly once`);
      assert.equal(seen.size, TOTAL);
      console.log(`# leader ${leader} killed: longest append ${longest} ms, ${duplicates} answered duplicate (a retry of a stored batch)`);
    } finally {
      await log.close();
    }
  });
});
