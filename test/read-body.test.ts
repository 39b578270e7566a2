import assert from 'node:assert/strict';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { bodyEncoding, readBody } from '../src/http/read-body.ts';

/**
 * readBody over real sockets: bodies that arrive in several chunks are gathered into one buffer the module keeps and
 * reuses, so each body must come back exactly, whatever came before it (a larger one, a split character).
 */

let server: Server;
let port = 0;

before(async () => {
  server = createServer(async (req, res) => {
    const r = await readBody(req, bodyEncoding(req.headers['content-encoding']));
    res.end(JSON.stringify(r));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});

after(() => new Promise<void>((resolve) => server.close(() => resolve())));

/** Sends `parts` as separate chunked writes, a pause between them so each arrives as its own read. */
function send(parts: Buffer[], headers: Record<string, string> = {}): Promise<{ ok: boolean; text?: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ port, host: '127.0.0.1', method: 'POST', path: '/', headers: { 'transfer-encoding': 'chunked', ...headers } }, (res) => {
      const got: Buffer[] = [];
      res.on('data', (c: Buffer) => got.push(c));
      res.on('end', () => resolve(JSON.parse(Buffer.concat(got).toString('utf8'))));
    });
    req.on('error', reject);
    let i = 0;
    const next = () => {
      if (i === parts.length) return req.end();
      req.write(parts[i++]);
      setTimeout(next, 5);
    };
    next();
  });
}

/** `text` (or bytes) cut into `n` byte ranges, the cuts inside multi-byte characters where there are some. */
function cut(text: string | Buffer, n: number): Buffer[] {
  const bytes = typeof text === 'string' ? Buffer.from(text, 'utf8') : text;
  const parts: Buffer[] = [];
  const step = Math.ceil(bytes.length / n);
  for (let at = 0; at < bytes.length; at += step) parts.push(bytes.subarray(at, at + step));
  return parts;
}

test('bodies in several chunks come back exactly, one after another, larger then smaller, characters split across chunks', async () => {
  const large = JSON.stringify(Array.from({ length: 4000 }, (_, i) => ({ event: 'page_view', url: `https://ex.example/ü/${i}`, title: 'Grüße — 日本語 🎉' })));
  const small = JSON.stringify({ event: 'signup', note: 'ß€😀'.repeat(50) });
  for (const [text, n] of [[large, 7], [small, 5], [large.slice(0, 1000), 3], [small, 2]] as const) {
    const parts = cut(text, n);
    assert.ok(parts.length > 1);
    const r = await send(parts);
    assert.equal(r.ok, true);
    assert.equal(r.text, text);
  }
});

test('a gzip body whose inflated bytes come in several chunks comes back exactly', async () => {
  const text = JSON.stringify(Array.from({ length: 8_000 }, (_, i) => ({ event: 'click', url: `https://ex.example/${i % 97}/ä`, id: i })));
  assert.ok(text.length > 2 * 64 * 1024, 'more than one inflated chunk');
  assert.ok(text.length < 1024 * 1024, 'under MAX_BODY_BYTES');
  const r = await send(cut(gzipSync(text), 3), { 'content-encoding': 'gzip' });
  assert.equal(r.ok, true);
  assert.equal(r.text, text);
});
