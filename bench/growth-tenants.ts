import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BenchChild, REPO_ROOT } from './lib/child.ts';
import { startOutside } from './lib/service-outside.ts';
import type { BuildResult } from './growth/growth-worker.ts';
import { SERVICE_NODE_ARGS } from '../bin/dist.mjs';

/**
 * `npx tsx bench/growth-tenants.ts [--events=2000000] [--projects=10000] [--days=365]`: only state (b) of
 * `npm run bench -- --growth` (many projects, Zipf traffic, a year), at any size: built through the real reducer and
 * sealer, then served as a user runs it (`node dist/main.js`), stopped and restarted: restart to the first /health
 * 200 and the anonymous RSS after it settles, measured from outside (`outside*`); then once more in a bench process
 * for the heap's share (startup to serving, RSS and heap after a full GC). One JSON line.
 */

/** After a restart, memory is read once the service has been idle this long (timers have run, the start's garbage is collected). */
const SETTLE_MS = 3_000;

const arg = (name: string, dflt: number) => {
  const a = process.argv.find((x) => x.startsWith(`--${name}=`));
  return a === undefined ? dflt : Number(a.slice(name.length + 3));
};
const WORKER = path.join(REPO_ROOT, 'bench/growth/growth-worker.ts');
/** the launchers' flags (bin/dist.mjs), so the figures are the shipped service's */
const NODE_ARGS = [...SERVICE_NODE_ARGS, '--expose-gc', '--max-old-space-size=8192'];

const dir = path.join(mkdtempSync(path.join(tmpdir(), 'growth-tenants-')), 'b');
const lastDay = new Date().toISOString().slice(0, 10);
try {
  const builder = new BenchChild(WORKER, { nodeArgs: NODE_ARGS });
  let build: BuildResult;
  try {
    build = await builder.call<BuildResult>('build', { dir, projects: arg('projects', 10_000), events: arg('events', 2_000_000), days: arg('days', 365), lastDay });
  } finally {
    await builder.stop();
  }
  const first = await startOutside(dir, build.adminKey);
  await first.stop();
  const again = await startOutside(dir, build.adminKey);
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  const outside = { startMs: again.startMs, anonBytes: again.anonBytes(), rssBytes: again.rssBytes() };
  await again.stop();
  const server = new BenchChild(WORKER, { nodeArgs: NODE_ARGS });
  try {
    const served = await server.call<{ startMs: number; rssBytes: number }>('serve', { dir, adminKey: build.adminKey });
    const mem = await server.call<{ rssBytes: number; anonBytes: number; heapUsedBytes: number; arrayBuffersBytes: number }>('memory');
    await server.call('stop');
    const mib = (b: number) => Math.round(b / 2 ** 20);
    console.log(
      JSON.stringify({
        projects: build.projects,
        events: build.events,
        buildS: Math.round(build.seconds),
        liveDays: build.liveDays,
        sealedDays: build.sealedDays,
        snapshotMiB: mib(build.snapshotBytes),
        outsideRestartMs: Math.round(outside.startMs),
        outsideAnonMiB: mib(outside.anonBytes),
        outsideRssMiB: mib(outside.rssBytes),
        startMs: Math.round(served.startMs),
        rssMiB: mib(served.rssBytes),
        rssLaterMiB: mib(mem.rssBytes),
        anonMiB: mib(mem.anonBytes),
        heapMiB: mib(mem.heapUsedBytes),
        arrayBuffersMiB: mib(mem.arrayBuffersBytes),
      }),
    );
  } finally {
    await server.stop();
  }
} finally {
  rmSync(path.dirname(dir), { recursive: true, force: true });
}
