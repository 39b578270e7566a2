import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { open as openFile, rename } from 'node:fs/promises';
import path from 'node:path';
import { deserialize, serialize } from 'node:v8';
import type { SnapshotData } from '../core/snapshot.ts';

/**
 * Snapshots of the whole state as files `snapshot-<seq>.bin`: a magic word, a SHA-256 of the body, and the body
 * (v8 serialization, which writes typed arrays as raw bytes). Written to a temporary file, fsynced and renamed, so a
 * crash leaves either the old or the new snapshot, never half of one. A file that fails its checksum is skipped.
 */

const MAGIC = Buffer.from('ASNAP001');
const HEADER = MAGIC.length + 32;
/** Two snapshots: the newest, and one to fall back on if the newest turns out damaged. */
const SNAPSHOTS_KEPT = 2;
const NAME = /^snapshot-(\d{16})\.bin$/;

export class SnapshotFiles {
  private readonly dir: string;

  /** `inspectOnly`: a tool reading while the service may run (check) must not remove the service's write in progress. */
  constructor(dataDir: string, opts: { inspectOnly?: boolean } = {}) {
    this.dir = path.join(dataDir, 'snapshots');
    mkdirSync(this.dir, { recursive: true });
    // A process killed mid-write leaves its temporary file (up to a full snapshot) behind: nobody else writes here.
    if (!opts.inspectOnly) this.removeLeftovers();
  }

  /** Temporary files of writes that never finished. */
  removeLeftovers(): string[] {
    const gone = readdirSync(this.dir).filter((f) => f.endsWith('.tmp'));
    for (const f of gone) rmSync(path.join(this.dir, f), { force: true });
    return gone;
  }

  /** `replaceAll` removes every other snapshot once this one is durable (they may hold erased data). */
  async write(data: SnapshotData, opts: { replaceAll?: boolean } = {}): Promise<{ file: string; bytes: number }> {
    const body = serialize(data);
    const digest = createHash('sha256').update(body).digest();
    const file = path.join(this.dir, `snapshot-${String(data.lastSeq).padStart(16, '0')}.bin`);
    const tmp = `${file}.tmp`;
    const fh = await openFile(tmp, 'w', 0o600);
    try {
      try {
        await fh.writev([MAGIC, digest, body]);
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, file);
    } catch (err) {
      rmSync(tmp, { force: true }); // a full disk must not keep half a snapshot on it
      throw err;
    }
    const dh = await openFile(this.dir, 'r');
    try {
      await dh.sync();
    } finally {
      await dh.close();
    }
    this.prune(opts.replaceAll === true ? path.basename(file) : undefined);
    return { file, bytes: HEADER + body.length };
  }

  /**
   * The newest snapshot covering at most `maxSeq` (a snapshot ahead of the log cannot be trusted: the log is the
   * truth) that passes its checksum, or undefined. Skipped files are reported through `onSkip`.
   */
  loadNewest(maxSeq: number, onSkip: (file: string, why: string) => void): SnapshotData | undefined {
    for (const file of this.files().reverse()) {
      const full = path.join(this.dir, file);
      if (Number(NAME.exec(file)![1]) > maxSeq) {
        onSkip(full, `covers records beyond the log's last sequence ${maxSeq}`);
        continue;
      }
      try {
        return readVerified(full);
      } catch (err) {
        onSkip(full, err instanceof Error ? err.message : String(err));
      }
    }
    return undefined;
  }

  /** Every snapshot file, oldest first, with its sequence and either its data or why it is unusable (check). */
  inspect(): Array<{ file: string; seq: number; data?: SnapshotData; problem?: string }> {
    return this.files().map((f) => {
      const file = path.join(this.dir, f);
      const seq = Number(NAME.exec(f)![1]);
      try {
        return { file, seq, data: readVerified(file) };
      } catch (err) {
        return { file, seq, problem: err instanceof Error ? err.message : String(err) };
      }
    });
  }

  files(): string[] {
    return readdirSync(this.dir).filter((f) => NAME.test(f)).sort();
  }

  private prune(only?: string): void {
    const all = this.files();
    const drop = only !== undefined ? all.filter((f) => f !== only) : all.slice(0, Math.max(0, all.length - SNAPSHOTS_KEPT));
    for (const f of drop) rmSync(path.join(this.dir, f), { force: true });
  }
}

/** A snapshot file's data, after checking its header and SHA-256; throws on any mismatch. */
function readVerified(file: string): SnapshotData {
  const buf = readFileSync(file);
  if (buf.length < HEADER || !buf.subarray(0, MAGIC.length).equals(MAGIC)) throw new Error('bad header');
  const body = buf.subarray(HEADER);
  const digest = createHash('sha256').update(body).digest();
  if (!digest.equals(buf.subarray(MAGIC.length, HEADER))) throw new Error('checksum mismatch');
  return deserialize(body) as SnapshotData;
}
