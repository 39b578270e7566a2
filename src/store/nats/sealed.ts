import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { deserialize, serialize } from 'node:v8';
import { deflateRawSync, inflateRawSync } from 'node:zlib';
import type { KV, KvEntry } from '@nats-io/kv';
import type { RangePart } from '../../core/day-view.ts';
import { SEALED_VERSION, type SealedDay, type SealedMonth } from '../../core/sealed-day.ts';
import type { SealedLookup, SealedSegment } from '../../core/sealed-source.ts';
import { SealedCopy } from '../lmdb/sealed-copy.ts';
import { UnsealableDays, unsealableKey, type SealedStore, type SealedWrite } from '../lmdb/sealed-store.ts';
import { idOfToken, idToken } from './catalog.ts';
import { KvMirror } from './kv-mirror.ts';
import { MAX_MESSAGE_BYTES } from './resources.ts';

/**
 * Sealed history in cluster mode: the KV bucket `analytics_sealed_v1` holds every sealed day segment and month
 * rollup (keys `<project>.d.<date>.<firstSeq>` and `<project>.m.<YYYY-MM>`, one row per key, history 1), and every
 * node mirrors the whole bucket into a local LMDB (`<dataDir>/<bucket>.mdb`, the single-node SealedStore), so reads
 * of old ranges are local cursor steps as on one node and the heap holds only live days.
 *
 * A node that seals a day puts its rows into the bucket first and into its local copy second, and only then drops the
 * day from its heap: a partition snapshot written afterwards lacks the day, but the bucket holds it, and a node
 * restoring that snapshot waits until its mirror reached the bucket's end (caughtUp) before it folds. Every node
 * folding a partition seals it the same way (sealing is deterministic in log order), so the same rows are put twice
 * by an owner and its standby: harmless, and no day is ever dropped anywhere before the bucket holds it.
 *
 * The local copy remembers the last applied revision (same LMDB transactions as the rows), so a restart resumes the
 * watch there instead of reading the bucket again.
 */

/** A row body: 1 = v8-serialized row, deflated. */
const ROW_FORMAT = 1;
/** KV put and purge calls in flight at once while sealing (10,000 projects' day at midnight is 10,000 puts). */
const MAX_PARALLEL_PUTS = 64;
/** Leave room for the message headers under the servers' max_payload. */
const MAX_ROW_BYTES = MAX_MESSAGE_BYTES - 4096;

export function dayRowKey(projectId: string, date: string, firstSeq: number): string {
  return `${idToken(projectId)}.d.${date}.${firstSeq}`;
}

export function monthRowKey(projectId: string, month: string): string {
  return `${idToken(projectId)}.m.${month}`;
}

type RowKey = { projectId: string } & ({ kind: 'd'; date: string; firstSeq: number } | { kind: 'm'; month: string });

const ROW_KEY = /^([^.]+)\.(?:d\.(\d{4}-\d{2}-\d{2})\.(\d+)|m\.(\d{4}-\d{2}))$/;

export function parseRowKey(key: string): RowKey | undefined {
  const m = ROW_KEY.exec(key);
  if (!m) return undefined;
  const projectId = idOfToken(m[1]!);
  if (m[2] !== undefined) return { projectId, kind: 'd', date: m[2], firstSeq: Number(m[3]) };
  return { projectId, kind: 'm', month: m[4]! };
}

export function encodeRow(row: SealedDay | SealedMonth): Uint8Array {
  const body = deflateRawSync(serialize(row));
  const out = new Uint8Array(body.length + 1);
  out[0] = ROW_FORMAT;
  out.set(body, 1);
  return out;
}

export function decodeRow<T extends SealedDay | SealedMonth>(bytes: Uint8Array): T {
  if (bytes[0] !== ROW_FORMAT) throw new Error(`unknown sealed row format ${bytes[0]}`);
  const row = deserialize(inflateRawSync(bytes.subarray(1))) as T;
  if (row.v !== SEALED_VERSION) throw new Error(`sealed row version ${row.v}, expected ${SEALED_VERSION}`);
  // fresh aligned copies: the deserializer may hand out views into its own buffer
  if (row.userHashes) row.userHashes = new Float64Array(row.userHashes);
  if (row.sketch) row.sketch = new Uint8Array(row.sketch);
  return row;
}

export interface KvSealedStoreOptions {
  log: (line: string) => void;
  /** tests: a smaller bound than a message (MAX_ROW_BYTES) */
  maxRowBytes?: number;
}

export class KvSealedStore implements SealedLookup {
  private mirror!: KvMirror;
  readonly local: SealedStore;

  private constructor(
    readonly kv: KV,
    private readonly copy: SealedCopy,
    private readonly log: (line: string) => void,
    private readonly maxRowBytes: number,
  ) {
    this.local = copy.store;
  }

