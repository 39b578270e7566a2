import { existsSync, mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { DEDUP_WINDOW_MS, MAX_BATCH_EVENTS } from '../core/limits.ts';
import type { FunnelQuestion, FunnelStepAnswer, Goal, Question, QueryAnswer } from '../core/query/types.ts';
import type { FoldRecord } from '../core/types.ts';
import { ColumnStore } from '../store/lmdb/column-store.ts';
import type { LogEntry } from '../store/seams.ts';
import { ColumnProjection } from '../engine/column-projection.ts';
import type { OpenColumnStats } from '../engine/open-columns.ts';

/**
 * Questions (POST /query, /query/funnel) in cluster mode: every node that folds a partition (owner, standby,
 * ANALYTICS_FOLD=all) keeps that partition's column projection in its own LMDB file, `columns/p<nnn>/columns.lmdb`
 * under the node's data directory. One file per partition rather than keys prefixed by partition, because the
 * projection's marker is per file: each partition then resumes from its own stream sequence, a partition that moves
 * away leaves its file to resume from later, and erasing a project compacts only its partition's file.
 *
 * Numbering: a stream message (one ingest batch) has one sequence S, the projection numbers records one by one; the
 * records of message S are numbered S × SEQ_SPAN + i, so the marker divided by SEQ_SPAN is the stream sequence that
 * every message up to is sealed. A message with nothing for the columns (a clock tick, repeats, an erase marker) is
 * fed as one clock record, so the marker still moves past it.
 *
 * What goes in is what the partition's fold applied (applyOnce): a repeat of an eventId counts in neither.
 */

/** Room per stream message in the projection's numbering: a batch is at most MAX_BATCH_EVENTS records (one per event). */
export const SEQ_SPAN = 4096;
if (SEQ_SPAN < MAX_BATCH_EVENTS) throw new Error('SEQ_SPAN must hold a whole batch');
/** Version of the question messages on the read subject; an owner refuses others with `unsupported_read`. */
export const QUESTION_WIRE_VERSION = 1;

/** A question sent to a partition's owner on the read subject, beside the `metrics` / `realtime` reads. */
export type QuestionRead =
  | { kind: 'query'; v: number; projectId: string; timezone: string; goals: Goal[]; question: Question }
  | { kind: 'funnel'; v: number; projectId: string; timezone: string; question: FunnelQuestion };

export function isQuestionRead(q: { kind?: unknown }): q is QuestionRead {
  return q.kind === 'query' || q.kind === 'funnel';
}

/** What an older owner answers for a kind it does not know (read-query.ts), or a newer owner for another version. */
export function unsupportedRead(code: string, message: string): boolean {
  return code === 'unsupported_read' || (code === 'internal' && message.startsWith('unknown read'));
}

const TICK: FoldRecord[] = [{ t: 'k', rt: 0 }];

/** One partition's column projection, fed in stream order; an erasure holds back later entries until it is done. */
export class PartitionColumns {
  private readonly projection: ColumnProjection;
  /** set while an erasure (it compacts the file) or entries queued behind it are pending */
  private tail: Promise<void> | undefined;

  private constructor(
    readonly partition: number,
    store: ColumnStore,
    private readonly log: (line: string) => void,
  ) {
    this.projection = new ColumnProjection(store, log);
  }

  /** Where a partition's columns file lives in a node's data directory. */
  static dir(dataDir: string, partition: number): string {
    return path.join(dataDir, 'columns', `p${String(partition).padStart(3, '0')}`);
  }

  static exists(dataDir: string, partition: number): boolean {
    return existsSync(PartitionColumns.dir(dataDir, partition));
  }

  /** Removes a partition's columns (closed first): it rebuilds from the stream when the partition is folded here again. */
  static remove(dataDir: string, partition: number): void {
    rmSync(PartitionColumns.dir(dataDir, partition), { recursive: true, force: true });
  }

  static open(dataDir: string, partition: number, log: (line: string) => void): PartitionColumns {
    const dir = PartitionColumns.dir(dataDir, partition);
    mkdirSync(dir, { recursive: true });
    return new PartitionColumns(partition, ColumnStore.open(dir), (line) => log(`partition ${partition} columns: ${line}`));
  }

  /** The stream sequence up to which every message is in a sealed segment. */
  streamMarker(): number {
    return Math.floor(this.projection.marker() / SEQ_SPAN);
  }

  /** The records of stream message `seq` that the fold applied (only events count; an empty list moves the marker). */
  feed(seq: number, applied: readonly FoldRecord[]): void {
    if (applied.length > SEQ_SPAN) throw new Error(`message ${seq} holds ${applied.length} records, more than SEQ_SPAN`);
    const records = applied.length > 0 ? applied : TICK;
    if (this.tail) this.chain(async () => this.projection.fold(seq * SEQ_SPAN, records));
    else this.projection.fold(seq * SEQ_SPAN, records);
  }

  /** The erase marker of a deleted project, in stream order: its segments go, later entries wait for it. */
  erase(projectId: string): void {
    this.chain(async () => {
      const n = await this.projection.erase(projectId);
      this.log(`project ${projectId} erased (${n} segments)`);
    });
  }

  private chain(step: () => Promise<void>): void {
    const t = (this.tail ?? Promise.resolve()).then(step).catch((err: unknown) => this.log(`failed: ${err instanceof Error ? err.message : String(err)}`));
    this.tail = t;
    void t.finally(() => {
      if (this.tail === t) this.tail = undefined;
    });
  }

  /** Resolves once every entry fed so far is in the projection. */
  async settled(): Promise<void> {
    while (this.tail) await this.tail;
  }

  openStats(): OpenColumnStats {
    return this.projection.openStats();
  }

  async flush(): Promise<void> {
    await this.settled();
    await this.projection.flush();
  }

  async query(projectId: string, timezone: string, goals: readonly Goal[], q: Question): Promise<QueryAnswer> {
    await this.settled();
    return this.projection.query(projectId, timezone, goals, q);
  }

  async funnel(projectId: string, timezone: string, q: FunnelQuestion): Promise<FunnelStepAnswer[]> {
    await this.settled();
    return this.projection.funnel(projectId, timezone, q);
  }

  async close(): Promise<void> {
    await this.settled();
    await this.projection.close();
  }
}

/** Answers a question from a partition's columns (the caller passed the read barrier). */
export function answerQuestion(cols: PartitionColumns, q: QuestionRead): Promise<QueryAnswer | FunnelStepAnswer[]> {
  return q.kind === 'query' ? cols.query(q.projectId, q.timezone, q.goals, q.question) : cols.funnel(q.projectId, q.timezone, q.question);
}

/**
 * Brings a partition's columns from their marker up to `to` when no partition snapshot at or below the marker is
 * left to fold from alongside them: the repeats of an eventId are recognised within the replayed range only (a repeat
 * of an event folded before the marker counts once more), which the caller logs.
 */
export async function catchUpColumns(cols: PartitionColumns, entries: AsyncIterable<LogEntry[]>, to: number, stillWanted: () => boolean): Promise<number> {
  const seen = new Map<string, number>();
  let n = 0;
  for await (const chunk of entries) {
    for (const e of chunk) {
      if (!stillWanted() || e.seq > to) return n;
      if (e.erase !== undefined) {
        cols.erase(e.erase);
        for (const k of [...seen.keys()]) if (k.startsWith(`${e.erase}\u0000`)) seen.delete(k);
        cols.feed(e.seq, []);
        continue;
      }
      const applied: FoldRecord[] = [];
      for (const r of e.records) {
        if (r.t !== 'e') continue;
        if (r.eventId !== undefined) {
          const k = `${r.p}\u0000${r.eventId}`;
          const at = seen.get(k);
          if (at !== undefined && Math.abs(r.rt - at) < DEDUP_WINDOW_MS) continue;
          seen.set(k, r.rt);
        }
        applied.push(r);
      }
      cols.feed(e.seq, applied);
      n++;
    }
  }
  return n;
}
