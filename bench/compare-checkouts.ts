import path from 'node:path';
import { BenchChild, REPO_ROOT } from './lib/child.ts';
import { median } from './lib/latency.ts';
import type { LoadResult } from './load/load-worker.ts';
import { USER_AGENTS, wireEvents } from './state/generate-events.ts';

/**
 * The write-path rows of `npm run bench` for two or more checkouts of this repository side by side, interleaved round
 * by round so the noise of a shared machine falls on all of them alike (a regression hunt: `git worktree add DIR
 * COMMIT`, link node_modules in, then compare). Each checkout's service runs in its own process; one load generator.
 *
 *   npx tsx bench/compare-checkouts.ts [--rounds=5] [--round-ms=3000] [--rate=3000] [--replay=300000]
 *     [--replay-batches=1,100] [--only=single,fixed,batch,replay] DIR[@NODE_FLAGS]...
 *
 * `DIR@FLAGS` runs that checkout's service under node flags (space-separated), so one checkout can be compared with
 * itself under others: `. '.@--max-semi-space-size=16'`.
 *
 * Rows: single-event ingest (32 connections, closed loop), bare node:http as a floor, the single-event p50/p99 at a
 * fixed rate from the intended send time, batch ingest (100 events/request), each with the service's CPU time per
 * event (its process: main thread and lmdb-js's writer; far less sensitive to other work on the machine than rates),
 * and a full replay (readAfter + apply, events per CPU second) of a log written by the checkout's own LogStore,
 * single-event entries and entries of 100. Medians over rounds.
 */

const args = process.argv.slice(2);
const opt = (name: string, dflt: number) => {
  const a = args.find((x) => x.startsWith(`--${name}=`));
  return a ? Number(a.split('=')[1]) : dflt;
};
const only = args.find((x) => x.startsWith('--only='))?.split('=')[1]?.split(',') ?? ['single', 'fixed', 'batch', 'replay'];
/** each checkout as given: DIR, or DIR@FLAGS for node flags of its service (space-separated) */
const dirs = args.filter((x) => !x.startsWith('--'));
const dirOf = (d: string): string => path.resolve(d.split('@')[0]!);
const flagsOf = (d: string): string[] => d.split('@')[1]?.split(' ') ?? [];
if (dirs.length === 0) throw new Error('give one or more checkout directories');
const ROUNDS = opt('rounds', 5);
const ROUND_MS = opt('round-ms', 3000);
const RATE = opt('rate', 3000);
const REPLAY = opt('replay', 300_000);
const REPLAY_BATCHES = (args.find((x) => x.startsWith('--replay-batches='))?.split('=')[1] ?? '1,100').split(',').map(Number);

const CHILD = path.join(REPO_ROOT, 'bench/lib/checkout-child.ts');
const name = (d: string) => [path.basename(dirOf(d)), ...flagsOf(d)].join(' ');

