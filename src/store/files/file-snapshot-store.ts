import type { SnapshotData } from '../../core/snapshot.ts';
import type { SnapshotStore } from '../seams.ts';
import type { SnapshotFiles } from './snapshot-files.ts';

/**
 * The single-node snapshot files behind the same seam: partition 0 only, the batch id is not kept (LMDB has none).
 */
export class FileSnapshotStore implements SnapshotStore {
  constructor(readonly files: SnapshotFiles) {}

  private check(partition: number): void {
    if (partition !== 0) throw new RangeError(`no partition ${partition} (single-node snapshots have one: 0)`);
  }

  async write(partition: number, data: SnapshotData): Promise<{ bytes: number }> {
    this.check(partition);
    const { bytes } = await this.files.write(data);
    return { bytes };
  }

  async loadNewest(partition: number, maxSeq: number, onSkip: (name: string, why: string) => void): Promise<{ data: SnapshotData } | undefined> {
    this.check(partition);
    const data = this.files.loadNewest(maxSeq, onSkip);
    return data ? { data } : undefined;
  }

  async close(): Promise<void> {
    await this.files.close();
  }
}
