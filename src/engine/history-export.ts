import { byTime } from '../core/history-line.ts';
import type { LogRecord, StoredEvent } from '../core/types.ts';

/**
 * Reads one project's stored events of [from, to] from the log, in time order, in bounded chunks, for
 * GET /projects/{id}/export and `analytics export --raw --data-dir`. The log is in receive order and has no index by
 * day, so a first pass counts each day's events and notes the sequence range holding them; then chunks of whole days
 * (at most EXPORT_CHUNK_EVENTS events, a larger day split by time) are read back from just their sequence range,
 * sorted by time, and handed out. Receive order follows event time closely (live traffic, a time-ordered import),
 * so each chunk's range is narrow and the whole export reads the log about twice.
 */

/** Events held at once: ~500 bytes each on the heap, so ~25 MiB, whatever the size of the export. */
export const EXPORT_CHUNK_EVENTS = 50_000;
/** Records read per slice before yielding to the event loop: decoding 5,000 takes ~5–10 ms, well under 50 ms. */
export const READ_SLICE = 5_000;

/** What the reader needs of the log: records after a sequence, in order (LogStore.readAfter). */
export interface LogReader {
  readAfter(afterSeq: number): Iterable<{ seq: number; record: LogRecord }>;
  logStart(): number;
  lastSeq(): number;
}

export interface DaySpan {
  count: number;
  minSeq: number;
  maxSeq: number;
  minTs: number;
  maxTs: number;
}

export interface Chunk {
  days: Set<string>;
  minSeq: number;
  maxSeq: number;
  /** [fromTs, toTs): the part of a large day this chunk holds (whole days: unbounded) */
  fromTs: number;
  toTs: number;
}

export const yieldTurn = () => new Promise((resolve) => setImmediate(resolve));

/** Calls `visit` for every record of the log in [fromSeq, toSeq], in slices that yield between them. */
async function scan(log: LogReader, fromSeq: number, toSeq: number, visit: (seq: number, r: LogRecord) => void): Promise<void> {
  let after = fromSeq - 1;
  for (;;) {
    let n = 0;
    let done = true;
    for (const { seq, record } of log.readAfter(after)) {
      if (seq > toSeq) break;
      visit(seq, record);
      after = seq;
      if (++n >= READ_SLICE) {
        done = false;
        break;
      }
    }
    if (done) return;
    await yieldTurn();
  }
}

function isOf(r: LogRecord, projectId: string, from: string, to: string): r is StoredEvent {
  return r.t === 'e' && r.p === projectId && r.day >= from && r.day <= to;
}

/** The project's events of [from, to], in time order, a chunk at a time. `onProgress(done, total)` counts events. */
export async function* exportEvents(
  log: LogReader,
  projectId: string,
  from: string,
  to: string,
  onProgress: (done: number, total: number) => void = () => {},
): AsyncGenerator<StoredEvent[]> {
  const spans = new Map<string, DaySpan>();
  const last = log.lastSeq();
  await scan(log, log.logStart(), last, (seq, r) => {
    if (isOf(r, projectId, from, to)) noteSpan(spans, seq, r);
  });
  let total = 0;
  for (const s of spans.values()) total += s.count;
  let done = 0;
  onProgress(0, total);
  for (const chunk of chunks(spans)) {
    const events: StoredEvent[] = [];
    await scan(log, chunk.minSeq, chunk.maxSeq, (_seq, r) => {
      if (r.t === 'e' && r.p === projectId && chunk.days.has(r.day) && r.ts >= chunk.fromTs && r.ts < chunk.toTs) events.push(r);
    });
    events.sort(byTime);
    done += events.length;
    yield events;
    onProgress(done, total);
  }
}

/** Counts an event read at `seq` (in log order) into its day's span. */
export function noteSpan(spans: Map<string, DaySpan>, seq: number, r: StoredEvent): void {
  const s = spans.get(r.day);
  if (!s) spans.set(r.day, { count: 1, minSeq: seq, maxSeq: seq, minTs: r.ts, maxTs: r.ts });
  else {
    s.count++;
    s.maxSeq = seq;
    if (r.ts < s.minTs) s.minTs = r.ts;
    if (r.ts > s.maxTs) s.maxTs = r.ts;
  }
}

/** Whole days in date order, grouped up to EXPORT_CHUNK_EVENTS; a larger day alone, cut into equal time slices. */
export function* chunks(spans: Map<string, DaySpan>): Generator<Chunk> {
  const days = [...spans.keys()].sort();
  let current: Chunk | undefined;
  let held = 0;
  for (const day of days) {
    const s = spans.get(day)!;
    if (s.count > EXPORT_CHUNK_EVENTS) {
      if (current) yield current;
      current = undefined;
      held = 0;
      const parts = Math.ceil(s.count / EXPORT_CHUNK_EVENTS);
      const width = Math.ceil((s.maxTs + 1 - s.minTs) / parts);
      for (let i = 0; i < parts; i++) {
        const fromTs = s.minTs + i * width;
        yield { days: new Set([day]), minSeq: s.minSeq, maxSeq: s.maxSeq, fromTs, toTs: i === parts - 1 ? s.maxTs + 1 : fromTs + width };
      }
      continue;
    }
    if (current && held + s.count > EXPORT_CHUNK_EVENTS) {
      yield current;
      current = undefined;
      held = 0;
    }
    if (!current) current = { days: new Set(), minSeq: s.minSeq, maxSeq: s.maxSeq, fromTs: Number.NEGATIVE_INFINITY, toTs: Number.POSITIVE_INFINITY };
    current.days.add(day);
    if (s.minSeq < current.minSeq) current.minSeq = s.minSeq;
    if (s.maxSeq > current.maxSeq) current.maxSeq = s.maxSeq;
    held += s.count;
  }
  if (current) yield current;
}
