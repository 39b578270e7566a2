import assert from 'node:assert/strict';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { connect } from 'node:net';
import { api, type ApiOptions, type ApiResponse } from './helpers.ts';

/** Shared pieces of the http-contract-* suites: event builders, a settable clock, counters read over HTTP, raw sockets. */

/** A page view with a fixed session, so counts are easy to predict. */
export const pv = (path = '/', extra: object = {}): Record<string, unknown> => ({
  event: 'page_view',
  url: `https://a.example${path}`,
  sessionId: 's1',
  ...extra,
});

/** A clock the engine reads (startTestService(env, { now: clock.now })); tests move it instead of sleeping. */
export interface TestClock {
  now: () => number;
  set(iso: string | number): void;
  advance(ms: number): void;
}

export function testClock(start: string | number): TestClock {
  let t = typeof start === 'number' ? start : Date.parse(start);
  return {
    now: () => t,
    set(iso) {
      t = typeof iso === 'number' ? iso : Date.parse(iso);
    },
    advance(ms) {
      t += ms;
    },
  };
}

export const HOUR_MS = 3_600_000;
export const DAY_MS = 24 * HOUR_MS;

/** Asserts an error response: exact status, the contract's error body and code. */
export function assertError(res: ApiResponse, status: number, code: string): void {
  assert.equal(res.status, status, `expected ${status} ${code}, got ${res.status} ${JSON.stringify(res.body)}`);
  assert.equal(res.body?.ok, false, JSON.stringify(res.body));
  assert.equal(res.body.error.code, code, JSON.stringify(res.body));
  assert.equal(typeof res.body.error.message, 'string');
}

/** Asserts the three RateLimit-* headers are present and are non-negative integers. */
export function assertRateHeaders(res: ApiResponse): void {
  for (const h of ['ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset']) {
    const v = res.headers.get(h);
    assert.ok(v !== null, `${h} missing on ${res.status} ${JSON.stringify(res.body)}`);
    assert.match(v, /^\d+$/, `${h}: ${v}`);
  }
}

/** Every event the project has stored for the range (default today): the sum of the `events` breakdown. */
export async function storedEvents(base: string, key: string, query = ''): Promise<number> {
  const m = await api(base, `/metrics${query}`, { key });
  assert.equal(m.status, 200, JSON.stringify(m.body));
  return Object.values(m.body.events as Record<string, number>).reduce((a, b) => a + b, 0);
}

/** Sends `opts` to POST /analytics and returns the response (a shorthand for the tables). */
export function ingest(base: string, key: string | undefined, body: unknown, opts: Omit<ApiOptions, 'key' | 'body'> = {}): Promise<ApiResponse> {
  const o: ApiOptions = { ...opts, method: 'POST' };
  if (key !== undefined) o.key = key;
  if (opts.raw === undefined) o.body = body;
  return api(base, '/analytics', o);
}

export interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** Writes bytes to a fresh TCP connection and resolves with everything the server sent back before closing. */
export function rawExchange(base: string, bytes: string | Buffer, timeoutMs = 5000): Promise<string> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error('rawExchange: the server neither answered nor closed'));
    }, timeoutMs);
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', () => {
      /* a reset after the answer is fine; 'close' resolves */
    });
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString('utf8'));
    });
    socket.write(bytes);
  });
}

/** Parses the status line of a raw HTTP response ('' → 0). */
export function statusOfRaw(text: string): number {
  const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
  return m ? Number(m[1]) : 0;
}

/** node:http POST whose body is produced by `write` (chunked, no Content-Length unless given). */
export function streamingPost(
  base: string,
  route: string,
  headers: Record<string, string>,
  write: (req: ReturnType<typeof httpRequest>, finished: () => boolean) => void,
): Promise<RawResponse & { wroteAll: boolean }> {
  const url = new URL(route, base);
  return new Promise((resolve, reject) => {
    let done = false;
    let wroteAll = false;
    const req = httpRequest(url, { method: 'POST', headers, agent: false }, (res) => {
      done = true;
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8'), wroteAll }));
      res.on('error', reject);
    });
    req.on('error', (err) => {
      if (!done) reject(err);
    });
    write(req, () => {
      if (!done) wroteAll = true;
      return done;
    });
  });
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
