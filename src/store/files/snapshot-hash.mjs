// The SHA-256 of a byte range of a snapshot file, in a worker thread (snapshot-files.ts: readSnapshotHashedAside), so
// the main thread parses the frames meanwhile instead of hashing them too. Plain JavaScript so it starts in
// milliseconds without the TypeScript loader. Posts { digest } or { error }.
import { createHash } from 'node:crypto';
import { closeSync, openSync, readSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';

/** Bytes read at a time: large reads, few calls into the hash. */
const CHUNK = 4 << 20;

const { file, from, to } = workerData;
try {
  const fd = openSync(file, 'r');
  try {
    const hash = createHash('sha256');
    const buf = Buffer.allocUnsafe(Math.min(CHUNK, Math.max(1, to - from)));
    for (let at = from; at < to; ) {
      const n = readSync(fd, buf, 0, Math.min(buf.length, to - at), at);
      if (n === 0) throw new Error(`the file ends at byte ${at}, before byte ${to}`);
      hash.update(buf.subarray(0, n));
      at += n;
    }
    parentPort.postMessage({ digest: hash.digest() });
  } finally {
    closeSync(fd);
  }
} catch (err) {
  parentPort.postMessage({ error: err instanceof Error ? err.message : String(err) });
}
