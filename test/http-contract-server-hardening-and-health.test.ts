import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { HttpFace } from '../src/http/server.ts';
import { assertError, ingest, pv, rawExchange, sleep, statusOfRaw, storedEvents } from './contract-helpers.ts';
import { api, createProject, startTestService, type ApiOptions, type CreatedProject, type TestService } from './helpers.ts';

/**
 * CONTRACT: Node's server limits set explicitly (header and request timeouts, keep-alive, header size), a slow
 * client cut off without hurting others, GET /health (503 while shutting down), no Set-Cookie anywhere, and no
 * client IP or raw User-Agent in storage.
 */

let svc: TestService;
let a: CreatedProject;

before(async () => {
  svc = await startTestService();
  a = await createProject(svc.url, svc.adminKey, { name: 'A' });
});
after(() => svc.destroy());

/** The service's engine behind a second HTTP face with short timeouts, so the cut-offs take seconds, not minutes. */
async function shortTimeoutFace(): Promise<{ url: string; close: () => Promise<void> }> {
  const face = new HttpFace(svc.service.engine, {
    host: '127.0.0.1',
    port: 0,
    trustProxy: false,
    headersTimeoutMs: 1000,
    requestTimeoutMs: 2000,
    keepAliveTimeoutMs: 500,
    connectionsCheckingIntervalMs: 100,
  });
  const port = await face.listen();
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      face.server.closeAllConnections();
      await face.close();
    },
  };
}

/** Opens a socket and resolves when it closes, with what the server sent and how long it stayed open. */
function openSocket(url: string): { socket: Socket; closed: Promise<{ text: string; ms: number }> } {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  const started = Date.now();
  const chunks: Buffer[] = [];
  socket.on('data', (c: Buffer) => chunks.push(c));
  socket.on('error', () => {
    /* resets count as closing */
  });
  const closed = new Promise<{ text: string; ms: number }>((resolve) =>
    socket.on('close', () => resolve({ text: Buffer.concat(chunks).toString('utf8'), ms: Date.now() - started })),
  );
  return { socket, closed };
}

/** Captures console.error while `fn` runs: a client that misbehaves is not a fault and must not be logged as one. */
async function withoutFaults<T>(fn: () => Promise<T>): Promise<T> {
  const logged: unknown[][] = [];
  const original = console.error;
  console.error = (...args: unknown[]) => void logged.push(args);
  try {
    const out = await fn();
    await sleep(50);
    assert.deepEqual(logged, [], 'nothing logged as an internal error');
    return out;
  } finally {
    console.error = original;
  }
}

