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
 * preface (gRPC) within the handshake deadline, and caps open connections per client IP and in all. At the total
 * cap, the connection doing nothing for longest is closed to make room, so a few addresses cannot hold a port shut.
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

  test('HTTP: a cap filled with silent sockets from several addresses makes room: a new client from another address gets 200 at once, while the attacker reconnects', async () => {
    const hg = capped.service.http.guard;
    while (hg.open.size > 0) await sleep(20);
    const evictedBefore = hg.evicted;
    // 4 addresses × 30: each well under its per-address cap of 50, together the whole port
    const silent = await openSilent(capped.service.httpPort, 120, 4, 30, () => hg.admitted + hg.refused);
    assert.equal(hg.open.size, 120);
    // the attacker puts back every socket the service closes, from the same addresses
    let attacking = true;
    const reconnects: Socket[] = [];
    const reconnect = (s: Socket, source: string) =>
      s.once('close', () => {
        if (!attacking) return;
        const again = connect({ port: capped.service.httpPort, host: '127.0.0.1', localAddress: source });
        again.on('error', () => {});
        reconnects.push(again);
        reconnect(again, source);
      });
    silent.sockets.forEach((s, i) => reconnect(s, `127.0.0.${30 + (i % 4)}`));
    const oldest = silent.sockets[0]!;
    const firstClosed = new Promise<void>((r) => oldest.once('close', () => r()));
    for (let i = 0; i < 20; i++) {
      const t = performance.now();
      assert.equal((await api(capped.url, '/health')).status, 200, `new client ${i} is served`);
      assert.ok(performance.now() - t < 1000, `served at once (${(performance.now() - t).toFixed(0)} ms)`);
    }
    await firstClosed; // the silent socket accepted first made the first room
    assert.ok(hg.evicted - evictedBefore >= 20, `${hg.evicted - evictedBefore} silent sockets closed to make room`);
    assert.ok(hg.open.size <= 120, `still within the cap (${hg.open.size})`);
    attacking = false;
    for (const s of [...silent.sockets, ...reconnects]) s.destroy();
    await silent.closedAfter;
  });

  test('HTTP: silent connections make room before idle keep-alive ones, and those idle longest go first', async () => {
    const hg = capped.service.http.guard;
    while (hg.open.size > 0) await sleep(20);
    // 60 keep-alive connections that each finished one request, in order, then 60 silent ones
    const kept: Socket[] = [];
    for (let i = 0; i < 60; i++) kept.push(await keptAlive(capped.service.httpPort, `127.0.0.${50 + (i % 2)}`));
    const silent = await openSilent(capped.service.httpPort, 60, 2, 52, () => hg.admitted + hg.refused);
    assert.equal(hg.open.size, 120);
    // 60 newcomers that stay open (each takes the place it made): every silent one goes first
    const newcomers: Socket[] = [];
    for (let i = 0; i < 60; i++) newcomers.push(await keptAlive(capped.service.httpPort, `127.0.0.${60 + (i % 2)}`));
    await silent.closedAfter;
    assert.ok(kept.every((s) => !s.destroyed), 'no keep-alive connection was closed while silent ones were open');
    const firstKept = new Promise<void>((r) => kept[0]!.once('close', () => r()));
    assert.match(await rawFrom(capped.service.httpPort, '127.0.0.60'), /^HTTP\/1\.1 200 /);
    await firstKept; // then the one idle longest
    assert.ok([...kept.slice(1), ...newcomers].every((s) => !s.destroyed), 'only the one idle longest was closed');
    for (const s of [...kept, ...newcomers]) s.destroy();
  });

  test('HTTP and gRPC: when every connection is busy, a newcomer gets 503 / UNAVAILABLE and no busy one is closed', async () => {
    const hg = capped.service.http.guard;
    while (hg.open.size > 0) await sleep(20);
    // requests whose body never comes: each connection is in the middle of a request
    const busy: Socket[] = [];
    for (let i = 0; i < 120; i++) {
      const s = connect({ port: capped.service.httpPort, host: '127.0.0.1', localAddress: `127.0.0.${70 + (i % 4)}` }, () =>
        s.write('POST /analytics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n'),
      );
      s.on('error', () => {});
      busy.push(s);
    }
    while (hg.open.size < 120) await sleep(20);
    await sleep(200); // every request's headers are in
    assert.match(await rawFrom(capped.service.httpPort, '127.0.0.80'), /^HTTP\/1\.1 503 [\s\S]*too many open connections/);
    assert.ok(busy.every((s) => !s.destroyed), 'no busy connection was closed');
    busy[0]!.destroy();
    await sleep(200);
    assert.equal((await api(capped.url, '/health')).status, 200, 'a place frees up when one closes');
    for (const s of busy) s.destroy();

    // gRPC: silent sockets make room for a new client ...
    const gg = capped.service.grpc.guard;
    while (hg.open.size > 0) await sleep(20);
    const g = await openSilent(capped.service.grpcPort, 120, 4, 30, () => gg.admitted + gg.refused);
    const client = new AnalyticsClient(capped.grpcAddress, { key: 'sk_x' });
    const served = await client.listProjects({ timeoutMs: 3000 }).then(
      () => assert.fail('an unknown key is refused'),
      (e: ServiceError) => e,
    );
    assert.equal(served.code, status.UNAUTHENTICATED, 'served (and refused for its key), not turned away');
    client.close();
    for (const s of g.sockets) s.destroy();
    await g.closedAfter;
    // ... but HTTP/2 sessions (preface sent) belong to grpc-js and are never closed for one
    while (gg.open.size > 0) await sleep(20);
    const sessions: Socket[] = [];
    for (let i = 0; i < 120; i++) {
      const s = connect({ port: capped.service.grpcPort, host: '127.0.0.1', localAddress: `127.0.0.${30 + (i % 4)}` }, () =>
        s.write('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
      );
      s.on('error', () => {});
      sessions.push(s);
    }
    while (gg.open.size < 120) await sleep(20);
    await sleep(200);
    const refusedBefore = gg.refused;
    const late = new AnalyticsClient(capped.grpcAddress, { key: 'sk_x' });
    const err = await late.listProjects({ timeoutMs: 3000 }).then(
      () => assert.fail('refused expected'),
      (e: ServiceError) => e,
    );
    assert.ok(err.code === status.UNAVAILABLE || err.code === status.DEADLINE_EXCEEDED, `code ${err.code}`);
    assert.ok(gg.refused > refusedBefore);
    late.close();
    for (const s of sessions) s.destroy();
  });
});

/** One keep-alive connection from `source` that has finished one GET /health and stays open. */
function keptAlive(port: number, source: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ port, host: '127.0.0.1', localAddress: source }, () => s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n'));
    s.on('error', reject);
    let got = '';
    s.on('data', (c: Buffer) => {
      got += c.toString('utf8');
      const head = got.indexOf('\r\n\r\n');
      const len = /content-length: (\d+)/i.exec(got);
      if (head >= 0 && len && got.length >= head + 4 + Number(len[1])) resolve(s);
    });
  });
}

/** One connection from `source` that sends a request and returns whatever comes back before the close. */
function rawFrom(port: number, source: string): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const s = connect({ port, host: '127.0.0.1', localAddress: source }, () =>
      s.write('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'),
    );
    s.on('data', (c: Buffer) => chunks.push(c));
    s.on('error', () => {});
    s.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
  });
}
