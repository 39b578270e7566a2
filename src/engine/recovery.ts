import { fromSnapshot } from '../core/snapshot.ts';
import { AnalyticsState, apply } from '../core/state.ts';
import type { LogRecord } from '../core/types.ts';
import { LogDamage, type LogStore } from '../store/lmdb/log-store.ts';
import type { SnapshotFiles } from '../store/files/snapshot-files.ts';

/** Print replay progress only when the tail is long enough for someone to wonder (~0.3 s of replay). */
const PROGRESS_THRESHOLD = 100_000;
/** One progress line per this many records. */
const PROGRESS_EVERY = 500_000;

/** Another projection of the log that catches up in the same pass: it takes every record after `after`. */
export interface ReplayConsumer {
  after: number;
  /** folds one record; a promise when the consumer must write before it takes more (its heap bound) */
  fold(seq: number, record: LogRecord): Promise<void> | undefined;
}

/**
 * Startup: the newest valid snapshot, then the log after it. A damaged snapshot is skipped for an older one or a
 * full replay; the log is the truth, so the result equals folding the whole log. Other projections (the column
 * store) catch up in the same single read of the log, each from its own marker, so the log is read and verified once.
 */
export async function recoverState(
  store: LogStore,
  files: SnapshotFiles,
  log: (line: string) => void,
  consumers: readonly ReplayConsumer[] = [],
): Promise<AnalyticsState> {
  const lastSeq = store.lastSeq();
  const snap = await files.loadNewestChecked(lastSeq, (file, why) => log(`snapshot ${file} skipped (an older one or the log is used instead): ${why}`));
  let state = new AnalyticsState();
  if (snap) {
    try {
      state = fromSnapshot(snap);
    } catch (err) {
      log(`snapshot unusable (${err instanceof Error ? err.message : String(err)}); replaying the whole log`);
      state = new AnalyticsState();
    }
  }
  const tail = lastSeq - state.lastSeq;
  const loud = tail >= PROGRESS_THRESHOLD;
  const started = performance.now();
  if (snap && state.lastSeq > 0) log(`restored snapshot at sequence ${state.lastSeq}`);
  if (loud) log(`replaying ${tail} log records after sequence ${state.lastSeq}...`);
  let n = 0;
  const from = Math.min(state.lastSeq, ...consumers.map((c) => c.after));
  try {
    for (const { seq, record } of store.readAfter(from)) {
      for (const c of consumers) {
        if (seq <= c.after) continue;
        const wait = c.fold(seq, record);
        if (wait) await wait;
      }
      if (seq <= state.lastSeq) continue;
      apply(state, seq, record);
      if (loud && ++n % PROGRESS_EVERY === 0) log(`  replayed ${n}/${tail} (${Math.round((n / tail) * 100)}%)`);
    }
  } catch (err) {
    if (err instanceof LogDamage) throw new RecoveryRefused(err);
    throw err;
  }
  if (loud) log(`replayed ${tail} records in ${Math.round(performance.now() - started)} ms`);
  return state;
}

/** Startup found the log damaged: the service refuses to start rather than serve a partial truth. */
export class RecoveryRefused extends Error {
  constructor(readonly damage: LogDamage) {
    super(
      `${damage.message}. Refusing to start: serving from here would silently lose acknowledged events.\n` +
        'Way out (either): 1. restore the newest backup (`analytics backup DEST` made it: copy DEST/analytics.lmdb and ' +
        'DEST/snapshots/ into the data directory) and start again: loses only what came after the backup. ' +
        `2. \`analytics repair --yes\` (explicit): keeps a copy of the damaged files aside, cuts the log at sequence ${damage.seq} ` +
        '(that record and every later one are lost, even those a snapshot had counted: the log is the truth) and ' +
        'rebuilds the aggregates and snapshot from what stays; then start again.',
    );
  }
}
