import type { Database } from 'lmdb';
import type { LogRecord } from '../../core/types.ts';
import type { IdKey } from './remembered-ids.ts';

/**
 * The eventIds of history (POST /projects/{id}/history), remembered for good: an import run again, a year later,
 * counts nothing twice. [project, eventId] -> 1 in LMDB, written inside the log append's transaction of the events
 * that carry them (durable exactly when they are), erased with the project. Nothing of it is on the heap: 10M
 * imported ids would cost ~300 MiB in a table, and a lookup is one B-tree read (~1–2 µs, a few per 500-event batch).
 */
export class HistoryIds {
  constructor(private db: Database<number, IdKey>) {}

  /** The environment was reopened (after a compaction): use its handle. */
  reopen(db: Database<number, IdKey>): void {
    this.db = db;
  }

  has(projectId: string, eventId: string): boolean {
    return this.db.doesExist([projectId, eventId]);
  }

  /** Call inside the log append's transaction (LogStore.append's `extra`). */
  writeWith(records: readonly LogRecord[]): void {
    for (const r of records) if (r.t === 'e' && r.h === 1 && r.eventId !== undefined) this.db.putSync([r.p, r.eventId], 1);
  }

  /** Every id of the project (erasure). */
  *keysOf(projectId: string): Generator<IdKey> {
    for (const k of this.db.getKeys({ start: [projectId], end: [`${projectId}\u0000`] })) if (k[0] === projectId) yield k;
  }

  count(projectId: string): number {
    let n = 0;
    for (const _ of this.keysOf(projectId)) n++;
    return n;
  }
}
