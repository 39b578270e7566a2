import { spawn } from 'node:child_process';
import path from 'node:path';
import { REPO_ROOT } from './lib/child.ts';
import type { Row } from './report.ts';

/**
 * Parts (e)–(g) of `npm run bench -- --growth`: the goals of the "memory and stalls that follow the data" issue,
 * measured from outside as a user runs the service (`node dist/main.js`, anonymous RSS from /proc, a ping loop in
 * another process). Each part is its own script, runnable alone at any size; here each runs in a child process and
 * its last line (JSON) is read back:
 * (e) `growth-tenants.ts`: many small sites with every day live, restarted;
 * (f) `live-ids.ts`: a month of live events that each carry an eventId, then a light load with snapshots every 2 s;
 * (g) `erase.ts`: a big tenant deleted while another one writes.
 */

export interface OutsideParams {
  e: { projects: number; events: number; days: number };
  f: { events: number; days: number; seconds: number; idleMs: number };
  g: { events: number; settleMs: number };
}

export const OUTSIDE_FULL: OutsideParams = {
  e: { projects: 5_000, events: 500_000, days: 30 },
  f: { events: 3_000_000, days: 30, seconds: 20, idleMs: 40_000 },
  g: { events: 10_000_000, settleMs: 20_000 },
};

export const OUTSIDE_QUICK: OutsideParams = {
  e: { projects: 300, events: 20_000, days: 30 },
  f: { events: 60_000, days: 30, seconds: 4, idleMs: 6_000 },
  g: { events: 30_000, settleMs: 3_000 },
};

export interface TenantsResult {
  outsideRestartMs: number;
  outsideAnonMiB: number;
}

export interface LiveIdsResult {
  fill: { seconds: number; eventsPerSecond: number };
  anonMiB: { afterFill: number; idle: number; underLoad: number; afterRestart: number };
  light: { rate: number; ok: number; p50: number; p99: number; max: number };
  health: { longestMs: number; over50: number; pings: number; ownLoopMs: number };
  restartMs: number;
}

export interface EraseResult {
  deleteStatus: number;
  deleteMs: number;
  keyStatus: number;
  erasedMs: number | null;
  markersLeft: number;
  writesP99Ms: number;
  writesMaxMs: number;
  writes: number;
  healthMaxMs: number;
}

export interface OutsideResults {
  e?: TenantsResult;
  f?: LiveIdsResult;
  g?: EraseResult;
}

