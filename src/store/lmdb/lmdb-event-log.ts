import type { LogRecord } from '../../core/types.ts';
import type { LogStore } from './log-store.ts';
import type { Appended, EventLog, Follower, LogEntry } from '../seams.ts';

/**
 * The single-node event log (the default mode) behind the EventLog seam: the LMDB log of LogStore, one partition.
 * An entry is one appended batch (LogStore writes one LMDB entry per append); its `seq` is its first record's
 * sequence and the records are numbered on from there. LMDB has no transport retries, so `duplicate` is always false
 * and the batch id is not stored (a client's repeated eventId is refused at ingest instead). There is no `follow`:
 * in this mode the engine folds each batch inline, right after its append commits.
 */

/** Entries per chunk of `read`: amortizes the async hand-over per chunk, small enough to yield to requests. */
const READ_CHUNK_ENTRIES = 256;

export interface LmdbEventLogOptions {
  /** runs inside the append's transaction (e.g. remembering the batch's eventIds), so both commit or neither */
  inTransaction?: (records: readonly LogRecord[], firstSeq: number) => void;
}

export class LmdbEventLog implements EventLog {
  readonly partitions = 1;

  /** The store stays the caller's: close() leaves it open. */
  constructor(
    readonly store: LogStore,
    private readonly opts: LmdbEventLogOptions = {},
  ) {}

  private check(partition: number): void {
    if (partition !== 0) throw new RangeError(`no partition ${partition} (the LMDB log has one: 0)`);
  }

  async append(partition: number, records: readonly LogRecord[], _batchId: string): Promise<Appended> {
    this.check(partition);
    const extra = this.opts.inTransaction;
    const seq = await this.store.append(records, extra ? (first) => extra(records, first) : undefined);
    return { seq, duplicate: false };
  }

  async lastSeq(partition: number): Promise<number> {
    this.check(partition);
    return this.store.lastSeq();
  }

  async *read(partition: number, afterSeq: number): AsyncIterable<LogEntry[]> {
    this.check(partition);
    const end = this.store.lastSeq();
    if (end <= afterSeq) return;
    const starts = this.store.entryStarts(afterSeq + 1);
    let nextStart = starts.next().value;
    let chunk: LogEntry[] = [];
    let cur: LogEntry | undefined;
    for (const { seq, record } of this.store.readAfter(afterSeq)) {
      if (seq > end) break;
      let fresh = cur === undefined;
      while (nextStart !== undefined && nextStart <= seq) {
        if (nextStart === seq) fresh = true;
        nextStart = starts.next().value;
      }
      if (fresh) {
        if (cur) chunk.push(cur);
        if (chunk.length >= READ_CHUNK_ENTRIES) {
          yield chunk;
          chunk = [];
        }
        cur = { seq, records: [] };
      }
      cur!.records.push(record);
    }
    starts.return(undefined);
    if (cur) chunk.push(cur);
    if (chunk.length > 0) yield chunk;
  }

  follow(_partition: number, _afterSeq: number, _onEntry: (e: LogEntry) => void): Follower {
    throw new Error('the LMDB event log has no follow: single-node mode folds each batch inline after its append');
  }

  async close(): Promise<void> {}
}
