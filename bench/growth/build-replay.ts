import path from 'node:path';
import { statSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { toSnapshot } from '../../src/core/snapshot.ts';
import { AnalyticsState, apply } from '../../src/core/state.ts';
import type { LogRecord } from '../../src/core/types.ts';
import { ColumnProjection } from '../../src/engine/column-projection.ts';
import { Sealer } from '../../src/engine/sealer.ts';
import { SnapshotFiles } from '../../src/store/files/snapshot-files.ts';
import { ColumnStore } from '../../src/store/lmdb/column-store.ts';
import { LogStore } from '../../src/store/lmdb/log-store.ts';
import { APPEND_BATCH, dirBytes, projectIds, putProjects, type BuildArgs, type BuildResult } from './build-common.ts';
import { traffic } from './traffic.ts';

/**
 * The growth build through the service's own per-batch path: N events over D days for P projects (Zipf traffic), in
 * receive-time order, appended to a real log and folded by the real reducer, with the real Sealer writing days as
 * their windows close (day by day, as a year of traffic would), then a snapshot of what is left live. Slow (~50k
 * events/s, ~1.4 ms per sealed day): the bulk build (build-bulk.ts) writes the same and is checked against this one
 * (test/growth-bulk-build.test.ts).
 */

/** Open column events before the build seals them (the service seals every minute; a bulk build in larger steps). */
export const COLUMN_FLUSH_EVENTS = 200_000;

export async function buildReplay(a: BuildArgs): Promise<BuildResult> {
  const started = performance.now();
  const store = LogStore.open(a.dir, 'commit');
  const ids = projectIds(a.projects);
  const { adminKey, secretKey } = await putProjects(store, a, ids);
  const state = new AnalyticsState();
  const sealer = new Sealer(state, store.openSealedStore(), (line) => process.stderr.write(`${line}\n`));
  const rememberedIds = store.openRememberedIds();
  // The column store is a projection of the same log: a service that ran all along has it folded up to the end, so
  // a start replays only what came after its last seal (the build writes it as the service would).
  const columns = new ColumnProjection(ColumnStore.open(a.dir), (line) => process.stderr.write(`${line}\n`));
  const every = a.appendBatch ?? APPEND_BATCH;
  let seq = store.lastSeq();
  let batch: LogRecord[] = [];
  let inFlight: Promise<number> = Promise.resolve(0);
  let sealedDays = 0;
  const flush = async () => {
    await inFlight;
    const appending = batch;
    inFlight = store.append(appending, () => rememberedIds.writeWith(appending));
    columns.fold(seq + 1, appending);
    for (const r of batch) apply(state, ++seq, r);
    if (columns.openCount() >= COLUMN_FLUSH_EVENTS) await columns.flush();
    sealedDays += state.sealQueue.length;
    sealer.kick();
    await sealer.idle();
    batch = [];
  };
  for (const e of traffic(a, ids)) {
    batch.push(e);
    if (batch.length === every) await flush();
  }
  if (batch.length > 0) await flush();
  await inFlight;
  await columns.flush();
  await columns.close();
  let liveDays = 0;
  for (const p of state.projects.values()) liveDays += p.days.size;
  // The service forgets eventIds older than 48 h every hour; a year of traffic would have had them expired.
  await store.openRememberedIds().expire(Date.now());
  const files = new SnapshotFiles(a.dir);
  const { file } = await files.write(toSnapshot(state));
  await files.close();
  await store.close();
  const dataBytes = dirBytes(a.dir);
  return {
    seconds: (performance.now() - started) / 1000,
    events: a.events,
    projects: a.projects,
    liveDays,
    sealedDays,
    logBytesPerEvent: statSync(path.join(a.dir, 'analytics.lmdb')).size / a.events,
    dataBytes,
    snapshotBytes: statSync(file).size,
    projectId: ids[0]!,
    secretKey,
    adminKey,
    mode: 'replay',
  };
}
