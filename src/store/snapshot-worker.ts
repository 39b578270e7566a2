import { createHash } from 'node:crypto';
import { open as openFile, rename } from 'node:fs/promises';
import { serialize } from 'node:v8';
import { setPriority } from 'node:os';
import { parentPort } from 'node:worker_threads';
import type { SnapshotData } from '../core/snapshot.ts';
import { frameHeader, MAGIC } from './snapshot-format.ts';

/**
 * Serializes, hashes and writes a snapshot off the main thread. The main thread only captures the live state (typed
 * arrays are copies it transfers, not clones) and posts it here, so the event loop never waits on v8.serialize,
 * SHA-256 or the disk. Each project and each live day is its own frame, so no buffer nears 2 GiB whatever the size.
 */

interface WriteRequest {
  id: number;
  data: SnapshotData;
  file: string;
}

async function write({ data, file }: WriteRequest): Promise<number> {
  const tmp = `${file}.tmp`;
  const fh = await openFile(tmp, 'w', 0o600);
  const hash = createHash('sha256');
  let bytes = 0;
  const frame = async (value: unknown) => {
    const body = serialize(value);
    const head = frameHeader(body.length);
    hash.update(head).update(body);
    await fh.writev([head, body]);
    bytes += head.length + body.length;
  };
  try {
    await fh.write(MAGIC);
    await frame({ version: data.version, lastSeq: data.lastSeq, maxRt: data.maxRt, projects: data.projects.length });
    for (const p of data.projects) {
      const { days, ...rest } = p;
      await frame({ ...rest, days: days.length });
      for (const d of days) await frame(d);
    }
    await fh.write(frameHeader(0));
    await fh.write(hash.digest());
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, file);
  return bytes;
}

/**
 * Lowest CPU priority for this thread only (on Linux, setpriority of "process 0" is the calling thread): on a small
 * machine the snapshot writer must not take a core from the event loop or LMDB's writer while requests wait.
 */
const BACKGROUND_NICE = 19;
try {
  setPriority(BACKGROUND_NICE);
} catch {
  // not permitted here: the snapshot still gets written, at normal priority
}

parentPort!.on('message', (req: WriteRequest) => {
  write(req).then(
    (bytes) => parentPort!.postMessage({ id: req.id, ok: true, bytes }),
    (err: unknown) => parentPort!.postMessage({ id: req.id, ok: false, message: err instanceof Error ? err.message : String(err) }),
  );
});
