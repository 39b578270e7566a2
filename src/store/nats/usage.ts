import type { KV } from '@nats-io/kv';

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
/** Restart a failed watch after this pause (a server restart or a lost connection). */
const WATCH_RETRY_MS = 1_000;

function keyOf(projectId: string, month: string): string {
  return `${PREFIX}${projectId}.${month}`;
}

export class KvUsage {
  private readonly held = new Map<string, Usage>();
  private stopped = false;
  private watcher: { stop(): void } | undefined;

  private constructor(
    private readonly kv: KV,
    private readonly log: (line: string) => void,
  ) {}

  static async open(kv: KV, log: (line: string) => void): Promise<KvUsage> {
    const u = new KvUsage(kv, log);
    await u.watch();
    return u;
  }

  private async watch(): Promise<void> {
    if (this.stopped) return;
    const it = await this.kv.watch({ key: `${PREFIX}>` });
    this.watcher = it;
    void (async () => {
      try {
        for await (const e of it) {
          if (e.operation !== 'PUT') {
            this.held.delete(e.key);
            continue;
          }
          try {
            const u = e.json<Usage>();
            if (Number.isFinite(u.count) && Number.isFinite(u.seq)) this.held.set(e.key, u);
          } catch {
            /* not ours: ignored */
          }
        }
      } catch (err) {
        if (!this.stopped) this.log(`usage watch failed: ${err instanceof Error ? err.message : String(err)}`);
      }
      if (!this.stopped) setTimeout(() => void this.watch().catch((err: unknown) => this.log(`usage watch: ${String(err)}`)), WATCH_RETRY_MS).unref();
    })();
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
    this.stopped = true;
    this.watcher?.stop();
  }
}