describe('Node server limits', () => {
  test('are set explicitly: headers 10 s, whole request 30 s, keep-alive 5 s, headers at most 16 KiB', () => {
    const face = new HttpFace(svc.service.engine, { host: '127.0.0.1', port: 0, trustProxy: false });
    assert.equal(face.server.headersTimeout, 10_000);
    assert.equal(face.server.requestTimeout, 30_000);
    assert.equal(face.server.keepAliveTimeout, 5_000);
    assert.equal((face.server as unknown as { maxHeaderSize: number }).maxHeaderSize, 16 * 1024);
  });

  test('a client that sends its body one byte at a time is cut off at requestTimeout while other clients are served', async () => {
    const short = await shortTimeoutFace();
    try {
      await withoutFaults(async () => {
        const before = await storedEvents(svc.url, a.keys.secret);
        const slow = openSocket(short.url);
        slow.socket.write(
          `POST /analytics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${a.keys.secret}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n`,
        );
        let sent = 0;
        const dribble = setInterval(() => {
          if (!slow.socket.destroyed) slow.socket.write(sent++ === 0 ? '[' : ' ');
        }, 200);
        try {
          // meanwhile everyone else is answered promptly, on the same face
          for (let i = 0; i < 10; i++) {
            const t = Date.now();
            assert.equal((await api(short.url, '/health')).status, 200);
            assert.equal((await ingest(short.url, a.keys.secret, pv(`/meanwhile${i}`))).status, 200);
            assert.ok(Date.now() - t < 1000);
            await sleep(50);
          }
          const { text, ms } = await slow.closed;
          assert.ok(ms >= 1500 && ms < 5000, `cut off after ${ms} ms`);
          assert.ok(text === '' || statusOfRaw(text) === 408, text);
          assert.ok(sent < 1000);
        } finally {
          clearInterval(dribble);
        }
        assert.equal(await storedEvents(svc.url, a.keys.secret), before + 10);
      });
    } finally {
      await short.close();
    }
  });

  test('a client that sends its headers slowly is cut off at headersTimeout', async () => {
    const short = await shortTimeoutFace();
    try {
      const slow = openSocket(short.url);
      slow.socket.write('GET /health HTTP/1.1\r\nHost: x\r\n');
      const dribble = setInterval(() => {
        if (!slow.socket.destroyed) slow.socket.write('X-Slow: 1\r\n');
      }, 100);
      try {
        assert.equal((await api(short.url, '/health')).status, 200);
        const { text, ms } = await slow.closed;
        assert.ok(ms >= 800 && ms < 4000, `cut off after ${ms} ms`);
        assert.ok(text === '' || statusOfRaw(text) === 408, text);
      } finally {
        clearInterval(dribble);
      }
    } finally {
      await short.close();
    }
  });

  test('an idle keep-alive connection is closed after keepAliveTimeout', async () => {
    const short = await shortTimeoutFace();
    try {
      const idle = openSocket(short.url);
      idle.socket.write('GET /health HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n');
      const { text, ms } = await idle.closed;
      assert.equal(statusOfRaw(text), 200);
      assert.ok(ms >= 400 && ms < 3000, `closed after ${ms} ms`);
    } finally {
      await short.close();
    }
  });

  test('headers over 16 KiB are refused with 431 and the service stays up; a large but allowed header is fine', async () => {
    const huge = await rawExchange(svc.url, `GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: ${'p'.repeat(20 * 1024)}\r\n\r\n`);
    assert.equal(statusOfRaw(huge), 431, huge.slice(0, 80));
    const manyHeaders = Array.from({ length: 1200 }, (_, i) => `X-H${i}: 1234567890\r\n`).join('');
    const manySmall = await rawExchange(svc.url, `GET /health HTTP/1.1\r\nHost: x\r\n${manyHeaders}\r\n`);
    assert.equal(statusOfRaw(manySmall), 431);
    const big = await api(svc.url, '/metrics', { key: a.keys.secret, headers: { referer: `https://a.example/${'r'.repeat(8 * 1024)}` } });
    assert.equal(big.status, 200);
    assert.equal((await api(svc.url, '/health')).status, 200);
  });

  test('a client that disconnects mid-body is not an error and stores nothing', async () => {
    await withoutFaults(async () => {
      const before = await storedEvents(svc.url, a.keys.secret);
      const gone = openSocket(svc.url);
      gone.socket.write(
        `POST /analytics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${a.keys.secret}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n[{"event":"page_view",`,
      );
      await sleep(100);
      gone.socket.destroy();
      await gone.closed;
      await sleep(100);
      assert.equal(await storedEvents(svc.url, a.keys.secret), before);
      assert.equal((await api(svc.url, '/health')).status, 200);
    });
  });
});

describe('GET /health', () => {
  test('answers 200 {status:"ok", version, uptimeSeconds} without a key, and without rate-limit headers', async () => {
    const r = await api(svc.url, '/health');
    assert.equal(r.status, 200);
    // the contract's fields, plus `log` (the last verification of the log, issue 17)
    assert.deepEqual(Object.keys(r.body).sort(), ['log', 'status', 'uptimeSeconds', 'version']);
    assert.equal(r.body.status, 'ok');
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
    assert.equal(r.body.version, pkg.version);
    assert.ok(Number.isInteger(r.body.uptimeSeconds) && r.body.uptimeSeconds >= 0);
    assert.equal(r.headers.get('cache-control'), 'no-store');
  });

  test('while the service shuts down: /health answers 503 unavailable, writes 503 with Retry-After, and nothing is stored', async () => {
    let s = await startTestService();
    try {
      const p = await createProject(s.url, s.adminKey, {});
      assert.equal((await ingest(s.url, p.keys.secret, pv('/before'))).status, 200);
      s.service.engine.beginShutdown();

      const h = await api(s.url, '/health');
      assert.equal(h.status, 503);
      assert.equal(h.body.status, 'unavailable');
      assert.equal(typeof h.body.version, 'string');

      const writes: Array<{ name: string; send: () => Promise<import('./helpers.ts').ApiResponse> }> = [
        { name: 'an event', send: () => ingest(s.url, p.keys.secret, pv('/during')) },
        { name: 'a batch from the pk_ key', send: () => ingest(s.url, p.keys.publishable, [pv('/d1'), pv('/d2')]) },
        { name: 'a body that is not JSON', send: () => ingest(s.url, p.keys.secret, undefined, { raw: '{' }) },
        { name: 'a new project', send: () => api(s.url, '/projects', { key: s.adminKey, body: { allowed_origins: [], allowed_referrers: [] } }) },
      ];
      for (const w of writes) {
        const r = await w.send();
        assertError(r, 503, 'unavailable');
        assert.ok(Number(r.headers.get('retry-after')) >= 1, `${w.name}: Retry-After ${r.headers.get('retry-after')}`);
      }
      // reads still answer while in-flight work drains
      assert.equal((await api(s.url, '/metrics', { key: p.keys.secret })).body.pageviews, 1);

      s = await s.restart();
      assert.equal((await api(s.url, '/health')).status, 200);
      assert.equal(await storedEvents(s.url, p.keys.secret), 1);
      assert.equal((await api(s.url, '/projects', { key: s.adminKey })).body.projects.length, 1);
    } finally {
      await s.destroy();
    }
  });
});

