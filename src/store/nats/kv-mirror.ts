import type { KV, KvEntry } from '@nats-io/kv';

/**
 * A KV bucket followed by a watch and applied to a local copy (the catalog's memory, the sealed rows' LMDB), with the
 * two things every such copy needs on 2.9.10: a `ready` point (everything stored when the mirror opened is applied)
 * and a check that restarts a watch that stopped or stalled after a server loss (§13.9: push consumers may not recover
 * by themselves), resuming after the last applied revision.
 */

/**
 * NO_PURGE: remove keys of a mirrored bucket with `kv.delete`, never `kv.purge`. On 2.9.10 a purge marker carries a
 * subject rollup, and a watch (push consumer) did not deliver purge markers published at the same moment (3 parallel
 * purges: only the last arrived; test/cluster-sealing.test.ts), so a mirror would keep a revoked key or an erased row.
 * Deletes arrive every time, and with history 1 a delete marker replaces the value just as a purge does.
 */

/** How often the mirror is compared with the bucket's last revision. */
const MIRROR_CHECK_MS = 2_000;
/** The mirror behind the bucket and silent this long: a fresh watch from the last applied revision. */
const MIRROR_STALL_MS = 10_000;

export interface KvMirrorOptions {
  /** what the mirror is called in log lines */
  name: string;
  /** applies one entry (PUT, DEL or PURGE) to the copy */
  apply(e: KvEntry): void;
  log(line: string): void;
  /** the copy already holds everything up to this revision (a persisted copy): the watch resumes after it */
  after?: number;
}

export class KvMirror {
  /** highest revision applied from the watch (the watch resumes after it) */
  applied: number;
  private lastProgress = Date.now();
  private watcher: { stop(): void } | undefined;
  private generation = 0;
  private closed = false;
  private readonly timer: NodeJS.Timeout;
  private checking = false;
  private readyTarget = 0;
  private resolveReady!: () => void;
  private readonly readyPromise = new Promise<void>((r) => (this.resolveReady = r));
  private isReady = false;
  private waiters: Array<{ revision: number; resolve: () => void }> = [];

  private constructor(
    readonly kv: KV,
    private readonly o: KvMirrorOptions,
  ) {
    this.applied = o.after ?? 0;
    this.timer = setInterval(() => void this.check(), MIRROR_CHECK_MS);
    this.timer.unref();
  }

  /** Starts the watch; `ready()` resolves once the values stored when it opened are applied. */
  static async open(kv: KV, o: KvMirrorOptions): Promise<KvMirror> {
    const m = new KvMirror(kv, o);
    try {
      m.readyTarget = await m.lastRevision();
      if (m.readyTarget <= m.applied) m.markReady();
      await m.watch(m.applied);
      return m;
    } catch (err) {
      await m.close();
      throw err;
    }
  }

  ready(): Promise<void> {
    return this.readyPromise;
  }

  get isMirrorReady(): boolean {
    return this.isReady;
  }

  /** Resolves once everything the bucket holds now is applied (asks the bucket's last revision first). */
  async caughtUp(): Promise<void> {
    const target = await this.lastRevision();
    if (this.applied >= target) return;
    await new Promise<void>((resolve) => this.waiters.push({ revision: target, resolve }));
  }

  async lastRevision(): Promise<number> {
    const st = await this.kv.status();
    return st.streamInfo.state.last_seq;
  }

  private markReady(): void {
    if (this.isReady) return;
    this.isReady = true;
    this.resolveReady();
  }

  private async watch(afterRevision: number): Promise<void> {
    const gen = ++this.generation;
    this.watcher?.stop();
    this.watcher = undefined;
    const it = await this.kv.watch(afterRevision > 0 ? { resumeFromRevision: afterRevision + 1 } : {});
    if (gen !== this.generation || this.closed) {
      it.stop();
      return;
    }
    this.watcher = it;
    this.lastProgress = Date.now();
    void (async () => {
      try {
        for await (const e of it) {
          if (gen !== this.generation) break;
          if (e.revision <= this.applied) continue; // a restarted watch may repeat what was applied
          try {
            this.o.apply(e);
          } catch (err) {
            this.o.log(`${this.o.name}: entry ${e.key} at revision ${e.revision} not applied: ${err instanceof Error ? err.message : String(err)}`);
          }
          this.applied = e.revision;
          this.lastProgress = Date.now();
          if (this.applied >= this.readyTarget) this.markReady();
          if (this.waiters.length > 0) this.release();
        }
      } catch (err) {
        if (!this.closed) this.o.log(`${this.o.name} watch failed: ${err instanceof Error ? err.message : String(err)}`);
      }
      if (gen === this.generation && !this.closed) this.watcher = undefined; // the check restarts it
    })();
  }

  private release(): void {
    const still: typeof this.waiters = [];
    for (const w of this.waiters) (w.revision <= this.applied ? w.resolve() : still.push(w));
    this.waiters = still;
  }

  /** Every MIRROR_CHECK_MS: no watch → restart; the bucket ahead and nothing arrived for MIRROR_STALL_MS → restart. */
  private async check(): Promise<void> {
    if (this.closed || this.checking) return;
    this.checking = true;
    try {
      if (!this.watcher) {
        await this.watch(this.applied);
        return;
      }
      if (Date.now() - this.lastProgress < MIRROR_STALL_MS) return;
      const last = await this.lastRevision();
      if (last <= this.applied) {
        this.lastProgress = Date.now();
        // nothing left to apply: what waits for a revision past the bucket's end (removed meanwhile) is released
        for (const w of this.waiters) w.resolve();
        this.waiters = [];
        return;
      }
      this.o.log(`${this.o.name} stalled at revision ${this.applied} (bucket at ${last}): new watch`);
      await this.watch(this.applied);
    } catch (err) {
      this.o.log(`${this.o.name} check failed (retried in ${MIRROR_CHECK_MS} ms): ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      this.checking = false;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.generation++;
    clearInterval(this.timer);
    this.watcher?.stop();
    this.watcher = undefined;
    for (const w of this.waiters) w.resolve();
    this.waiters = [];
  }
}