async function main(): Promise<void> {
  const out: Record<string, Record<string, number[]>> = {};
  const push = (d: string, row: string, v: number) => ((out[name(d)] ??= {})[row] ??= []).push(v);
  const singles = wireEvents(1000).map((e) => JSON.stringify(e));
  const batches = Array.from({ length: 20 }, (_, i) => JSON.stringify(wireEvents(100, 100 + i)));

  if (only.some((o) => o !== 'replay')) {
    const services = dirs.map((d) => new BenchChild(CHILD, { nodeArgs: flagsOf(d) }));
    const load = new BenchChild(path.join(REPO_ROOT, 'bench/load/load-worker.ts'));
    const bare = await import('./load/floors.ts').then((m) => m.startBareServer());
    try {
      const started = await Promise.all(services.map((s, i) => s.call<{ url: string; secret: string }>('start', { repo: dirOf(dirs[i]!), durability: 'flush' })));
      const spec = (i: number, bodies: string[]) => ({
        origin: started[i]!.url,
        path: '/analytics',
        method: 'POST' as const,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${started[i]!.secret}`, 'user-agent': USER_AGENTS[0]! },
        bodies,
        connections: 32,
      });
      // warm-up
      for (let i = 0; i < dirs.length; i++) {
        await load.call<LoadResult>('closed', { ...spec(i, singles), durationMs: 1000 });
        await load.call<LoadResult>('closed', { ...spec(i, batches), durationMs: 1000 });
      }
      for (let r = 0; r < ROUNDS; r++) {
        if (only.includes('single')) {
          const b = await load.call<LoadResult>('closed', { origin: bare.origin, path: '/analytics', method: 'POST', headers: { 'content-type': 'application/json' }, bodies: singles, connections: 32, durationMs: ROUND_MS });
          push('bare', 'single', b.rps);
        }
        // rotate the order every round so no checkout always runs right after the same other one
        for (let k = 0; k < dirs.length; k++) {
          const i = (k + r) % dirs.length;
          const d = dirs[i]!;
          // service CPU per event: robust against other work on the machine, unlike throughput
          const cpu = () => services[i]!.call<number>('cpu');
          if (only.includes('single')) {
            const c0 = await cpu();
            const s = await load.call<LoadResult>('closed', { ...spec(i, singles), durationMs: ROUND_MS });
            push(d, 'single', s.rps);
            push(d, 'single.p99', s.latency.p99);
            push(d, 'single.cpuUs', ((await cpu()) - c0) * 1e6 / s.ok);
          }
          if (only.includes('fixed')) {
            const c0 = await cpu();
            const f = await load.call<LoadResult>('open', { ...spec(i, singles), durationMs: ROUND_MS, rate: RATE });
            push(d, 'fixed.p50', f.latency.p50);
            push(d, 'fixed.p99', f.latency.p99);
            push(d, 'fixed.cpuUs', ((await cpu()) - c0) * 1e6 / f.ok);
          }
          if (only.includes('batch')) {
            const c0 = await cpu();
            const b = await load.call<LoadResult>('closed', { ...spec(i, batches), durationMs: ROUND_MS });
            push(d, 'batch', b.rps * 100);
            push(d, 'batch.cpuUsPerEvent', ((await cpu()) - c0) * 1e6 / (b.ok * 100));
          }
        }
        process.stderr.write(`round ${r + 1}/${ROUNDS} done\n`);
      }
    } finally {
      await load.call('close').catch(() => {});
      await load.stop();
      await bare.close();
      for (const s of services) {
        await s.call('stop').catch(() => {});
        await s.stop();
      }
    }
  }
  if (only.includes('replay')) {
    for (let r = 0; r < Math.max(1, Math.ceil(ROUNDS / 2)); r++) {
      for (let k = 0; k < dirs.length; k++) {
        const d = dirs[(k + r) % dirs.length]!;
        for (const batch of REPLAY_BATCHES) {
          const child = new BenchChild(CHILD, { nodeArgs: ['--max-old-space-size=4096', ...flagsOf(d)] });
          try {
            const x = await child.call<{ eventsPerSec: number; decodePerSec: number; bytes: number }>('replay', { repo: dirOf(d), events: REPLAY, batch });
            push(d, `replay.b${batch}`, x.eventsPerSec);
            push(d, `decode.b${batch}`, x.decodePerSec);
            push(d, `fileBytesPerEvent.b${batch}`, x.bytes / REPLAY);
          } finally {
            await child.stop();
          }
        }
      }
      process.stderr.write(`replay round ${r + 1} done\n`);
    }
  }
  const rows = new Set(Object.values(out).flatMap((o) => Object.keys(o)));
  const cols = Object.keys(out);
  const fmt = (x: number) => (x >= 1000 ? Math.round(x).toLocaleString('en-US') : x.toFixed(2));
  process.stdout.write(`${['row', ...cols].join('\t')}\n`);
  for (const row of rows) process.stdout.write(`${[row, ...cols.map((c) => (out[c]?.[row] ? fmt(median(out[c]![row]!)) : '-'))].join('\t')}\n`);
  process.stdout.write(`\nraw: ${JSON.stringify(out)}\n`);
}

await main();
