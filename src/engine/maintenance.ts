import { existsSync } from 'node:fs';
import path from 'node:path';
import type { DayAggregate } from '../core/day-aggregate.ts';
import type { DayFigures } from '../core/day-view.ts';
import { rollupMonth, type SealedDay, type SealedMonth } from '../core/sealed-day.ts';
import { monthEnd } from '../core/sealed-source.ts';
import { fromSnapshot, toSnapshot } from '../core/snapshot.ts';
import { AnalyticsState, apply, collectSealable, sealAt } from '../core/state.ts';
import type { StoredEvent } from '../core/types.ts';
import { ColumnStore } from '../store/lmdb/column-store.ts';
import { LogDamage, LogStore } from '../store/lmdb/log-store.ts';
import { ColumnProjection } from './column-projection.ts';
import { assertEnvironmentSound, assertWritable, walkEnvironment } from '../store/lmdb/lmdb-probe.ts';
import { SnapshotFiles } from '../store/files/snapshot-files.ts';
import { exportEvents } from './history-export.ts';
import { Sealer } from './sealer.ts';

/**
 * Work on a data directory without the service: `rebuild` (fold the whole log again and write a fresh snapshot),
 * `check` (log continuity, snapshot checksums, snapshot agrees with the log) and raw event export. The CLI calls
 * these; they use the same reducer and stores as the service, so nothing here re-implements a rule.
 */

/** Problems listed by check before the rest are only counted: one broken range must not flood the terminal. */
const MAX_LISTED_GAPS = 20;
/** Records folded between progress reports and sealing passes: bounds the live days a rebuild holds at once. */
const FOLD_SLICE = 10_000;

export type OnProgress = (done: number, total: number, phase: string) => void;

function openStore(dataDir: string, readOnly: boolean): LogStore {
  if (!existsSync(path.join(dataDir, 'analytics.lmdb'))) throw new Error(`${dataDir} holds no analytics data (no analytics.lmdb)`);
  if (!readOnly) {
    assertWritable(dataDir);
    assertEnvironmentSound(dataDir); // check walks it itself and lists the damage as a problem
  }
  return LogStore.open(dataDir, 'flush', { readOnly });
}

/**
 * Folds the log from its first record; events of projects no longer in the catalog are skipped (as the service drops
 * them). With `sealer`, days whose window has closed are sealed as the fold goes (as the service does), so the heap
 * holds only live days; without, every day stays in the returned state.
 */
async function foldLog(store: LogStore, upTo: number, onProgress: OnProgress, phase: string, sealer?: Sealer): Promise<AnalyticsState> {
  const known = new Set(store.listProjects().map((p) => p.id));
  const state = sealer?.state ?? new AnalyticsState();
  let n = 0;
  for (const { seq, record } of store.readAfter(0)) {
    if (seq > upTo) break;
    if (record.t === 'x' || known.has(record.p)) apply(state, seq, record);
    else state.lastSeq = seq;
    if (++n % FOLD_SLICE === 0) {
      onProgress(n, upTo, phase);
      if (sealer) {
        sealer.kick();
        await sealer.idle();
      }
    }
  }
  if (sealer) {
    collectSealable(state);
    sealer.kick();
    await sealer.idle();
  }
  onProgress(n, upTo, phase);
  return state;
}

export interface RebuildResult {
  records: number;
  projects: number;
  snapshot: string;
  sealedDays: number;
  /** events in the rebuilt column store */
  columnEvents: number;
  ms: number;
}

/**
 * Re-folds every aggregate from the log into sealed and live state: sealed days and month rollups are written again
 * (segments older than the log's first record, which retention removed, are kept and their months rolled up again),
 * and a fresh snapshot of the live state replaces every old one. Service stopped.
 */
