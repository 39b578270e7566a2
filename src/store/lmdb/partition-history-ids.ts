import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import type { FoldRecord } from '../../core/types.ts';

/**
 * Cluster mode: the eventIds of history (POST /projects/{id}/history) of one partition, remembered for good in this
 * node's data directory beside the partition's columns (`columns/p<nnn>/history-ids.lmdb`), never on the heap.
 *
 * [projectId, eventId] -> the stream sequence of the first history record carrying that id (counted or not). That is
 * a function of the stream alone, so every node reaches the same table whatever it started from: a replay of the same
 * message finds its own sequence (not an earlier one: not a repeat), writes only ever lower a sequence, and the marker
 * ("every message up to N is in") only rises. A deleted project's erase marker at sequence E removes its ids below E
 * and keeps E as its floor, so a reader that meets an older message of it later (an erasure still deleting them)
 * writes nothing back.
 *
 * Writes are asynchronous LMDB transactions (committed in order within ms); until one commits, its ids are answered
 * from `pending`. A crash loses at most the last uncommitted writes with the marker that covers them: the next start
 * reads the stream from the marker again.
 */

/** Room for the table: 10M ids of ~40 bytes with B-tree overhead are ~1 GiB at most; the map is sparse on disk. */
const MAP_SIZE = 16 * 1024 ** 3;
const MARKER = 'marker';
const erasedKey = (projectId: string) => `erased\u0000${projectId}`;
const pendingKey = (projectId: string, eventId: string) => `${projectId}\u0000${eventId}`;

type IdKey = [string, string];

/** The history ids (h: 1, with an eventId) of a message's records. */
function historyIds(records: readonly FoldRecord[]): Array<{ p: string; id: string }> {
  const out: Array<{ p: string; id: string }> = [];
  for (const r of records) if (r.t === 'e' && r.h === 1 && r.eventId !== undefined) out.push({ p: r.p, id: r.eventId });
  return out;
}

export class PartitionHistoryIds {
  private readonly root: RootDatabase;
  private readonly ids: Database<number, IdKey>;
  private readonly meta: Database<number, string>;
  /** ids written by transactions not committed yet: key -> sequence */
  private readonly pending = new Map<string, number>();
  /** the marker as last written (committed or not) */
  private mark: number;
  private writes: Promise<unknown> = Promise.resolve();
  private closed = false;

  private constructor(file: string) {
    this.root = open({ path: file, mapSize: MAP_SIZE, maxDbs: 2, noSubdir: true });
    this.ids = this.root.openDB<number, IdKey>({ name: 'ids' });
    this.meta = this.root.openDB<number, string>({ name: 'meta' });
    this.mark = this.meta.get(MARKER) ?? 0;
  }

  static file(dir: string): string {
    return path.join(dir, 'history-ids.lmdb');
  }

  /** Opens (or creates) the table in `dir` (the partition's columns directory). */
  static open(dir: string): PartitionHistoryIds {
    mkdirSync(dir, { recursive: true });
    return new PartitionHistoryIds(PartitionHistoryIds.file(dir));
  }

  /** Every history id of every message up to this stream sequence is in the table. */
  marker(): number {
    return this.mark;
  }

  /** The sequence of the first history record with this id, as far as the table knows. */
  firstSeq(projectId: string, eventId: string): number | undefined {
    const held = this.pending.get(pendingKey(projectId, eventId));
    const stored = this.ids.get([projectId, eventId]);
    if (held === undefined) return stored;
    return stored === undefined || held < stored ? held : stored;
  }

  has(projectId: string, eventId: string): boolean {
    return this.firstSeq(projectId, eventId) !== undefined;
  }

  /**
   * Takes the history ids of stream message `seq` (in stream order, after every message up to the marker). A message
   * without any only moves the marker when `moveMarker` (a catch-up); the live fold moves it with advance().
   */
  note(seq: number, records: readonly FoldRecord[], moveMarker = false): void {
    const found = historyIds(records);
    if (found.length === 0) {
      if (moveMarker) this.advance(seq);
      return;
    }
    const keys: Array<[string, number]> = [];
    for (const { p, id } of found) {
      const k = pendingKey(p, id);
      const held = this.pending.get(k);
      if (held === undefined || seq < held) this.pending.set(k, seq);
      keys.push([k, seq]);
    }
    if (seq > this.mark) this.mark = seq;
    this.write(() => {
      const floors = new Map<string, number>();
      for (const { p, id } of found) {
        let floor = floors.get(p);
        if (floor === undefined) floors.set(p, (floor = this.meta.get(erasedKey(p)) ?? 0));
        if (seq < floor) continue; // a message of an erased life of the project
        const cur = this.ids.get([p, id]);
        if (cur === undefined || seq < cur) void this.ids.put([p, id], seq);
      }
      if (seq > (this.meta.get(MARKER) ?? 0)) void this.meta.put(MARKER, seq);
    }, keys);
  }

  /** Every message up to `seq` is in (it held no history id, or it was noted): the marker rises. */
  advance(seq: number): void {
    if (seq <= this.mark) return;
    this.mark = seq;
    this.write(() => {
      if (seq > (this.meta.get(MARKER) ?? 0)) void this.meta.put(MARKER, seq);
    });
  }

  /** A deleted project's erase marker at `seq`: its ids below it go, and nothing below it is written again. */
  erase(projectId: string, seq: number): void {
    for (const [k, s] of this.pending) if (s < seq && k.startsWith(`${projectId}\u0000`)) this.pending.delete(k);
    if (seq > this.mark) this.mark = seq;
    this.write(() => {
      if (seq > (this.meta.get(erasedKey(projectId)) ?? 0)) void this.meta.put(erasedKey(projectId), seq);
      for (const { key, value } of this.ids.getRange({ start: [projectId], end: [`${projectId}\u0000`] })) {
        if (key[0] === projectId && value < seq) void this.ids.remove(key);
      }
      if (seq > (this.meta.get(MARKER) ?? 0)) void this.meta.put(MARKER, seq);
    });
  }

  /** How many ids the table holds for the project (tests, operator checks). */
  count(projectId: string): number {
    let n = 0;
    for (const k of this.ids.getKeys({ start: [projectId], end: [`${projectId}\u0000`] })) if (k[0] === projectId) n++;
    return n;
  }

  private write(body: () => void, keys: Array<[string, number]> = []): void {
    if (this.closed) return;
    const done = this.root.transaction(body);
    this.writes = done;
    void done
      .catch(() => {}) // a failed write leaves the marker below it: the next start reads those messages again
      .finally(() => {
        for (const [k, s] of keys) if (this.pending.get(k) === s) this.pending.delete(k);
      });
  }

  /** Resolves once every write made so far is committed. */
  async flushed(): Promise<void> {
    await this.writes.catch(() => {});
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.flushed();
    this.closed = true;
    await this.root.close();
  }
}
