import { closeSync, fdatasyncSync, openSync, writeSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { open, type RootDatabase } from 'lmdb';
import { newHistogram, summarize, type LatencySummary } from '../lib/latency.ts';

/**
 * The floors every ingest figure is divided by, measured in the same run on the same machine:
 * - `bare`: node:http that reads the body, JSON.parses it and answers `{ ok, ts, accepted }`: the cost of HTTP + JSON.
 * - `lmdb`: the same plus one lmdb-js put per event and the answer after `await db.flushed`: the durable-ack floor.
 * - raw batch puts: transactions of 100 puts into lmdb, no HTTP, `flushed` awaited: the storage ceiling for batches.
 * LMDB is opened exactly as src/store/lmdb/log-store.ts opens it (msgpack values, integer keys, one env file).
 */

/** Same address space as the real log: reserved lazily, so it costs nothing. */
const MAP_SIZE = 2 ** 40;

export interface FloorServer {
  origin: string;
  close(): Promise<void>;
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.once('error', reject);
  });
}

function reply(res: ServerResponse, accepted: number): void {
  const json = JSON.stringify({ ok: true, ts: Date.now(), accepted });
  res.writeHead(200, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(json) });
  res.end(json);
}

function eventsOf(body: unknown): unknown[] {
  if (Array.isArray(body)) return body;
  if (body !== null && typeof body === 'object' && 'events' in body && Array.isArray((body as { events: unknown }).events)) {
    return (body as { events: unknown[] }).events;
  }
  return [body];
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function closer(server: Server, after?: () => Promise<void>): () => Promise<void> {
  return async () => {
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
    await after?.();
  };
}

export function openFloorDb(dir: string): RootDatabase {
  return open({ path: path.join(dir, 'floor.lmdb'), mapSize: MAP_SIZE, noSubdir: true });
}

export async function startBareServer(): Promise<FloorServer> {
  const server = createServer((req, res) => {
    void readBody(req).then((text) => reply(res, eventsOf(JSON.parse(text)).length));
  });
  return { origin: await listen(server), close: closer(server) };
}

export async function startLmdbServer(dir: string): Promise<FloorServer> {
  const db = openFloorDb(dir);
  let seq = 0;
  const server = createServer((req, res) => {
    void (async () => {
      const events = eventsOf(JSON.parse(await readBody(req)));
      for (const e of events) void db.put(++seq, e);
      await db.flushed;
      reply(res, events.length);
    })();
  });
  return { origin: await listen(server), close: closer(server, () => db.close()) };
}

export interface RawPutResult {
  eventsPerSec: number;
  transactions: number;
  seconds: number;
}

/**
 * `writers` concurrent loops, each: one transaction of `perTxn` puts, await the flush, repeat — the same shape as
 * `writers` HTTP connections each sending batches of `perTxn` events, without HTTP, JSON or validation.
 */
export async function rawBatchPuts(
  db: RootDatabase,
  records: readonly object[],
  perTxn: number,
  writers: number,
  durationMs: number,
): Promise<RawPutResult> {
  let seq = 0;
  for (const k of db.getKeys({ reverse: true, limit: 1 })) seq = k as number;
  let transactions = 0;
  let next = 0;
  const started = performance.now();
  const deadline = started + durationMs;
  const loop = async () => {
    while (performance.now() < deadline) {
      await db.transaction(() => {
        for (let i = 0; i < perTxn; i++) void db.put(++seq, records[next++ % records.length]);
      });
      await db.flushed;
      transactions++;
    }
  };
  await Promise.all(Array.from({ length: writers }, loop));
  const seconds = (performance.now() - started) / 1000;
  return { eventsPerSec: (transactions * perTxn) / seconds, transactions, seconds };
}

/**
 * The disk itself: 4 KiB written and fdatasync'ed, back to back. Every durable ack waits for at least one of these,
 * so syncs/s × events per commit bounds any flush-mode ingest rate.
 */
export function fsyncLatency(dir: string, durationMs: number): { syncsPerSec: number; latency: LatencySummary } {
  const fd = openSync(path.join(dir, 'fsync.probe'), 'w');
  const page = Buffer.alloc(4096, 7);
  const h = newHistogram();
  const started = performance.now();
  let n = 0;
  try {
    while (performance.now() - started < durationMs) {
      const t = performance.now();
      writeSync(fd, page, 0, page.length, (n % 256) * 4096);
      fdatasyncSync(fd);
      h.recordValue(Math.max(1, Math.round((performance.now() - t) * 1000)));
      n++;
    }
  } finally {
    closeSync(fd);
  }
  return { syncsPerSec: n / ((performance.now() - started) / 1000), latency: summarize(h) };
}