export async function rebuild(dataDir: string, onProgress: OnProgress = () => {}): Promise<RebuildResult> {
  const started = performance.now();
  const store = openStore(dataDir, false);
  const files = new SnapshotFiles(dataDir);
  try {
    const last = store.lastSeq();
    const sealed = store.openSealedStore();
    await sealed.clearFrom(store.logStart());
    const failures: string[] = [];
    const sealer = new Sealer(new AnalyticsState(), sealed, (line) => failures.push(line));
    const state = await foldLog(store, last, onProgress, 'fold', sealer);
    if (failures.length > 0) throw new Error(failures[0]);
    // Months whose days are all older than the log (kept above) get their rollup back.
    const months = new Map<string, { projectId: string; month: string }>();
    let sealedDays = 0;
    for (const d of sealed.allDays()) {
      sealedDays++;
      const month = d.date.slice(0, 7);
      if (sealAt(monthEnd(month)) <= state.maxRt && !sealed.hasMonth(d.projectId, month)) months.set(`${d.projectId}\u0000${month}`, { projectId: d.projectId, month });
    }
    for (const { projectId, month } of months.values()) {
      await sealed.write({ days: [], months: [{ projectId, month: rollupMonth(month, sealed.readDays(projectId, `${month}-01`, monthEnd(month))) }] });
    }
    const { file } = await files.write(toSnapshot(state), { replaceAll: true });
    const columnEvents = await rebuildColumns(dataDir, store, onProgress);
    return { records: last, projects: state.projects.size, snapshot: file, sealedDays, columnEvents, ms: Math.round(performance.now() - started) };
  } finally {
    await files.close();
    await store.close();
  }
}

/**
 * The column store again from the log: segments that start at or after the log's first record go, the log is folded
 * into new ones (events of projects no longer in the catalog are skipped, as the service erased them).
 */
async function rebuildColumns(dataDir: string, store: LogStore, onProgress: OnProgress): Promise<number> {
  const columns = ColumnStore.open(dataDir);
  const projection = new ColumnProjection(columns, () => {});
  try {
    await columns.clearFrom(store.logStart());
    const known = new Set(store.listProjects().map((p) => p.id));
    const last = store.lastSeq();
    let n = 0;
    const records = (function* () {
      for (const r of store.readAfter(0)) {
        if (++n % FOLD_SLICE === 0) onProgress(n, last, 'columns');
        if (r.record.t === 'x' || known.has(r.record.p)) yield r;
      }
    })();
    await projection.replay(records);
    await projection.flush();
    onProgress(n, last, 'columns');
    return columns.size().events;
  } finally {
    await projection.close();
  }
}

export interface CheckResult {
  ok: boolean;
  problems: string[];
  logEntries: number;
  snapshots: number;
  sealedDays: number;
  sealedMonths: number;
  /** column segments verified (checksum, header, dictionaries) */
  columnSegments: number;
}

/**
 * Verifies log continuity, every snapshot's checksum, that every sealed day decodes and every month rollup equals
 * the merge of its days, and that the newest snapshot's live days plus the sealed days equal a fold of the log.
 */
