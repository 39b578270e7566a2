import type { IncomingMessage } from 'node:http';
import { createGunzip, type Gunzip } from 'node:zlib';
import { MAX_BODY_BYTES } from '../core/limits.ts';

export type BodyResult =
  | { ok: true; text: string }
  | { ok: false; reason: 'too_large' | 'aborted' | 'bad_encoding'; message: string };

/** The body encodings the service reads (CONTRACT): none or gzip; anything else is 415. */
export type BodyEncoding = 'identity' | 'gzip';

/** `Content-Encoding` → how to read the body, or undefined for an encoding the service does not accept. */
export function bodyEncoding(header: string | undefined): BodyEncoding | undefined {
  const v = (header ?? '').trim().toLowerCase();
  if (v === '' || v === 'identity') return 'identity';
  if (v === 'gzip' || v === 'x-gzip') return 'gzip';
  return undefined;
}

/**
 * A body that came in several chunks is copied into this buffer and decoded from it, in one synchronous step, so one
 * buffer serves every request: a new one per body was ~140 bytes of array buffers an imported event left for the
 * garbage collector. It grows to the largest body read (MAX_BODY_BYTES, a route's larger cap is not kept).
 */
let gather = Buffer.allocUnsafeSlow(0);

function joined(chunks: readonly Buffer[], size: number): string {
  const into = size <= gather.length ? gather : Buffer.allocUnsafeSlow(size);
  if (into !== gather && size <= MAX_BODY_BYTES) gather = into;
  let at = 0;
  for (const c of chunks) at += c.copy(into, at);
  return into.toString('utf8', 0, size);
}

/**
 * Reads a request body up to `maxBytes` (MAX_BODY_BYTES unless the route has a smaller cap). A declared Content-Length over the cap is refused before reading a
 * byte; a chunked body is counted while it streams and refused the moment it passes the cap. A gzip body is inflated
 * as it streams and the cap applies to the inflated bytes, counted while inflating: a zip bomb stops at 1 MiB of
 * output, not at the end of its expansion. A client that goes away mid-body (or is cut off by requestTimeout)
 * resolves as `aborted` rather than rejecting: it is not a fault.
 */
export function readBody(req: IncomingMessage, encoding: BodyEncoding = 'identity', maxBytes: number = MAX_BODY_BYTES): Promise<BodyResult> {
  const tooLarge: BodyResult = { ok: false, reason: 'too_large', message: `the body is larger than ${maxBytes} bytes` };
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) return Promise.resolve(tooLarge);
  return new Promise((resolve) => {
    let settled = false;
    const settle = (r: BodyResult) => {
      if (settled) return;
      settled = true;
      resolve(r);
    };
    const chunks: Buffer[] = [];
    let size = 0;
    let wire = 0;
    let gunzip: Gunzip | undefined;
    const collect = (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) {
        stop();
        settle(tooLarge);
        return;
      }
      chunks.push(chunk);
    };
    const done = () => settle({ ok: true, text: chunks.length === 1 ? chunks[0]!.toString('utf8') : joined(chunks, size) });
    const onData = (chunk: Buffer) => {
      wire += chunk.length;
      if (wire > maxBytes) {
        stop();
        settle(tooLarge);
        return;
      }
      if (gunzip) gunzip.write(chunk);
      else collect(chunk);
    };
    const stop = () => {
      req.off('data', onData);
      req.pause();
      gunzip?.destroy();
    };
    if (encoding === 'gzip') {
      gunzip = createGunzip();
      gunzip.on('data', collect);
      gunzip.once('end', done);
      gunzip.once('error', (err: Error) => {
        stop();
        settle({ ok: false, reason: 'bad_encoding', message: `the body is not valid gzip: ${err.message}` });
      });
    }
    req.on('data', onData);
    req.once('end', () => {
      if (gunzip) gunzip.end();
      else done();
    });
    // 'error' (aborted) or 'close' before 'end': the promise settles either way, so no handler waits forever.
    const gone = () => {
      gunzip?.destroy();
      settle({ ok: false, reason: 'aborted', message: 'the client closed the connection before the body ended' });
    };
    req.once('error', gone);
    req.once('close', () => {
      if (!req.complete) gone();
    });
  });
}
