import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { status, type ServiceError } from '@grpc/grpc-js';
import { AnalyticsClient } from '../src/grpc/client.ts';
import { sleep } from './contract-helpers.ts';
import { api, createProject, startTestService, type CreatedProject, type TestService } from './helpers.ts';

/**
 * Issue 17, row 2: connections that never send a byte were never closed, on either port; 20,000 of them exhausted
 * the fds. Now each port closes a connection that has not sent its first request's headers (HTTP) or the HTTP/2
 * preface (gRPC) within the handshake deadline, and caps open connections per client IP and in all.
 * The silent sockets come from 127.0.0.2..11 (any 127/8 address is local on Linux), the healthy client from 127.0.0.1.
 */

const HANDSHAKE_MS = 4000;
const SILENT = 5000;
const SOURCES = 10;

let svc: TestService;
let project: CreatedProject;

before(async () => {
  svc = await startTestService({}, { connections: { handshakeMs: HANDSHAKE_MS } });
  project = await createProject(svc.url, svc.adminKey);
});
after(() => svc.destroy());

interface Silent {
  sockets: Socket[];
  /** ms from connect to close, per socket */
  closedAfter: Promise<number[]>;
}

/**
 * Opens `n` connections spread over `sources` local addresses and sends nothing. Opened in bursts that wait for the
 * server to have accepted them (`accepted()`): past the kernel's accept backlog, a client socket can look connected
 * while the server never sees it, and nothing would ever close it.
 */
async function openSilent(port: number, n: number, sources: number, firstSource = 2, accepted?: () => number): Promise<Silent> {
  const base = accepted?.() ?? 0;
  const sockets: Socket[] = [];
  const closes: Array<Promise<number>> = [];
  for (let i = 0; i < n; i++) {
    const started = Date.now();
    const s = connect({ port, host: '127.0.0.1', localAddress: `127.0.0.${firstSource + (i % sources)}` });
    s.on('error', () => {});
    closes.push(new Promise((r) => s.once('close', () => r(Date.now() - started))));
    sockets.push(s);
    if (i % 250 === 249 || i === n - 1) {
      const deadline = Date.now() + 10_000;
      while (accepted && accepted() - base < i + 1 && Date.now() < deadline) await sleep(5);
      if (!accepted) await sleep(20);
    }
  }
  return { sockets, closedAfter: Promise.all(closes) };
}

function p99(samples: number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))]!;
}

async function latencies(n: number, call: () => Promise<void>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await call();
    out.push(performance.now() - t);
  }
  return out;
}

describe('silent connections are closed in time and do not slow a healthy client', () => {
  test(`HTTP: ${SILENT} silent sockets all close within the header deadline; /health stays fast meanwhile`, async () => {
    const health = async () => assert.equal((await api(svc.url, '/health')).status, 200);
    const baseline = p99(await latencies(100, health));
    const guard = svc.service.http.guard;
    const silent = await openSilent(svc.service.httpPort, SILENT, SOURCES, 2, () => guard.admitted + guard.refused);
    const loaded = p99(await latencies(100, health));
    const closed = await silent.closedAfter;
    const latest = Math.max(...closed);
    assert.ok(Math.min(...closed) >= HANDSHAKE_MS - 200, `none closed early (first after ${Math.min(...closed)} ms)`);
    assert.ok(latest < HANDSHAKE_MS + 8000, `all closed, the last after ${latest} ms`);
    // The precise p99 comparison (within 20 %) is in bench/; here only that it stays in the same league on a busy box.
    assert.ok(loaded < Math.max(baseline * 4, baseline + 250), `p99 ${baseline.toFixed(1)} → ${loaded.toFixed(1)} ms`);
  });

  test(`gRPC: ${SILENT} silent sockets all close within the handshake deadline; calls stay fast meanwhile`, async () => {
    const client = new AnalyticsClient(svc.grpcAddress, { key: project.keys.secret });
    try {
      const call = async () => void (await client.listProjects());
      await call();
      const baseline = p99(await latencies(100, call));
      const guard = svc.service.grpc.guard;
      const silent = await openSilent(svc.service.grpcPort, SILENT, SOURCES, 2, () => guard.admitted + guard.refused);
      const loaded = p99(await latencies(100, call));
      const closed = await silent.closedAfter;
      const latest = Math.max(...closed);
      assert.ok(Math.min(...closed) >= HANDSHAKE_MS - 200, `none closed early (first after ${Math.min(...closed)} ms)`);
      assert.ok(latest < HANDSHAKE_MS + 8000, `all closed, the last after ${latest} ms`);
      assert.ok(loaded < Math.max(baseline * 4, baseline + 250), `p99 ${baseline.toFixed(1)} → ${loaded.toFixed(1)} ms`);
      await call(); // the healthy connection was never cut
    } finally {
      client.close();
    }
  });
});

describe('connection caps', () => {
  let capped: TestService;
  before(async () => {
    capped = await startTestService({}, { connections: { handshakeMs: 30_000, maxConnections: 120, maxConnectionsPerIp: 50 } });
  });
  after(() => capped.destroy());

  test('HTTP: connections over the per-IP cap get 503 unavailable with Retry-After; other addresses are still served', async () => {
    const silent = await openSilent(capped.service.httpPort, 50, 1, 20, () => capped.service.http.guard.admitted);
    await sleep(200);
    const refused = await rawFrom(capped.service.httpPort, '127.0.0.20');
    assert.match(refused, /^HTTP\/1\.1 503 /);
    assert.match(refused, /Retry-After: 1/);
    assert.match(refused, /"code":"unavailable".*too many open connections from your address/);
    assert.equal((await api(capped.url, '/health')).status, 200, 'another address is served');
    for (const s of silent.sockets) s.destroy();
    await silent.closedAfter;
  });

  test('HTTP and gRPC: connections over the total cap are refused; a place frees up when one closes', async () => {
    const hg = capped.service.http.guard;
    while (hg.open.size > 1) await sleep(20);
    const silent = await openSilent(capped.service.httpPort, 120 - hg.open.size, 4, 30, () => hg.admitted + hg.refused);
    await sleep(200);
    assert.match(await rawFrom(capped.service.httpPort, '127.0.0.40'), /^HTTP\/1\.1 503 [\s\S]*too many open connections/);
    silent.sockets[0]!.destroy();
    await sleep(200);
    assert.equal((await api(capped.url, '/health')).status, 200);
    for (const s of silent.sockets) s.destroy();

    const g = await openSilent(capped.service.grpcPort, 120, 4, 30, () => capped.service.grpc.guard.admitted + capped.service.grpc.guard.refused);
    await sleep(200);
    const client = new AnalyticsClient(capped.grpcAddress, { key: 'sk_x' });
    const err = await client.listProjects({ timeoutMs: 3000 }).then(
      () => assert.fail('refused expected'),
      (e: ServiceError) => e,
    );
    assert.ok(err.code === status.UNAVAILABLE || err.code === status.DEADLINE_EXCEEDED, `code ${err.code}`);
    assert.ok(capped.service.grpc.guard.refused >= 1);
    client.close();
    for (const s of g.sockets) s.destroy();
    await Promise.all([silent.closedAfter, g.closedAfter]);
  });
});

/** One connection from `source` that sends a request and returns whatever comes back before the close. */
function rawFrom(port: number, source: string): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const s = connect({ port, host: '127.0.0.1', localAddress: source }, () => s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n'));
    s.on('data', (c: Buffer) => chunks.push(c));
    s.on('error', () => {});
    s.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
  });
}