  /** Opens the local copy and starts mirroring the bucket (from where the copy left off). */
  static async open(kv: KV, bucket: string, dataDir: string, o: KvSealedStoreOptions): Promise<KvSealedStore> {
    mkdirSync(dataDir, { recursive: true });
    const copy = SealedCopy.open(path.join(dataDir, `${bucket}.mdb`));
    const s = new KvSealedStore(kv, copy, o.log, o.maxRowBytes ?? MAX_ROW_BYTES);
    try {
      s.mirror = await KvMirror.open(kv, { name: 'sealed-rows mirror', apply: (e) => s.apply(e), log: o.log, after: copy.appliedRevision() });
    } catch (err) {
      await copy.close();
      throw err;
    }
    return s;
  }

  private apply(e: KvEntry): void {
    const k = parseRowKey(e.key);
    if (k) {
      if (e.operation !== 'PUT') {
        if (k.kind === 'd') this.local.removeDay(k.projectId, k.date, k.firstSeq);
        else this.local.removeMonth(k.projectId, k.month);
      } else if (k.kind === 'd') {
        const day = decodeRow<SealedDay>(e.value);
        if (day.date !== k.date || day.firstSeq !== k.firstSeq) throw new Error('the row does not match its key');
        this.local.putDay(k.projectId, day);
      } else {
        const month = decodeRow<SealedMonth>(e.value);
        if (month.month !== k.month) throw new Error('the row does not match its key');
        this.local.putMonth(k.projectId, month);
      }
    }
    this.copy.markApplied(e.revision);
  }

  /** Resolves once every row the bucket holds now is in the local copy (a partition start waits for it). */
  async caughtUp(): Promise<void> {
    await this.mirror.caughtUp();
    await this.local.flushed(); // applied rows are queued writes: readable once committed
  }

  /**
   * Puts the rows into the bucket, then into the local copy; resolves once both hold them (the sealer then drops the
   * days). A day whose row is too big for a message rejects the write (UnsealableDays) before anything is put: it stays
   * live. A month rollup too big is left out: reads of that month then merge its days.
   */
  async write(w: SealedWrite): Promise<void> {
    const rows: Array<[string, Uint8Array]> = [];
    const tooLarge = new Set<string>();
    for (const { projectId, day } of w.days) {
      const bytes = encodeRow(day);
      if (bytes.length > this.maxRowBytes) tooLarge.add(unsealableKey(projectId, day.date, day.firstSeq));
      rows.push([dayRowKey(projectId, day.date, day.firstSeq), bytes]);
    }
    if (tooLarge.size > 0) throw new UnsealableDays(`${tooLarge.size} sealed day(s) larger than a message (${this.maxRowBytes} bytes)`, tooLarge);
    const months = w.months.filter(({ projectId, month }) => {
      const bytes = encodeRow(month);
      if (bytes.length <= this.maxRowBytes) rows.push([monthRowKey(projectId, month.month), bytes]);
      else this.log(`sealed rollup ${monthRowKey(projectId, month.month)} is ${bytes.length} bytes, more than a message: not stored (reads merge its days)`);
      return bytes.length <= this.maxRowBytes;
    });
    await inParallel(rows, MAX_PARALLEL_PUTS, ([key, bytes]) => this.kv.put(key, bytes));
    await this.local.write({ days: w.days, months });
  }

  /** Every sealed segment of a project's days in [from, to], from the local copy (month rollups). */
  readDays(projectId: string, from: string, to: string): SealedDay[] {
    return this.local.readDays(projectId, from, to);
  }

  month(projectId: string, month: string): RangePart | undefined {
    return this.local.month(projectId, month);
  }

  days(projectId: string, from: string, to: string): SealedSegment[] {
    return this.local.days(projectId, from, to);
  }

  dayCount(): number {
    return this.local.dayCount();
  }

  /** Drops a project's rows from the local copy (its erasure reached this node); the bucket's are purged by eraseProject. */
  async removeLocal(projectId: string): Promise<void> {
    this.local.removeProject(projectId);
    await this.local.flushed();
  }

  /** Deletes every row of a project from the bucket (each leaves a delete marker the mirrors apply) and the local copy. */
  async eraseProject(projectId: string): Promise<number> {
    const keys: string[] = [];
    for await (const k of await this.kv.keys(`${idToken(projectId)}.>`)) keys.push(k);
    await inParallel(keys, MAX_PARALLEL_PUTS, (k) => this.kv.delete(k)); // not purge: NO_PURGE in kv-mirror.ts
    await this.removeLocal(projectId);
    return keys.length;
  }

  async close(): Promise<void> {
    await this.mirror.close();
    await this.copy.close();
  }
}

async function inParallel<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  let failed: unknown;
  const worker = async () => {
    while (next < items.length && failed === undefined) {
      const item = items[next++]!;
      try {
        await fn(item);
      } catch (err) {
        failed ??= err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failed !== undefined) throw failed;
}
