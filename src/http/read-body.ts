import type { IncomingMessage } from 'node:http';
import { MAX_BODY_BYTES } from '../core/limits.ts';

export type BodyResult = { ok: true; text: string } | { ok: false; reason: 'too_large' | 'aborted'; message: string };

/**
 * Reads a request body up to MAX_BODY_BYTES. A declared Content-Length over the cap is refused before reading a
 * byte; a chunked body is counted while it streams and refused the moment it passes the cap. A client that goes
 * away mid-body (or is cut off by requestTimeout) resolves as `aborted` rather than rejecting: it is not a fault.
 */
export function readBody(req: IncomingMessage): Promise<BodyResult> {
  const tooLarge: BodyResult = { ok: false, reason: 'too_large', message: `the body is larger than ${MAX_BODY_BYTES} bytes` };
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > MAX_BODY_BYTES) return Promise.resolve(tooLarge);
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        req.off('data', onData);
        req.pause();
        resolve(tooLarge);
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => resolve({ ok: true, text: (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size)).toString('utf8') }));
    // 'error' (aborted) or 'close' before 'end': the promise settles either way, so no handler waits forever.
    const gone = () => resolve({ ok: false, reason: 'aborted', message: 'the client closed the connection before the body ended' });
    req.once('error', gone);
    req.once('close', () => {
      if (!req.complete) gone();
    });
  });
}