/** Runs `bench/<script>` in its own process and returns its last stdout line, parsed. */
export async function runScript<T>(script: string, args: string[]): Promise<T> {
  const proc = spawn(process.execPath, ['--import', 'tsx', path.join(REPO_ROOT, 'bench', script), ...args], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stdout.on('data', (b: Buffer) => (out += b.toString()));
  proc.stderr.on('data', (b: Buffer) => (err = (err + b.toString()).slice(-4000)));
  const code = await new Promise<number | null>((resolve) => proc.once('exit', resolve));
  const last = out.trim().split('\n').at(-1) ?? '';
  if (code !== 0 || !last.startsWith('{')) throw new Error(`bench/${script} ${args.join(' ')} exited ${code}: ${err || out.slice(-2000)}`);
  return JSON.parse(last) as T;
}

export async function runOutside(p: OutsideParams, parts: string, show: (line: string) => void): Promise<OutsideResults> {
  const r: OutsideResults = {};
  if (parts.includes('e')) {
    show(`growth (e): ${p.e.projects.toLocaleString('en-US')} projects, ${p.e.events.toLocaleString('en-US')} live events over ${p.e.days} days, restarted from outside`);
    r.e = await runScript<TenantsResult>('growth-tenants.ts', [`--projects=${p.e.projects}`, `--events=${p.e.events}`, `--days=${p.e.days}`]);
  }
  if (parts.includes('f')) {
    show(`growth (f): ${p.f.events.toLocaleString('en-US')} live events with eventIds over HTTP, then a light load with snapshots every 2 s`);
    r.f = await runScript<LiveIdsResult>('live-ids.ts', [`--events=${p.f.events}`, `--days=${p.f.days}`, `--seconds=${p.f.seconds}`, `--idle=${p.f.idleMs}`]);
  }
  if (parts.includes('g')) {
    show(`growth (g): DELETE of a tenant of ${p.g.events.toLocaleString('en-US')} events while another writes`);
    r.g = await runScript<EraseResult>('erase.ts', [String(p.g.events), `--settle=${p.g.settleMs}`]);
  }
  return r;
}

const ms = (x: number) => `${x.toFixed(1)} ms`;
const n = (x: number) => x.toLocaleString('en-US');

export function outsideRows(r: OutsideResults, p: OutsideParams): Row[] {
  const rows: Row[] = [];
  if (r.e) {
    const what = `(e) ${n(p.e.projects)} projects, ${n(p.e.events)} live events over ${p.e.days} days, from outside`;
    rows.push({ id: 'growth.e.restart', what: `${what}: restart to the first /health 200`, value: `${r.e.outsideRestartMs} ms`, num: r.e.outsideRestartMs, goal: '≤ 1 s', met: r.e.outsideRestartMs <= 1000 });
    rows.push({ id: 'growth.e.rss', what: `${what}: anonymous RSS after the restart`, value: `${r.e.outsideAnonMiB} MiB`, num: r.e.outsideAnonMiB, goal: '≤ 250 MiB', met: r.e.outsideAnonMiB <= 250 });
  }
  if (r.f) {
    const a = r.f.anonMiB;
    rows.push({
      id: 'growth.f.rss',
      what: `(f) ${n(p.f.events)} live events with eventIds (${n(r.f.fill.eventsPerSecond)} ev/s): anonymous RSS 5 s after (idle, under load, restarted)`,
      value: `${a.afterFill} MiB (${a.idle}, ${a.underLoad}, ${a.afterRestart})`,
      num: a.afterFill,
      goal: '≤ 400 MiB',
      met: a.afterFill <= 400,
    });
    rows.push({ id: 'growth.f.stall', what: `(f) ${r.f.light.rate} single-event POSTs a second, a snapshot every 2 s: longest /health wait`, value: `${ms(r.f.health.longestMs)} (${r.f.health.over50} of ${r.f.health.pings} over 50 ms)`, num: r.f.health.longestMs, goal: '≤ 50 ms', met: r.f.health.longestMs <= 50 });
    rows.push({ id: 'growth.f.loopDelay', what: "(f) the service's own longest event-loop delay meanwhile (no other process's share of the cores in it)", value: ms(r.f.health.ownLoopMs), num: r.f.health.ownLoopMs, goal: '≤ 50 ms', met: r.f.health.ownLoopMs <= 50 });
    rows.push({ id: 'growth.f.p99', what: `(f) the same: POST p99 from the intended send time (${r.f.light.ok} ok; the longest)`, value: `${ms(r.f.light.p99)} (${ms(r.f.light.max)})`, num: r.f.light.p99, goal: '≤ 50 ms', met: r.f.light.p99 <= 50 });
  }
  if (r.g) {
    const g = r.g;
    rows.push({
      id: 'growth.g.delete',
      what: `(g) DELETE of a tenant of ${n(p.g.events)} events: its answer (its key then); erased from every file in (copies left)`,
      value: `${g.deleteStatus} in ${ms(g.deleteMs)} (${g.keyStatus}); ${g.erasedMs === null ? 'NOT FINISHED' : `${(g.erasedMs / 1000).toFixed(1)} s`} (${g.markersLeft})`,
      num: g.deleteMs,
      goal: 'at once; nothing left',
      met: g.deleteStatus === 200 && g.keyStatus === 401 && g.erasedMs !== null && g.markersLeft === 0 && g.deleteMs <= 50,
    });
    rows.push({ id: 'growth.g.p99', what: `(g) meanwhile another tenant's single-event writes (${g.writes}): p99 (longest)`, value: `${ms(g.writesP99Ms)} (${ms(g.writesMaxMs)})`, num: g.writesP99Ms, goal: '≤ 50 ms', met: g.writesP99Ms <= 50 });
    rows.push({ id: 'growth.g.stall', what: '(g) meanwhile the longest /health wait', value: ms(g.healthMaxMs), num: g.healthMaxMs, goal: '≤ 50 ms', met: g.healthMaxMs <= 50 });
  }
  return rows;
}
