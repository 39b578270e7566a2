import { randomBytes } from 'node:crypto';
import type { KV, KvEntry } from '@nats-io/kv';

/**
 * The cluster's record of project erasures, in the catalog bucket (src/cluster/cluster-erasure.ts does the work):
 *
 * - `erase.<id>` — a pending erasure, written before the project leaves the catalog and removed when its events,
 *   snapshots and usage are gone. A node that dies midway leaves it; another node (or the same one restarting)
 *   finishes it. `{projectId, token, markerSeq?, lateSeq?, progress?}`: `token` names its erase markers' msg-ids,
 *   `markerSeq` is the newest marker published for it (none yet: publish one).
 * - `erasefloor.<n>` — partition n's erase floor: the newest erase marker's sequence of a finished (or finishing)
 *   erasure there. Snapshots of n below it may hold an erased project: they are deleted and never loaded or written
 *   again, on every node (each node's catalog mirror applies these keys).
 *
 * Project ids of `[A-Za-z0-9_-]` are used as they are in keys; others base64url after a '=' (like `project.<id>`).
 */

const PENDING = 'erase.';
const FLOOR = 'erasefloor.';
const SAFE_ID = /^[A-Za-z0-9_-]+$/;

export interface PendingErasure {
  projectId: string;
  /** random, per erasure: its markers' msg-ids are `x:<token>:<n>` (a retried publish is stored once) */
  token: string;
  /** sequence of the newest erase marker published for this erasure */
  markerSeq?: number;
  /** messages removed so far (progress, and a change of revision that tells other nodes this one is alive) */
  progress?: number;
}

function pendingKey(projectId: string): string {
  return PENDING + (SAFE_ID.test(projectId) ? projectId : `=${Buffer.from(projectId, 'utf8').toString('base64url')}`);
}

export class KvErasures {
  private readonly floors = new Map<number, number>();
  private readonly listeners = new Set<(partition: number, seq: number) => void>();

  private constructor(
    private readonly kv: KV,
    private readonly log: (line: string) => void,
  ) {}

  /**
   * Reads every partition's floor (so snapshots loaded right after see them). Raised ones arrive through the catalog
   * mirror, which watches the same bucket (KvMirror: a stalled watch is replaced): it hands them to `applyEntry`.
   */
  static async open(kv: KV, log: (line: string) => void): Promise<KvErasures> {
    const e = new KvErasures(kv, log);
    for (const k of await e.keys(`${FLOOR}>`)) {
      const v = await kv.get(k);
      if (v && v.operation === 'PUT') e.applyFloor(k, v.string());
    }
    return e;
  }

  /** A catalog-bucket entry the catalog mirror does not keep: a raised floor is applied. */
  applyEntry(e: KvEntry): void {
    if (e.operation === 'PUT' && e.key.startsWith(FLOOR)) this.applyFloor(e.key, e.string());
  }

  private async keys(filter: string): Promise<string[]> {
    const out: string[] = [];
    for await (const k of await this.kv.keys(filter)) out.push(k);
    return out;
  }

  private applyFloor(key: string, value: string): void {
    const n = Number(key.slice(FLOOR.length));
    const seq = Number(value);
    if (!Number.isInteger(n) || !Number.isInteger(seq) || seq <= (this.floors.get(n) ?? 0)) return;
    this.floors.set(n, seq);
    for (const fn of this.listeners) {
      try {
        fn(n, seq);
      } catch (err) {
        this.log(`erase floor listener failed: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }

  /** The partition's erase floor (0: none). */
  floor(partition: number): number {
    return this.floors.get(partition) ?? 0;
  }

  /** `fn(partition, floor)` for each floor known now and each one raised later (here or on another node). */
  onFloor(fn: (partition: number, seq: number) => void): () => void {
    this.listeners.add(fn);
    for (const [n, seq] of this.floors) fn(n, seq);
    return () => this.listeners.delete(fn);
  }

  /** Raises partition n's floor to at least `seq` (compare-and-set: concurrent erasures keep the highest). */
  async raiseFloor(partition: number, seq: number): Promise<void> {
    const k = FLOOR + partition;
    for (;;) {
      const cur = await this.kv.get(k);
      const at = cur && cur.operation === 'PUT' ? Number(cur.string()) : 0;
      if (at >= seq) break;
      try {
        if (cur) await this.kv.update(k, String(seq), cur.revision);
        else await this.kv.create(k, String(seq));
        break;
      } catch (err) {
        if (!/wrong last sequence|key exists/i.test(err instanceof Error ? err.message : String(err))) throw err;
        // another erasure raised it meanwhile: look again
      }
    }
    this.applyFloor(k, String(seq));
  }

  /** Records a pending erasure unless one is there already (the project is being erased: that one goes on). */
  async begin(projectId: string): Promise<void> {
    const rec: PendingErasure = { projectId, token: randomBytes(12).toString('base64url') };
    try {
      await this.kv.create(pendingKey(projectId), JSON.stringify(rec));
    } catch (err) {
      const cur = await this.kv.get(pendingKey(projectId));
      if (!cur || cur.operation !== 'PUT') throw err;
    }
  }

  async get(projectId: string): Promise<{ value: PendingErasure; revision: number } | undefined> {
    const e = await this.kv.get(pendingKey(projectId));
    if (!e || e.operation !== 'PUT') return undefined;
    return { value: e.json<PendingErasure>(), revision: e.revision };
  }

  async put(rec: PendingErasure): Promise<void> {
    await this.kv.put(pendingKey(rec.projectId), JSON.stringify(rec));
  }

  async remove(projectId: string): Promise<void> {
    await this.kv.delete(pendingKey(projectId)); // not purge: NO_PURGE in kv-mirror.ts
  }

  /** Every pending erasure with the revision of its record (unchanged for long: its node died). */
  async pending(): Promise<Array<{ value: PendingErasure; revision: number }>> {
    const out: Array<{ value: PendingErasure; revision: number }> = [];
    for (const k of await this.keys(`${PENDING}>`)) {
      const e = await this.kv.get(k);
      if (!e || e.operation !== 'PUT') continue;
      try {
        out.push({ value: e.json<PendingErasure>(), revision: e.revision });
      } catch {
        this.log(`pending erasure ${k} is not readable: skipped`);
      }
    }
    return out;
  }

  close(): void {
    this.listeners.clear();
  }
}
