import { existsSync } from 'node:fs';
import path from 'node:path';
import { fromSnapshot, toSnapshot, type DaySnapshot, type SnapshotData } from '../core/snapshot.ts';
import { AnalyticsState, apply } from '../core/state.ts';
import type { StoredEvent } from '../core/types.ts';
import { LogDamage, LogStore } from '../store/log-store.ts';
import { SnapshotFiles } from '../store/snapshot-files.ts';

/**
 * Work on a data directory without the service: `rebuild` (fold the whole log again and write a fresh snapshot),
 * `check` (log continuity, snapshot checksums, snapshot agrees with the log) and raw event export. The CLI calls
 * these; they use the same reducer and stores as the service, so nothing here re-implements a rule.
 */

/** Problems listed by check before the rest are only counted: one broken range must not flood the terminal. */
const MAX_LISTED_GAPS = 20;

export type OnProgress = (done: number, total: number, phase: string) => void;

function openStore(dataDir: string, readOnly: boolean): LogStore {
  if (!existsSync(path.join(dataDir, 'analytics.lmdb'))) throw new Error(`${dataDir} holds no analytics data (no analytics.lmdb)`);
  return LogStore.open(dataDir, 'flush', { readOnly });
}

/** Folds the log from the start; events of projects no longer in the catalog are skipped (as the service drops them). */
function foldLog(store: LogStore, upTo: number, onProgress: OnProgress, phase: string): AnalyticsState {
  const known = new Set(store.listProjects().map((p) => p.id));
  const state = new AnalyticsState();
  let n = 0;
  for (const { seq, record } of store.readAfter(0)) {
    if (seq > upTo) break;
    if (record.t === 'x' || known.has(record.p)) apply(state, seq, record);
    else state.lastSeq = seq;
    if (++n % 10_000 === 0) onProgress(n, upTo, phase);
  }
  onProgress(n, upTo, phase);
  return state;
}

export interface RebuildResult {
  records: number;
  projects: number;
  snapshot: string;
  ms: number;
}

/** Re-folds every aggregate from the log and writes a fresh snapshot that replaces the old ones. Service stopped. */
export async function rebuild(dataDir: string, onProgress: OnProgress = () => {}): Promise<RebuildResult> {
  const started = performance.now();
  const store = openStore(dataDir, false);
  try {
    const last = store.lastSeq();
    const state = foldLog(store, last, onProgress, 'fold');
    const { file } = await new SnapshotFiles(dataDir).write(toSnapshot(state), { replaceAll: true });
    return { records: last, projects: state.projects.size, snapshot: file, ms: Math.round(performance.now() - started) };
  } finally {
    await store.close();
  }
}

export interface CheckResult {
  ok: boolean;
  problems: string[];
  logEntries: number;
  snapshots: number;
}

/** Verifies log continuity, every snapshot's checksum, and that the newest snapshot equals a fold of the log. */
export async function check(dataDir: string, onProgress: OnProgress = () => {}): Promise<CheckResult> {
  const problems: string[] = [];
  const store = openStore(dataDir, true);
  try {
    const last = store.lastSeq();
    // 1. the log, through the reader startup uses: every entry's checksum, each entry starting where the previous
    // one ended, and every record a known kind. The first damage ends the walk: nothing after it can be trusted.
    let entries = 0;
    let bad = 0;
    let damaged = false;
    try {
      for (const { seq, record } of store.readAfter(0)) {
        const ok = record.t === 'x' || ((record.t === 'e' || record.t === 'b') && typeof record.p === 'string' && typeof record.day === 'string');
        if (!ok && ++bad <= MAX_LISTED_GAPS) problems.push(`log: entry ${seq} is not an event, bot hit or erased marker`);
        if (++entries % 50_000 === 0) onProgress(entries, last, 'log');
      }
    } catch (err) {
      if (!(err instanceof LogDamage)) throw err;
      damaged = true;
      problems.push(`log: ${err.message}`);
    }
    if (bad > MAX_LISTED_GAPS) problems.push(`log: ${bad - MAX_LISTED_GAPS} more records of no known kind`);
    onProgress(last, last, 'log');

    // 2. snapshots: checksums, and none ahead of the log
    const snaps = new SnapshotFiles(dataDir, { inspectOnly: true }).inspect();
    for (const s of snaps) {
      if (s.problem) problems.push(`snapshot ${path.basename(s.file)}: ${s.problem}`);
      else if (s.seq > last) problems.push(`snapshot ${path.basename(s.file)}: covers sequence ${s.seq}, beyond the log's last ${last}`);
    }

    // 3. the newest good snapshot must equal the log folded up to its sequence (a damaged log cannot be folded)
    const newest = snaps.filter((s) => s.data && s.seq <= last).at(-1);
    if (newest?.data && !damaged) {
      const folded = toSnapshot(foldLog(store, newest.seq, onProgress, 'fold'));
      problems.push(...compareSnapshots(newest.data, folded).map((p) => `snapshot ${path.basename(newest.file)}: ${p}`));
      try {
        fromSnapshot(newest.data);
      } catch (err) {
        problems.push(`snapshot ${path.basename(newest.file)}: cannot be restored (${err instanceof Error ? err.message : String(err)})`);
      }
    }
    return { ok: problems.length === 0, problems, logEntries: entries, snapshots: snaps.length };
  } finally {
    await store.close();
  }
}

function dayFigures(d: DaySnapshot): string {
  const pairs = (p: [string, number][]) => JSON.stringify([...p].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  return JSON.stringify([
    d.pageviews,
    d.bounces,
    d.sessionsWithPageview,
    d.sessionKeys.length,
    d.users.length,
    pairs(d.sources),
    pairs(d.countries),
    pairs(d.devices),
    pairs(d.pages),
    pairs(d.events),
  ]);
}

/** Day aggregates of a stored snapshot against the log's fold; the names of what differs. */
function compareSnapshots(stored: SnapshotData, folded: SnapshotData): string[] {
  const out: string[] = [];
  const index = (s: SnapshotData) => new Map(s.projects.flatMap((p) => p.days.map((d) => [`${p.id} ${d.day}`, dayFigures(d)] as const)));
  const a = index(stored);
  const b = index(folded);
  for (const [k, v] of b) if (a.get(k) !== v) out.push(`day ${k} ${a.has(k) ? 'differs from' : 'is missing, but is in'} the log`);
  for (const k of a.keys()) if (!b.has(k)) out.push(`day ${k} is not in the log`);
  return out.slice(0, MAX_LISTED_GAPS);
}

/** Stored events of one project whose day lies in [from, to], in log order (export --raw). */
export async function* rawEvents(dataDir: string, projectId: string, from: string, to: string, onProgress: OnProgress = () => {}): AsyncGenerator<StoredEvent> {
  const store = openStore(dataDir, true);
  try {
    if (!store.getProject(projectId)) throw new Error(`no project "${projectId}" in ${dataDir}`);
    const last = store.lastSeq();
    let n = 0;
    for (const { record } of store.readAfter(0)) {
      if (++n % 10_000 === 0) onProgress(n, last, 'scan');
      if (record.t === 'e' && record.p === projectId && record.day >= from && record.day <= to) yield record;
    }
    onProgress(last, last, 'scan');
  } finally {
    await store.close();
  }
}
