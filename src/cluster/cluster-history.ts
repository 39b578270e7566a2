import { byTime } from '../core/history-line.ts';
import { DEDUP_PRUNE_MARGIN_MS, DEDUP_WINDOW_MS } from '../core/limits.ts';
import { countedWithin, noteCounted, pruneIds } from '../core/state.ts';
import type { FoldRecord, StoredEvent } from '../core/types.ts';
import { chunks, noteSpan, READ_SLICE, yieldTurn, type DaySpan } from '../engine/history-export.ts';
import { historyRepeats } from '../engine/partition-fold.ts';
import type { LogEntry } from '../store/seams.ts';
import { SEQ_SPAN } from './cluster-columns.ts';

/**
 * History in cluster mode: the partition's table of history eventIds brought up to a stream sequence, and
 * GET /projects/{id}/export read from the partition's stream.
 *
 * The table (store/lmdb/partition-history-ids.ts) is a function of the stream, so a node that starts folding a
 * partition from a snapshot reads the stream from the table's own marker up to the snapshot first. What it cannot
 * learn is a history id carried only by messages the stream no longer holds (ANALYTICS_RETENTION_DAYS removed them,
 * before this node's table took them): a re-send of such an id counts again on this node, and it is logged. Without
 * retention the stream holds every message and every node's table is complete.
 *
 * Export reads the stream twice, as a single node reads its log (engine/history-export.ts): a first pass counts each
 * day's events and notes their sequence range, then chunks of whole days are read back and sorted by time. Repeats the
 * fold dropped (applyOnce) are not events of the project: the first pass decides them with the fold's own rules (the
 * 48 h rule by receive time, over this project's ids only, pruned as the fold prunes; a history id's first sequence
 * from the table) and keeps their positions, which the second pass leaves out. Held on the heap while an export runs:
 * the project's eventIds within 48 h of receive time of the point read (what the fold holds for it too), the
 * positions of its repeats in the range (a repeat reaches the stream only when no pre-check knew it: few), and one
 * chunk of at most EXPORT_CHUNK_EVENTS events plus one read chunk of stream messages.
 */

/** What the table needs for a catch-up. */
export interface HistoryTable {
  marker(): number;
  firstSeq(projectId: string, eventId: string): number | undefined;
  note(seq: number, records: readonly FoldRecord[], moveMarker?: boolean): void;
  advance(seq: number): void;
  erase(projectId: string, seq: number): void;
}

/**
 * Reads the partition's messages after the table's marker up to `to` into it (erase markers too); every message up to
 * `to` is then in. Returns how many messages were read.
 */
export async function catchUpHistoryIds(table: HistoryTable, entries: AsyncIterable<LogEntry[]>, to: number, stillWanted: () => boolean): Promise<number> {
  let n = 0;
  outer: for await (const chunk of entries) {
    for (const e of chunk) {
      if (!stillWanted()) return n;
      if (e.seq > to) break outer;
      if (e.erase !== undefined) table.erase(e.erase, e.seq);
      else table.note(e.seq, e.records, true);
      n++;
    }
    await yieldTurn();
  }
  if (stillWanted()) table.advance(to);
  return n;
}

export interface StreamExportParts {
  /** the partition's entries after a sequence, in order (EventLog.read) */
  read(afterSeq: number): AsyncIterable<LogEntry[]>;
  /** the partition's last sequence as the export starts: the table holds every history id up to it */
  end: number;
  table: Pick<HistoryTable, 'firstSeq'> | undefined;
}

/** Entries of `read(after)` up to `to` (the read goes on to the stream's end as of its call: stopped here). */
async function* upTo(parts: StreamExportParts, after: number, to: number): AsyncGenerator<LogEntry> {
  let n = 0;
  for await (const chunk of parts.read(after)) {
    for (const e of chunk) {
      if (e.seq > to) return;
      yield e;
      n += e.records.length;
      if (n >= READ_SLICE) {
        n = 0;
        await yieldTurn();
      }
    }
  }
}

/** The project's stored events of [from, to] in the partition's stream, in time order, a chunk at a time. */
export async function* exportFromStream(parts: StreamExportParts, projectId: string, from: string, to: string): AsyncGenerator<StoredEvent[]> {
  let spans = new Map<string, DaySpan>();
  /** positions (seq × SEQ_SPAN + index) of the range's records the fold skipped as repeats */
  let repeats = new Set<number>();
  /** eventId -> receive time of the copy that counted, in fold order (applyOnce's map, this project only) */
  const counted = new Map<string, number>();
  let maxRt = 0;
  let nextPrune = 0;
  const inRange = (r: StoredEvent) => r.day >= from && r.day <= to;
  for await (const e of upTo(parts, 0, parts.end)) {
    if (e.erase === projectId) {
      // an earlier life of the id: its messages are gone or going
      spans = new Map();
      repeats = new Set();
      counted.clear();
      continue;
    }
    const historySeen = historyRepeats((p, id) => parts.table?.firstSeq(p, id), e.seq);
    for (let i = 0; i < e.records.length; i++) {
      const r = e.records[i]!;
      if (r.t !== 'e' || r.p !== projectId) continue;
      const id = r.eventId;
      if (id !== undefined) {
        // applyOnce's rules: the 48 h rule, then the history-repeat rule
        if (countedWithin(counted, id, r.rt) || (r.h === 1 && historySeen(projectId, id))) {
          if (inRange(r)) repeats.add(e.seq * SEQ_SPAN + i);
          continue;
        }
        noteCounted(counted, id, r.rt);
      }
      if (r.rt > maxRt) maxRt = r.rt;
      if (inRange(r)) noteSpan(spans, e.seq, r);
    }
    if (maxRt >= nextPrune) {
      pruneIds(counted, maxRt - DEDUP_WINDOW_MS - DEDUP_PRUNE_MARGIN_MS);
      nextPrune = maxRt + DEDUP_PRUNE_MARGIN_MS;
    }
  }
  for (const chunk of chunks(spans)) {
    const events: StoredEvent[] = [];
    for await (const e of upTo(parts, chunk.minSeq - 1, chunk.maxSeq)) {
      for (let i = 0; i < e.records.length; i++) {
        const r = e.records[i]!;
        if (r.t !== 'e' || r.p !== projectId || !chunk.days.has(r.day) || r.ts < chunk.fromTs || r.ts >= chunk.toTs) continue;
        if (repeats.has(e.seq * SEQ_SPAN + i)) continue;
        events.push(r);
      }
    }
    events.sort(byTime);
    yield events;
  }
}
