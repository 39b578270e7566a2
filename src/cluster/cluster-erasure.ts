import type { LogEntry } from '../store/seams.ts';
import type { Appended } from '../store/seams.ts';
import type { PendingErasure } from '../store/nats/erasures.ts';

/**
 * Deleting a project in cluster mode (the single node's LmdbBackend.eraseProject, on a shared stream). The catalog
 * delete (Engine) makes the project gone for every request on every node at once; its KvCatalog records a pending
 * erasure first (`erase.<id>`), so a node dying at any later point leaves work another node finishes. Then, each step
 * idempotent:
 *
 * 1. An **erase marker** into the project's partition (a message without records, `Analytics-Control: erase`). Every
 *    node folding the partition (owner, standby, ANALYTICS_FOLD=all) folds it in log order with core `dropProject`:
 *    its days, rings, counts and remembered eventIds go at that sequence, the same on every node, on every replay.
 * 2. A **scan** of the partition: every message of the project is **deleted** from the stream by sequence (the
 *    servers overwrite its bytes). A batch acknowledged for it after the marker (a request authenticated just before
 *    the delete) gets a further marker after it, and is deleted too.
 * 3. The partition's **erase floor** rises to the newest marker (`erasefloor.<n>`): snapshots below it may hold the
 *    project, so every node drops its local copies below it and never loads or stores one again. The lease holder
 *    writes a fresh snapshot when it folds the marker; snapshot objects below the floor are deleted once it is there
 *    (or after ERASE_SNAPSHOT_WAIT_MS: a node that then starts the partition replays it without a snapshot).
 * 4. Its **usage** entries (quota) and its **sealed rows** (days and month rollups) are deleted, then the pending
 *    record. Every node folding the partition also deletes the sealed rows when it folds the marker, after its sealer
 *    is idle, so a day being sealed at that moment leaves nothing behind.
 *
 * A pending erasure is finished by any node on startup, and on a timer by a node that saw its record unchanged for
 * ERASE_STALE_MS (its node died; a live one touches the record as it goes). Two nodes working on one at once only
 * repeat work: markers are published under one msg-id per erasure and late batch, deleting a deleted message is a
 * no-op, floors only rise.
 */

/** The timer looks at pending erasures this often (another node's that died midway, or one of ours that failed). */
export const ERASE_CHECK_MS = 10_000;
/** A pending erasure whose record has not changed for this long, on this node's clock, is finished here: its node died. */
export const ERASE_STALE_MS = 30_000;
/** How long an erasure waits for the partition's lease holder to store a snapshot past the marker before deleting older ones anyway. */
export const ERASE_SNAPSHOT_WAIT_MS = 5_000;
/** Stream messages deleted at once: each delete is a replicated write (~1 ms); a few in flight hide the round trips. */
const DELETE_CONCURRENCY = 32;
/** Record progress (and show other nodes this erasure is alive) after this many deleted messages. */
const PROGRESS_EVERY = 2_000;
/**
 * Rounds of "a batch of the project landed after the marker: another marker after it". Ingest refuses the project
 * from the catalog delete on, so only requests admitted just before it can land late; more rounds mean something
 * keeps writing it, and the erasure fails (and is finished later) rather than loop.
 */
const MAX_LATE_ROUNDS = 5;
/** Poll interval while waiting for the fresh snapshot. */
const SNAPSHOT_POLL_MS = 100;

