import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fromSnapshot, toSnapshot } from '../src/core/snapshot.ts';
import { AnalyticsState, apply, dropSealed, takeSealQueue } from '../src/core/state.ts';
import { SnapshotFiles } from '../src/store/files/snapshot-files.ts';
import { traffic } from './growth/traffic.ts';

/**
 * `node --expose-gc --import tsx bench/live-state.ts [--projects=10000] [--events=1100000] [--days=40]`: what the
 * live state of many projects costs, in minutes instead of the quarter hour of `--growth --scale=0.1`. Folds Zipf
 * traffic through the real reducer (sealed days are dropped as soon as they are handed over: the sealed store is not
 * what is measured), then reports heap and typed-array bytes per live day and per ring entry (by dropping rings, then
 * days, with a full GC between), the snapshot the real writer makes of it, the restore (check + restore asleep) time,
 * the heap of the restored state while asleep, and the same per-part figures once every day and ring is woken.
 * The defaults are (b) of `--growth --scale=0.1` for its last 40 days: 10M events over 365 days is ~27k a day.
 */

const arg = (name: string, dflt: number) => {
  const a = process.argv.find((x) => x.startsWith(`--${name}=`));
  return a === undefined ? dflt : Number(a.slice(name.length + 3));
};
const projects = arg('projects', 10_000);
const events = arg('events', 1_100_000);
const days = arg('days', 40);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc');

function used(): number {
  gc!();
  gc!();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
const lastDay = new Date().toISOString().slice(0, 10);
const ids = Array.from({ length: projects }, (_, i) => `p_g${i.toString().padStart(6, '0')}`);

const base = used();
let state = new AnalyticsState();
let seq = 0;
const t0 = performance.now();
for (const e of traffic({ events, days, lastDay }, ids)) {
  apply(state, ++seq, e);
  if (state.sealQueue.length > 0) for (const r of takeSealQueue(state)) dropSealed(state, r.projectId, r.day, r.day.lastSeq);
}
const foldS = (performance.now() - t0) / 1000;

function census(s: AnalyticsState) {
  let liveDays = 0;
  let sessions = 0;
  let ringEntries = 0;
  for (const p of s.projects.values()) {
    liveDays += p.days.size;
    for (const d of p.days.values()) sessions += d.sessions.size;
    ringEntries += [...p.recent.newestFirst()].length;
  }
  return { liveDays, sessions, ringEntries };
}

/** Destructive: drops the rings, then the days; what each full GC gives back is what they held. */
function parts(s: AnalyticsState) {
  const all = used() - base;
  const c = census(s);
  for (const p of s.projects.values()) (p as { recent: unknown }).recent = null;
  const noRings = used() - base;
  for (const p of s.projects.values()) p.days.clear();
  const noDays = used() - base;
  for (const p of s.projects.values()) (p as { realtime: unknown }).realtime = null;
  const noRealtime = used() - base;
  s.projects.clear();
  const noProjects = used() - base;
  const ringBytes = all - noRings;
  const dayBytes = noRings - noDays;
  return {
    ...c,
    totalMiB: +(all / 2 ** 20).toFixed(1),
    ringsMiB: +(ringBytes / 2 ** 20).toFixed(1),
    daysMiB: +(dayBytes / 2 ** 20).toFixed(1),
    restMiB: +(noDays / 2 ** 20).toFixed(1),
    bytesPerRingEntry: Math.round(ringBytes / Math.max(1, c.ringEntries)),
    bytesPerLiveDay: Math.round(dayBytes / Math.max(1, c.liveDays)),
    realtimeMiB: +((noDays - noRealtime) / 2 ** 20).toFixed(1),
    projectsRestMiB: +((noRealtime - noProjects) / 2 ** 20).toFixed(1),
    notProjectsMiB: +(noProjects / 2 ** 20).toFixed(1),
    bytesPerProjectRest: Math.round(noDays / projects),
  };
}

const dir = mkdtempSync(path.join(tmpdir(), 'live-state-'));
try {
  const files = new SnapshotFiles(dir);
  let t = performance.now();
  let data = toSnapshot(state);
  const captureMs = performance.now() - t;
  t = performance.now();
  const { file } = await files.write(data);
  const writeMs = performance.now() - t;
  data = undefined as unknown as typeof data;
  await files.close();
  const snapshotBytes = statSync(file).size;
  const built = parts(state);
  state = undefined as unknown as AnalyticsState;
  used();
  let readMs = 0;
  let decodeMs = 0;
  const restore = () => {
    let t = performance.now();
    const loaded = new SnapshotFiles(dir).loadNewest(Number.MAX_SAFE_INTEGER, (f, why) => console.error(`skip ${f}: ${why}`))!;
    readMs = performance.now() - t;
    t = performance.now();
    const out = fromSnapshot(loaded);
    decodeMs = performance.now() - t;
    return out;
  };
  const restoredState = restore();
  // Restored days and rings sleep as their bytes until touched; parts() below touches (wakes) every one.
  const asleepMiB = +((used() - base) / 2 ** 20).toFixed(1);
  const rssMiB = Math.round(process.memoryUsage().rss / 2 ** 20);
  const restored = parts(restoredState);
  console.log(
    JSON.stringify(
      {
        projects,
        events,
        days,
        foldS: +foldS.toFixed(1),
        built,
        snapshot: { bytes: snapshotBytes, mib: mib(snapshotBytes), captureMs: Math.round(captureMs), writeMs: Math.round(writeMs) },
        restore: { readMs: Math.round(readMs), decodeMs: Math.round(decodeMs), asleepMiB },
        restored,
        rssAfterRestoreMiB: rssMiB,
      },
      null,
      1,
    ),
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
