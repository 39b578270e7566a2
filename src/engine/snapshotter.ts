import { toSnapshot } from '../core/snapshot.ts';
import { apply, type AnalyticsState } from '../core/state.ts';
import type { LogRecord } from '../core/types.ts';
import type { SnapshotFiles } from '../store/snapshot-files.ts';

/**
 * Folds committed records into the state and decides when to snapshot: after `everyEvents` records, on the
 * engine's interval, and at shutdown. A snapshot is built synchronously at one consistent point (the state as of
 * `lastSeq`) and written in the background; only one is written at a time.
 */
export class Snapshotter {
  private lastSnapshotSeq: number;
  private writing: Promise<void> | undefined;
  /** the next snapshot replaces every older file (state was dropped that older files still hold) */
  purgePending = false;

  constructor(
    private readonly state: AnalyticsState,
    private readonly files: SnapshotFiles,
    private readonly everyEvents: number,
    private readonly log: (line: string) => void,
    /** reports each written snapshot: seconds from capture to durable file, and its size */
    private readonly onWritten?: (seconds: number, bytes: number) => void,
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

  /** `replaceAll`: delete every other snapshot file once this one is written (after an erasure). */
  async snapshot(opts: { replaceAll?: boolean } = {}): Promise<void> {
    while (this.writing) await this.writing;
    const started = performance.now();
    const data = toSnapshot(this.state);
    const replaceAll = opts.replaceAll === true || this.purgePending;
    this.purgePending = false;
    this.writing = this.files
      .write(data, { replaceAll })
      .then(({ bytes }) => {
        this.lastSnapshotSeq = data.lastSeq;
        this.onWritten?.((performance.now() - started) / 1000, bytes);
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
}
