import type { Database } from 'lmdb';
import type { LogRecord } from '../../core/types.ts';
import type { IdKey } from './remembered-ids.ts';

/**
 * The eventIds of history (POST /projects/{id}/history), remembered for good: an import run again, a year later,
 * counts nothing twice. [project, eventId] -> 1 in LMDB, claimed inside the log append's transaction of the events
 * that carry them (durable exactly when they are), erased with the project. Nothing of it is on the heap: 10M
 * imported ids would cost ~300 MiB in a table. The claim is the check: a write that finds its key already there
 * (LMDB's no-overwrite put) drops its event, so an import pays one B-tree descent an id, not a lookup before the
 * write as well (~2.5 µs an event of ~33 µs, in bench/history.ts's profile).
 */
export class HistoryIds {
  constructor(private db: Database<number, IdKey>) {}

  /** The environment was reopened (after a compaction): use its handle. */
  reopen(db: Database<number, IdKey>): void {
    this.db = db;
  }

  /**
   * Inside the log append's transaction (LogStore.append's `admit`): writes the id of each history event and returns
   * the records without the history events whose id was there already (stored before, or by an earlier batch).
   */
  claim(records: readonly LogRecord[]): readonly LogRecord[] {
    let kept: LogRecord[] | undefined;
    for (let i = 0; i < records.length; i++) {
      const r = records[i]!;
      const fresh = r.t !== 'e' || r.h !== 1 || r.eventId === undefined || this.db.putSync([r.p, r.eventId], 1, { noOverwrite: true });
      if (!fresh) kept ??= records.slice(0, i);
      else kept?.push(r);
    }
    return kept ?? records;
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
