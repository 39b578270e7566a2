import type { KV, KvEntry } from '@nats-io/kv';
import { KvMirror } from './kv-mirror.ts';

/**
 * Monthly usage per project, published by partition owners (CLUSTER.md §8) in `analytics_usage_v1` as
 * `usage.<projectId>.<YYYY-MM>` = {count, seq}: the folded count of the month and the stream sequence it covers.
 * Every node mirrors the bucket by a watch, so a node that does not fold a project's partition can still enforce its
 * quota: published count plus what it acknowledged after `seq`.
 */

export interface Usage {
  count: number;
  /** the partition's stream sequence the count covers */
  seq: number;
}

const PREFIX = 'usage.';

function keyOf(projectId: string, month: string): string {
  return `${PREFIX}${projectId}.${month}`;
}

export class KvUsage {
  private readonly held = new Map<string, Usage>();
  private mirror!: KvMirror;

  private constructor(private readonly kv: KV) {}

  /** Mirrors the bucket (KvMirror: a stalled watch is replaced, as the catalog's is). */
  static async open(kv: KV, log: (line: string) => void): Promise<KvUsage> {
    const u = new KvUsage(kv);
    u.mirror = await KvMirror.open(kv, { name: 'usage mirror', apply: (e) => u.apply(e), log });
    return u;
  }

  private apply(e: KvEntry): void {
    if (!e.key.startsWith(PREFIX)) return;
    if (e.operation !== 'PUT') {
      this.held.delete(e.key);
      return;
    }
    try {
      const u = e.json<Usage>();
      if (Number.isFinite(u.count) && Number.isFinite(u.seq)) this.held.set(e.key, u);
    } catch {
      /* not ours: ignored */
    }
  }

  get(projectId: string, month: string): Usage | undefined {
    return this.held.get(keyOf(projectId, month));
  }

  async publish(projectId: string, month: string, usage: Usage): Promise<void> {
    await this.kv.put(keyOf(projectId, month), JSON.stringify(usage));
  }

  /** Removes every month's usage of a project (its erasure): nothing of it stays in the bucket. */
  async removeProject(projectId: string): Promise<number> {
    const keys: string[] = [];
    for await (const k of await this.kv.keys(`${PREFIX}${projectId}.>`)) keys.push(k);
    for (const k of keys) {
      await this.kv.delete(k); // not purge: NO_PURGE in kv-mirror.ts
      this.held.delete(k);
    }
    return keys.length;
  }

  close(): void {
    void this.mirror.close();
  }
}