export async function check(dataDir: string, onProgress: OnProgress = () => {}): Promise<CheckResult> {
  const problems: string[] = [];
  if (!existsSync(path.join(dataDir, 'analytics.lmdb'))) throw new Error(`${dataDir} holds no analytics data (no analytics.lmdb)`);
  // 0. LMDB's own pages, walked in a child process (damage there crashes whoever reads it): nothing else is read then
  const walked = walkEnvironment(path.join(dataDir, 'analytics.lmdb'));
  if (!walked.ok) return { ok: false, problems: [`lmdb: ${path.join(dataDir, 'analytics.lmdb')} is damaged: ${walked.problem}`], logEntries: 0, snapshots: 0, sealedDays: 0, sealedMonths: 0, columnSegments: 0 };
  const store = openStore(dataDir, true);
  try {
    const last = store.lastSeq();
    const logStart = store.logStart();
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

    // 3. sealed history: every day decodes and belongs to a project; every month rollup is the merge of its days
    const known = new Set(store.listProjects().map((p) => p.id));
    const sealed = store.openSealedStore();
    const segments = new Map<string, SealedDay[]>(); // "project date" -> its segments
    let sealedDays = 0;
    let sealedBad = 0;
    for (const d of sealed.allDays()) {
      sealedDays++;
      const where = `sealed day ${d.projectId} ${d.date} (from ${d.firstSeq})`;
      if (!d.day) {
        if (++sealedBad <= MAX_LISTED_GAPS) problems.push(`${where}: cannot be read (${d.problem})`);
        continue;
      }
      if (!known.has(d.projectId) && ++sealedBad <= MAX_LISTED_GAPS) problems.push(`${where}: its project is not in the catalog`);
      const k = `${d.projectId} ${d.date}`;
      segments.set(k, [...(segments.get(k) ?? []), d.day]);
    }
    let sealedMonths = 0;
    for (const m of sealed.allMonths()) {
      sealedMonths++;
      const where = `month rollup ${m.projectId} ${m.month}`;
      if (!m.rollup) {
        if (++sealedBad <= MAX_LISTED_GAPS) problems.push(`${where}: cannot be read (${m.problem})`);
        continue;
      }
      const days = sealed.readDays(m.projectId, `${m.month}-01`, monthEnd(m.month));
      if (monthKey(m.rollup) !== monthKey(rollupMonth(m.month, days)) && ++sealedBad <= MAX_LISTED_GAPS) {
        problems.push(`${where}: differs from the merge of its ${days.length} sealed day(s)`);
      }
    }
    if (sealedBad > MAX_LISTED_GAPS) problems.push(`sealed: ${sealedBad - MAX_LISTED_GAPS} more problems`);

    // 4. the newest good snapshot's live days plus the sealed days must equal the log folded up to its sequence
    // (a damaged log cannot be folded)
    const newest = snaps.filter((s) => s.data && s.seq <= last).at(-1);
    if (newest?.data && !damaged) {
      let restored: AnalyticsState | undefined;
      try {
        restored = fromSnapshot(newest.data);
      } catch (err) {
        problems.push(`snapshot ${path.basename(newest.file)}: cannot be restored (${err instanceof Error ? err.message : String(err)})`);
      }
      if (restored) {
        const folded = await foldLog(store, newest.seq, onProgress, 'fold');
        problems.push(...compareWithLog(restored, folded, segments, newest.seq, logStart).map((p) => `snapshot ${path.basename(newest.file)}: ${p}`));
      }
    }
    // 5. column segments: each one's checksum and header, its dictionaries decode, its project is known
    let columnSegments = 0;
    if (ColumnStore.exists(dataDir)) {
      const columns = ColumnStore.open(dataDir, { readOnly: true });
      try {
        let bad = 0;
        for (const s of columns.verifyAll()) {
          columnSegments++;
          const where = `column segment ${s.projectId} ${s.day} #${s.segNo}`;
          const problem = s.problem ?? (known.has(s.projectId) ? undefined : 'its project is not in the catalog');
          if (problem && ++bad <= MAX_LISTED_GAPS) problems.push(`${where}: ${problem}`);
        }
        if (bad > MAX_LISTED_GAPS) problems.push(`columns: ${bad - MAX_LISTED_GAPS} more problems`);
      } finally {
        await columns.close();
      }
    }
    return { ok: problems.length === 0, problems, logEntries: entries, snapshots: snaps.length, sealedDays, sealedMonths, columnSegments };
  } finally {
    await store.close();
  }
}

type Pairs = Array<[string, number]>;
const sortPairs = (p: Pairs) => [...p].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));

/** A month rollup in a canonical form (pairs and hashes sorted), to compare two of them. */
function monthKey(m: SealedMonth): string {
  const names = Object.keys(m.breakdowns).sort();
  return JSON.stringify([
    m.daily,
    names.map((n) => [n, sortPairs(m.breakdowns[n]!)]),
    m.userHashes ? [...m.userHashes].sort((a, b) => a - b) : null,
    m.sketch ? Buffer.from(m.sketch).toString('base64') : null,
  ]);
}