export interface ErasureParts {
  partitionOf(projectId: string): number;
  log: {
    appendEraseMarker(partition: number, projectId: string, markerId: string): Promise<Appended>;
    read(partition: number, afterSeq: number): AsyncIterable<LogEntry[]>;
    deleteMessages(seqs: readonly number[]): Promise<number>;
  };
  pending: {
    begin(projectId: string): Promise<void>;
    get(projectId: string): Promise<{ value: PendingErasure; revision: number } | undefined>;
    put(rec: PendingErasure): Promise<void>;
    remove(projectId: string): Promise<void>;
    pending(): Promise<Array<{ value: PendingErasure; revision: number }>>;
    raiseFloor(partition: number, seq: number): Promise<void>;
  };
  snapshots: {
    setFloor(partition: number, seq: number): void;
    objectSeqs(partition: number): Promise<number[]>;
    removeObjectsBelow(partition: number, seq: number): Promise<number>;
  };
  usage: { removeProject(projectId: string): Promise<number> };
  /** the sealed-rows bucket (and this node's copy of it) */
  sealed: { eraseProject(projectId: string): Promise<number> };
}

export interface ErasureReport {
  markerSeq: number;
  messages: number;
  snapshotObjects: number;
  usageKeys: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Tests: an object the test holds (and may change while the node runs) that ClusterErasure asks at its turns. */
export interface ErasureHooks {
  /** runs after the pending record exists and before anything is erased (a test crashes the node here) */
  beforeWork?: ((projectId: string) => Promise<void>) | undefined;
  /** ERASE_STALE_MS, shortened */
  staleMs?: number | undefined;
}

export class ClusterErasure {
  /** erasures running on this node (one at a time per project); `again`: run once more when it ends */
  private readonly running = new Map<string, { done: Promise<ErasureReport>; again: boolean }>();
  /** pending records of other nodes: revision seen and since when (monotonic), to tell a dead node's from a live one's */
  private readonly seen = new Map<string, { revision: number; since: number }>();
  private checking = false;

  constructor(
    private readonly parts: ErasureParts,
    private readonly log: (line: string) => void,
    private readonly hooks: ErasureHooks = {},
  ) {}

  /** Erases a project whose catalog entry is gone (or going): resolves when everything of it is erased. */
  erase(projectId: string): Promise<ErasureReport> {
    const cur = this.running.get(projectId);
    if (cur) {
      // a batch of it landed while this erasure runs (commit saw the project gone): make sure a pass follows it
      cur.again = true;
      return cur.done;
    }
    const entry = { done: undefined as unknown as Promise<ErasureReport>, again: false };
    entry.done = (async () => {
      let report = await this.run(projectId);
      while (entry.again) {
        entry.again = false;
        await this.parts.pending.begin(projectId);
        report = await this.run(projectId);
      }
      return report;
    })().finally(() => this.running.delete(projectId));
    this.running.set(projectId, entry);
    return entry.done;
  }

  /**
   * Finishes pending erasures: every one (`all`, at startup: nobody else may be alive), or those whose record has not
   * changed for ERASE_STALE_MS (timer). Failures are logged; the record stays for the next round.
   */
  async finishPending(all: boolean): Promise<void> {
    if (this.checking) return;
    this.checking = true;
    try {
      const now = performance.now();
      const list = await this.parts.pending.pending();
      const present = new Set(list.map((p) => p.value.projectId));
      for (const id of this.seen.keys()) if (!present.has(id)) this.seen.delete(id);
      for (const { value, revision } of list) {
        const id = value.projectId;
        if (this.running.has(id)) continue;
        const s = this.seen.get(id);
        if (!s || s.revision !== revision) this.seen.set(id, { revision, since: now });
        if (!all && (!s || s.revision !== revision || now - s.since < (this.hooks.staleMs ?? ERASE_STALE_MS))) continue;
        this.log(`project ${id}: finishing an interrupted erasure`);
        await this.erase(id).catch((err: unknown) => this.log(`project ${id}: erasure failed (retried in ${ERASE_CHECK_MS} ms): ${err instanceof Error ? err.message : String(err)}`));
      }
    } finally {
      this.checking = false;
    }
  }

