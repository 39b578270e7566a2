import { toSnapshot } from '../core/snapshot.ts';
import { apply, type AnalyticsState } from '../core/state.ts';
import type { LogRecord } from '../core/types.ts';
import type { SnapshotFiles } from '../store/snapshot-files.ts';

/**
 * Folds committed records into the state and decides when to snapshot: after `everyEvents` records, on the
 * engine's interval, and at shutdown. A snapshot is captured synchronously at one consistent point (the live state
 * as of `lastSeq`: hash tables copied with a memcpy each, no per-key work) and serialized, hashed and written by a
 * worker thread; only one is written at a time.
 */
export class Snapshotter {
  private lastSnapshotSeq: number;
  private writing: Promise<void> | undefined;

  constructor(
    private readonly state: AnalyticsState,
    private readonly files: SnapshotFiles,
    private readonly everyEvents: number,
    private readonly log: (line: string) => void,
  ) {
    this.lastSnapshotSeq = state.lastSeq;
  }

  fold(firstSeq: number, records: readonly LogRecord[]): void {
    for (let i = 0; i < records.length; i++) apply(this.state, firstSeq + i, records[i]!);
    if (this.state.lastSeq - this.lastSnapshotSeq >= this.everyEvents && !this.writing) void this.snapshot();
  }

  async snapshotIfChanged(): Promise<void> {
    if (this.state.lastSeq !== this.lastSnapshotSeq) await this.snapshot();
  }

  async snapshot(): Promise<void> {
    while (this.writing) await this.writing;
    const data = toSnapshot(this.state);
    this.writing = this.files
      .write(data)
      .then(() => {
        this.lastSnapshotSeq = data.lastSeq;
      })
      .catch((err: unknown) => this.log(`snapshot failed: ${err instanceof Error ? err.message : String(err)}`))
      .finally(() => {
        this.writing = undefined;
      });
    await this.writing;
  }

  async idle(): Promise<void> {
    while (this.writing) await this.writing;
  }

  /** The log must keep every record after this sequence: the oldest snapshot a restart may fall back on. */
  oldestKeptSeq(): number {
    return this.files.oldestSeq();
  }

  /** Stops the writer thread (after idle). */
  async close(): Promise<void> {
    await this.idle();
    await this.files.close();
  }
}
