// The SHA-256 of byte ranges of snapshot files, one after the other in one worker thread (snapshot-files.ts:
// readSnapshotHashedAside), so the main thread parses the frames meanwhile instead of hashing them too. Plain
// JavaScript so it starts in milliseconds without the TypeScript loader. Posts { digests } (one per range, in order)
// or { error }.
import { createHash } from 'node:crypto';
import { closeSync, openSync, readSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';

/** Bytes read at a time: large reads, few calls into the hash. */
const CHUNK = 4 << 20;

/** @type {Array<{ file: string, from: number, to: number }>} */
const ranges = workerData.ranges;
try {
  const buf = Buffer.allocUnsafe(CHUNK);
  const digests = [];
  for (const { file, from, to } of ranges) {
    const fd = openSync(file, 'r');
    try {
      const hash = createHash('sha256');
      for (let at = from; at < to; ) {
        const n = readSync(fd, buf, 0, Math.min(buf.length, to - at), at);
        if (n === 0) throw new Error(`${file} ends at byte ${at}, before byte ${to}`);
        hash.update(buf.subarray(0, n));
        at += n;
      }
      digests.push(hash.digest());
    } finally {
      closeSync(fd);
    }
  }
  parentPort.postMessage({ digests });
} catch (err) {
  parentPort.postMessage({ error: err instanceof Error ? err.message : String(err) });
}