  private async run(projectId: string): Promise<ErasureReport> {
    const { log, pending, snapshots, usage } = this.parts;
    let cur = await pending.get(projectId);
    if (!cur) {
      await pending.begin(projectId); // called without the catalog's record (it was finished meanwhile: a cheap repeat)
      cur = await pending.get(projectId);
      if (!cur) throw new Error(`project ${projectId}: its pending erasure could not be recorded`);
    }
    await this.hooks.beforeWork?.(projectId);
    let rec = cur.value;
    const n = this.parts.partitionOf(projectId);
    const started = performance.now();
    if (rec.markerSeq === undefined) {
      const m = await log.appendEraseMarker(n, projectId, `x:${rec.token}:0`);
      rec = { ...rec, markerSeq: m.seq };
      await pending.put(rec);
    }
    this.log(`project ${projectId}: erasing; erase marker at sequence ${rec.markerSeq} of partition ${n}`);

    // Every message of the project in the partition; one that landed after the newest marker gets a marker after it.
    const doomed: number[] = [];
    let scanned = 0;
    for (let round = 0; ; round++) {
      let late = 0;
      for await (const chunk of log.read(n, scanned)) {
        for (const e of chunk) {
          scanned = e.seq;
          if (e.records.length > 0 && e.records.some((r) => (r.t === 'e' || r.t === 'b') && r.p === projectId)) {
            doomed.push(e.seq);
            if (e.seq > rec.markerSeq!) late = Math.max(late, e.seq);
          }
        }
      }
      if (late === 0) break;
      if (round >= MAX_LATE_ROUNDS) throw new Error(`project ${projectId}: its batches keep arriving after ${round + 1} erase markers`);
      const m = await log.appendEraseMarker(n, projectId, `x:${rec.token}:${late}`);
      rec = { ...rec, markerSeq: m.seq };
      await pending.put(rec);
      this.log(`project ${projectId}: a batch of it landed at ${late}, after the marker: another marker at ${m.seq}`);
    }
    const markerSeq = rec.markerSeq!;
    const scanMs = Math.round(performance.now() - started);

    let removed = 0;
    for (let i = 0; i < doomed.length; i += DELETE_CONCURRENCY) {
      const part = doomed.slice(i, i + DELETE_CONCURRENCY);
      removed += (await Promise.all(part.map((seq) => log.deleteMessages([seq])))).reduce((a, b) => a + b, 0);
      const done = i + part.length;
      if (Math.floor(done / PROGRESS_EVERY) > Math.floor(i / PROGRESS_EVERY)) {
        rec = { ...rec, progress: done };
        await pending.put(rec);
        this.log(`project ${projectId}: ${done} of ${doomed.length} stream messages erased`);
      }
    }

    const deleteMs = Math.round(performance.now() - started) - scanMs;

    // Snapshots below the marker may hold it: the floor keeps every node from loading or storing one again.
    await pending.raiseFloor(n, markerSeq);
    snapshots.setFloor(n, markerSeq);
    const waitUntil = performance.now() + ERASE_SNAPSHOT_WAIT_MS;
    while (((await snapshots.objectSeqs(n))[0] ?? 0) < markerSeq && performance.now() < waitUntil) await sleep(SNAPSHOT_POLL_MS);
    const objects = await snapshots.removeObjectsBelow(n, markerSeq);
    const usageKeys = await usage.removeProject(projectId);
    // Its sealed days and month rollups (each node folding the partition also removes them once its sealer is idle,
    // so a seal in flight at the marker cannot leave a row behind).
    const sealedRows = await this.parts.sealed.eraseProject(projectId);
    await pending.remove(projectId);
    this.log(
      `project ${projectId} erased in ${Math.round(performance.now() - started)} ms (marker and partition scan ${scanMs} ms, deletes ${deleteMs} ms): ${doomed.length} stream messages (${removed} removed now), ${objects} older snapshot objects, ${usageKeys} usage entries, ${sealedRows} sealed rows; partition ${n}'s erase floor is ${markerSeq}`,
    );
    return { markerSeq, messages: doomed.length, snapshotObjects: objects, usageKeys };
  }
}
