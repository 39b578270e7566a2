import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BenchChild, REPO_ROOT } from './lib/child.ts';
import { Progress } from './lib/progress.ts';
import type { PipelineResult } from './pipeline.ts';
import { runState } from './state.ts';

/**
 * `npx tsx bench/insights.ts [--events N]`: only the sections the insight figures can move (the big state: fold,
 * /metrics latency, snapshot, restore, replay, RSS; and the per-event engine steps), as one JSON line. Run it on this
 * commit and on one without the insights to state their cost; `npm run bench` runs the same sections among the rest.
 */

const eventsArg = process.argv.indexOf('--events');
const EVENTS = eventsArg > 0 ? Number(process.argv[eventsArg + 1]) : 10_000_000;
const DAYS = 30;

async function main(): Promise<void> {
  const tmp = mkdtempSync(path.join(tmpdir(), 'analytics-insights-bench-'));
  const progress = new Progress(6);
  try {
    const child = new BenchChild(path.join(REPO_ROOT, 'bench/lib/module-worker.ts'));
    let pipeline: PipelineResult;
    try {
      progress.show('engine steps per event (bench/pipeline.ts)');
      pipeline = await child.call<PipelineResult>('run', { file: path.join(REPO_ROOT, 'bench/pipeline.ts'), exportName: 'benchPipeline', args: [3000] });
    } finally {
      await child.stop();
    }
    const s = await runState(tmp, { events: EVENTS, days: DAYS, metricsIterations: 1000, httpMetricsMs: 5000 }, progress);
    progress.done();
    const out = {
      events: EVENTS,
      pipelineUsPerEvent: round(pipeline.totalUsPerEvent, 3),
      pipelineStages: Object.fromEntries(pipeline.stages.map((x) => [x.stage, round(x.usPerEvent, 3)])),
      foldEventsPerSec: Math.round(s.build.foldEventsPerSec),
      coreP95Ms: Object.fromEntries(s.build.core.map((r) => [`${r.days}d`, round(r.latency.p95, 3)])),
      coreFullCompareMs: s.build.coreFullCompare
        ? { p50: round(s.build.coreFullCompare.latency.p50, 3), p95: round(s.build.coreFullCompare.latency.p95, 3) }
        : null,
      core30dP50Ms: round(s.build.core.find((r) => r.days === 30)!.latency.p50, 3),
      httpP95Ms: Object.fromEntries(s.http.map((r) => [`${r.days}d`, round(r.latency.p95, 3)])),
      snapshotBytes: s.build.snapshotBytes,
      restoreMs: Math.round(s.restore.totalMs),
      restoreHeapPerDayMiB: round(s.restore.heapUsedBytes / DAYS / 2 ** 20, 2),
      restoreRssMiB: round(s.restore.rssBytes / 2 ** 20, 0),
      replayEventsPerSec: Math.round(s.replay.eventsPerSec),
      serveRssMiB: round(s.serve.rssBytes / 2 ** 20, 0),
      serveHeapMiB: round(s.serve.heapUsedBytes / 2 ** 20, 0),
    };
    process.stdout.write(`${JSON.stringify(out)}\n`);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

function round(x: number, digits: number): number {
  return Number(x.toFixed(digits));
}

main().catch((err: unknown) => {
  process.stderr.write(`insights bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