/** One day's figures and breakdowns summed over its parts (users only when there is a single part: segments overlap). */
function dayKey(parts: Array<{ figures: DayFigures; breakdowns: Record<string, Pairs> }>, withUsers = parts.length === 1): string {
  const sums = new Map<string, Map<string, number>>();
  const f = { sessions: 0, pageviews: 0, bounces: 0, sessionsWithPageview: 0, bots: 0, users: withUsers ? parts[0]!.figures.users : -1 };
  for (const p of parts) {
    f.sessions += p.figures.sessions;
    f.pageviews += p.figures.pageviews;
    f.bounces += p.figures.bounces;
    f.sessionsWithPageview += p.figures.sessionsWithPageview;
    f.bots += p.figures.bots;
    for (const [name, pairs] of Object.entries(p.breakdowns)) {
      let m = sums.get(name);
      if (!m) sums.set(name, (m = new Map()));
      for (const [k, v] of pairs) m.set(k, (m.get(k) ?? 0) + v);
    }
  }
  const names = [...sums.keys()].filter((n) => sums.get(n)!.size > 0).sort();
  return JSON.stringify([f, names.map((n) => [n, sortPairs([...sums.get(n)!])])]);
}

function liveDay(d: DayAggregate): { figures: DayFigures; breakdowns: Record<string, Pairs> } {
  const breakdowns: Record<string, Pairs> = {};
  for (const [name, c] of d.breakdowns()) breakdowns[name] = [...c.counts];
  return { figures: d.figures()[0]!, breakdowns };
}

/**
 * Each (project, date) of the log's fold against what the service holds for it: its live day in the snapshot plus its
 * sealed segments (a segment whose live instance is in the snapshot counts once, as reads do). Dates with a segment
 * older than the log's first record (retention) cannot be compared and are skipped.
 */
function compareWithLog(restored: AnalyticsState, folded: AnalyticsState, segments: Map<string, SealedDay[]>, upTo: number, logStart: number): string[] {
  const out: string[] = [];
  const seen = new Set<string>();
  for (const [id, p] of folded.projects) {
    for (const [date, d] of p.days) {
      const k = `${id} ${date}`;
      seen.add(k);
      const segs = segments.get(k) ?? [];
      if (segs.some((s) => s.firstSeq < logStart)) continue;
      const live = restored.projects.get(id)?.days.get(date);
      const parts = segs.filter((s) => s.firstSeq <= upTo && s.firstSeq !== live?.firstSeq).map((s) => ({ figures: s.figures, breakdowns: s.breakdowns }));
      if (live) parts.push(liveDay(live));
      if (parts.length === 0) out.push(`day ${k} is missing (neither live nor sealed), but is in the log`);
      else if (dayKey(parts) !== dayKey([liveDay(d)], parts.length === 1)) out.push(`day ${k} differs from the log`);
    }
  }
  for (const [id, p] of restored.projects) for (const date of p.days.keys()) if (!seen.has(`${id} ${date}`)) out.push(`day ${id} ${date} is not in the log`);
  if (logStart <= 1) {
    for (const [k, segs] of segments) if (!seen.has(k) && segs.some((s) => s.lastSeq <= upTo)) out.push(`sealed day ${k} is not in the log`);
  }
  return out.slice(0, MAX_LISTED_GAPS);
}

/** Stored events of one project whose day lies in [from, to], in time order (export --raw --data-dir). */
export async function* rawEvents(dataDir: string, projectId: string, from: string, to: string, onProgress: OnProgress = () => {}): AsyncGenerator<StoredEvent> {
  const store = openStore(dataDir, true);
  try {
    if (!store.getProject(projectId)) throw new Error(`no project "${projectId}" in ${dataDir}`);
    // The reader of GET /projects/{id}/export: time order, bounded chunks.
    for await (const chunk of exportEvents(store, projectId, from, to, (done, total) => onProgress(done, total, 'export'))) yield* chunk;
  } finally {
    await store.close();
  }
}