describe('no cookies', () => {
  const requests: Array<{ name: string; route: string; opts: () => ApiOptions }> = [
    { name: 'an accepted event', route: '/analytics', opts: () => ({ key: a.keys.publishable, body: pv('/c'), headers: { origin: 'https://a.example' } }) },
    { name: 'a refused event', route: '/analytics', opts: () => ({ key: a.keys.secret, body: {} }) },
    { name: 'a request without a key', route: '/analytics', opts: () => ({ body: pv() }) },
    { name: 'a body over 1 MiB', route: '/analytics', opts: () => ({ key: a.keys.secret, raw: 'x'.repeat(1024 * 1024 + 1) }) },
    { name: 'a wrong content type', route: '/analytics', opts: () => ({ key: a.keys.secret, raw: 'x', headers: { 'content-type': 'image/png' } }) },
    { name: 'a metrics read', route: '/metrics', opts: () => ({ key: a.keys.secret }) },
    { name: 'a metrics read with a bad date', route: '/metrics?date=x', opts: () => ({ key: a.keys.secret }) },
    { name: 'a project list', route: '/projects', opts: () => ({ key: svc.adminKey }) },
    { name: 'a project creation', route: '/projects', opts: () => ({ key: svc.adminKey, body: { allowed_origins: [], allowed_referrers: [] } }) },
    { name: 'a health check', route: '/health', opts: () => ({}) },
    { name: 'the tracking script', route: '/script.js', opts: () => ({}) },
    { name: 'an unknown path', route: '/admin', opts: () => ({}) },
    { name: 'a wrong method', route: '/health', opts: () => ({ method: 'PUT', raw: '' }) },
    { name: 'a preflight', route: '/analytics', opts: () => ({ method: 'OPTIONS', headers: { origin: 'https://a.example', 'access-control-request-method': 'POST' } }) },
  ];
  for (const r of requests) {
    test(`the answer to ${r.name} sets no cookie and is not a 5xx`, async () => {
      const res = await api(svc.url, r.route, r.opts());
      assert.ok(res.status < 500, String(res.status));
      assert.equal(res.headers.get('set-cookie'), null);
      assert.deepEqual(res.headers.getSetCookie(), []);
    });
  }
});

describe('privacy', () => {
  test('neither the client IP nor the raw User-Agent is written to the data directory (log, snapshot, anything)', async () => {
    let s = await startTestService({ TRUST_PROXY: '1' });
    const ip = '9.9.9.9';
    const ipv6 = '2606:4700:4700::1111';
    const marker = 'UniqueUaMarkerZq7';
    const ua = `Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 ${marker}`;
    try {
      const p = await createProject(s.url, s.adminKey, {});
      for (const forwarded of [ip, ipv6, `203.0.113.7, ${ip}`]) {
        const r = await ingest(s.url, p.keys.publishable, [pv('/private'), { event: 'signup' }], { headers: { 'x-forwarded-for': forwarded, 'user-agent': ua } });
        assert.equal(r.status, 200);
      }
      assert.equal(await storedEvents(s.url, p.keys.secret), 6);
      await s.service.engine.snapshotNow();
      s = await s.restart();
      assert.equal(await storedEvents(s.url, p.keys.secret), 6);
      await s.stop();

      const files: string[] = [];
      const walk = (dir: string) => {
        for (const name of readdirSync(dir)) {
          const full = path.join(dir, name);
          if (statSync(full).isDirectory()) walk(full);
          else files.push(full);
        }
      };
      walk(s.dataDir);
      assert.ok(files.length > 0);
      for (const f of files) {
        const bytes = readFileSync(f);
        for (const needle of [ip, ipv6, marker, '127.0.0.1']) {
          assert.equal(bytes.indexOf(needle), -1, `${needle} found in ${path.basename(f)}`);
        }
      }
    } finally {
      await s.destroy();
    }
  });
});
