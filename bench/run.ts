import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { PipelineResult } from './pipeline.ts';
import { runIngest, BATCH_SIZE, CONNECTIONS, type IngestResults } from './ingest.ts';
import { BenchChild, REPO_ROOT } from './lib/child.ts';
import { median } from './lib/latency.ts';
import { Progress } from './lib/progress.ts';
import { GROWTH_FULL, GROWTH_PARTS, GROWTH_QUICK, growthRows, runGrowth, type GrowthParams, type GrowthResults } from './growth.ts';
import { CLUSTER_FULL, CLUSTER_QUICK, clusterRows, runCluster } from './cluster.ts';
import { QUESTIONS_FULL, QUESTIONS_QUICK, questionRows, runQuestions } from './questions.ts';
import { CARDINALITY_FULL, CARDINALITY_QUICK, cardinalityRows, runCardinality } from './cardinality.ts';
import { renderTable, type Row } from './report.ts';
import { runState, type StateResults } from './state.ts';

/**
 * `npm run bench` (`-- --quick` for the CI smoke run): every headline figure of issue 7, each next to a floor measured
 * in the same run, printed as a table and written to bench/results/latest.json. No thresholds: a goal that is not
 * met is reported, not failed.
 */

const quick = process.argv.includes('--quick');
/** `--growth`: only the growth section (issue 18), full size unless `--quick`; `--quick` alone also runs it, scaled down. */
const growthOnly = process.argv.includes('--growth');
/**
 * `--cluster`: only the cluster section (issue 15, CLUSTER.md §11 "Bench"): a 3-server nats-server cluster and service
 * processes on this machine; `--quick` scales it down (about 2 minutes). Not part of the plain `--quick` run (CI).
 */
const clusterOnly = process.argv.includes('--cluster');
/** `--questions`: only the column store's questions (Q1–Q6 of the "Ask anything" issue), 10M events unless `--quick`. */
const questionsOnly = process.argv.includes('--questions');
/** `--cardinality`: only the cardinality section (a field new in every event, from outside), 100,000 events a field unless `--quick`. */
const cardinalityOnly = process.argv.includes('--cardinality');
/**
 * `--scale=F` (with `--growth`): every state's event count times F, projects and days unchanged, for a pass at the
 * full tenant count and history length that fits in less time than the full hour (`--scale=0.1`: about 15 minutes).
 */
const scaleArg = process.argv.find((a) => a.startsWith('--scale='));
const SCALE = scaleArg === undefined ? 1 : Number(scaleArg.slice('--scale='.length));
if (!(SCALE > 0 && SCALE <= 1)) throw new Error(`--scale takes a number in (0, 1], got ${scaleArg}`);
const GROWTH = scaleGrowth(quick ? GROWTH_QUICK : GROWTH_FULL, SCALE);
/** `--parts=efg` (with `--growth`): only the growth parts named, (a)–(g). */
const partsArg = process.argv.find((a) => a.startsWith('--parts='));
const PARTS = partsArg === undefined ? GROWTH_PARTS : partsArg.slice('--parts='.length);
if (!/^[a-g]+$/.test(PARTS)) throw new Error(`--parts takes letters a–g, got ${partsArg}`);

function scaleGrowth(p: GrowthParams, f: number): GrowthParams {
  if (f === 1) return p;
  const n = (events: number) => Math.max(1000, Math.round(events * f));
  return {
    a: { ...p.a, events: n(p.a.events) },
    b: { ...p.b, events: n(p.b.events) },
    c: { ...p.c, events: n(p.c.events) },
    d: { ...p.d, events: n(p.d.events) },
    readMs: p.readMs,
    outside: { e: { ...p.outside.e, events: n(p.outside.e.events) }, f: { ...p.outside.f, events: n(p.outside.f.events) }, g: { ...p.outside.g, events: n(p.outside.g.events) } },
  };
}

const PARAMS = quick
  ? {
      ingest: { warmupMs: 500, roundMs: 1200, rounds: 3, openLoopShare: 0.5 },
      state: { events: 1_000_000, days: 30, metricsIterations: 200, httpMetricsMs: 1500 },
      enrichIterations: 20_000,
      pipelineBatches: 300,
    }
  : {
      ingest: { warmupMs: 3000, roundMs: 5000, rounds: 5, openLoopShare: 0.5 },
      state: { events: 10_000_000, days: 30, metricsIterations: 1000, httpMetricsMs: 5000 },
      enrichIterations: 200_000,
      pipelineBatches: 3000,
    };

interface EnrichFigures {
  classifyPerSec: number;
  sourcePerSec: number;
  sessionIdPerSec: number;
}

async function runModule<T>(file: string, exportName: string, args: unknown[]): Promise<T> {
  const child = new BenchChild(path.join(REPO_ROOT, 'bench/lib/module-worker.ts'));
  try {
    return await child.call<T>('run', { file, exportName, args });
  } finally {
    await child.stop();
  }
}

async function main(): Promise<void> {
  const progress = new Progress(8);
  const tmp = mkdtempSync(path.join(tmpdir(), 'analytics-bench-'));
  const notes: string[] = [];
  const started = Date.now();
  try {
    if (clusterOnly) {
      const params = quick ? CLUSTER_QUICK : CLUSTER_FULL;
      const cluster = await runCluster(tmp, params, progress);
      progress.done();
      notes.push(...cluster.notes);
      finish(clusterRows(cluster), notes, started, { cluster, clusterParams: params });
      return;
    }
    if (questionsOnly) {
      const qp = quick ? QUESTIONS_QUICK : QUESTIONS_FULL;
      progress.show(`questions: ${qp.events.toLocaleString('en-US')} events over ${qp.days} days`);
      const questions = await runQuestions(qp);
      progress.done();
      finish(questionRows(questions, qp), notes, started, { questions });
      return;
    }
    if (cardinalityOnly) {
      const cp = quick ? CARDINALITY_QUICK : CARDINALITY_FULL;
      const cardinality = await runCardinality(cp.events, cp.fields, cp.allEvents, (l) => progress.show(l));
      progress.done();
      finish(cardinalityRows(cardinality), notes, started, { cardinality });
      return;
    }
    if (growthOnly) {
      const growth = await runGrowth(tmp, GROWTH, progress, PARTS);
      progress.done();
      finish(growthRows(growth, GROWTH), notes, started, { growth });
      return;
    }
    progress.show(`ingest: floors, service, gRPC (${PARAMS.ingest.rounds} rounds of ${PARAMS.ingest.roundMs / 1000}s)`);
    const ingest = await runIngest(tmp, PARAMS.ingest, progress);

    progress.next('enrichment micro-bench (bench/enrich.ts)');
    let enrich: EnrichFigures | undefined;
    const enrichFile = path.join(REPO_ROOT, 'bench/enrich.ts');
    if (existsSync(enrichFile)) {
      try {
        enrich = await runModule<EnrichFigures>(enrichFile, 'benchEnrich', [PARAMS.enrichIterations]);
      } catch (err) {
        notes.push(`benchEnrich failed: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
      }
    } else notes.push('bench/enrich.ts is missing: the enrichment micro-bench row is skipped');

    progress.show('engine steps per event, in-process (bench/pipeline.ts)');
    const pipeline = await runModule<PipelineResult>(path.join(REPO_ROOT, 'bench/pipeline.ts'), 'benchPipeline', [PARAMS.pipelineBatches]);

    progress.next('tracker build (gzip size)');
    let trackerGzip: number | undefined;
    const trackerFile = path.join(REPO_ROOT, 'src/tracker/build.ts');
    if (existsSync(trackerFile)) {
      const mod = (await import(pathToFileURL(trackerFile).href)) as { buildTracker: () => Promise<{ gzipBytes: number }> };
      trackerGzip = (await mod.buildTracker()).gzipBytes;
    } else notes.push('src/tracker/build.ts is missing: the tracker row is skipped');

    const state = await runState(tmp, PARAMS.state, progress);
    let growth: GrowthResults | undefined;
    if (quick) growth = await runGrowth(tmp, GROWTH, progress);
    progress.show('questions: the column store, Q1–Q6 (bench/questions.ts)');
    const qp = quick ? QUESTIONS_QUICK : QUESTIONS_FULL;
    const questions = await runQuestions(qp);
    const cp = quick ? CARDINALITY_QUICK : CARDINALITY_FULL;
    const cardinality = await runCardinality(cp.events, cp.fields, cp.allEvents, (l) => progress.show(l));
    progress.next('writing results');

    if ('skipped' in ingest.grpc) notes.push(`gRPC rows skipped: ${ingest.grpc.skipped}`);
    const rows = buildRows(ingest, state, enrich, trackerGzip, pipeline);
    if (growth) rows.push(...growthRows(growth, GROWTH));
    rows.push(...questionRows(questions, qp));
    rows.push(...cardinalityRows(cardinality));
    for (const r of [ingest.serviceSingle, ingest.serviceSingleNoUa, ingest.serviceBatch, ingest.lmdbSingle, ingest.bareSingle]) {
      if (r.errors) notes.push(`${r.name}: some answers were not 200, e.g. ${r.errors}`);
    }
    for (const h of state.http) if (h.errors) notes.push(`GET /metrics ${h.days}d: ${h.errors}`);
    progress.done();

    finish(rows, notes, started, { ingest, state, enrich, trackerGzip, pipeline, growth, questions, cardinality });
  } finally {
    progress.done();
    rmSync(tmp, { recursive: true, force: true });
  }
}

function finish(rows: Row[], notes: string[], started: number, raw: object): void {
  const table = renderTable(rows);
  const header = `Benchmarks${quick ? ' (--quick)' : ''}${growthOnly ? ' (--growth)' : ''}${clusterOnly ? ' (--cluster)' : ''}: ${cpus().length} CPUs (${cpus()[0]?.model.trim() ?? '?'}), Node ${process.version}, ${new Date().toISOString()}, ${Math.round((Date.now() - started) / 1000)} s`;
  process.stdout.write(`\n${header}\n\n${table}\n`);
  if (notes.length > 0) process.stdout.write(`\nNotes:\n${notes.map((n) => `- ${n}`).join('\n')}\n`);
  const out = path.join(REPO_ROOT, 'bench/results');
  mkdirSync(out, { recursive: true });
  const json = {
    date: new Date().toISOString(),
    quick,
    growthOnly,
    clusterOnly,
    seconds: Math.round((Date.now() - started) / 1000),
    machine: { cpus: cpus().length, model: cpus()[0]?.model.trim(), memBytes: totalmem(), node: process.version },
    params: { ...PARAMS, growth: GROWTH },
    rows,
    notes,
    raw,
  };
  const file = clusterOnly ? 'cluster.json' : growthOnly ? 'growth.json' : questionsOnly ? 'questions.json' : cardinalityOnly ? 'cardinality.json' : 'latest.json';
  writeFileSync(path.join(out, file), `${JSON.stringify(json, null, 2)}\n`);
  process.stdout.write(`\nwritten to bench/results/${file}\n`);
}

const fmt = (n: number, digits = 0) => (Number.isFinite(n) ? n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : 'n/a');
const pct = (x: number) => (Number.isFinite(x) ? `${(x * 100).toFixed(0)} %` : 'n/a');
const ms = (x: number) => `${x.toFixed(x < 1 ? 3 : 2)} ms`;
const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;

function buildRows(
  ingest: IngestResults,
  state: StateResults,
  enrich: EnrichFigures | undefined,
  trackerGzip: number | undefined,
  pipeline: PipelineResult,
): Row[] {
  const rows: Row[] = [];
  // Ratios are the median of per-round ratios: both sides of each ratio ran seconds apart under the same noise.
  const ratio = (a: { rounds: number[] }, b: { rounds: number[] }) =>
    median(a.rounds.slice(0, b.rounds.length).map((x, i) => x / b.rounds[i]!));
  const bare = ingest.bareSingle.eventsPerSec;
  const raw = ingest.rawPuts.eventsPerSec;
  const batch = ingest.serviceBatch.eventsPerSec;
  const single = ingest.serviceSingle.eventsPerSec;
  const n = state.build.events.toLocaleString('en-US');

  const fs = ingest.fsync.latency;
  rows.push({ id: 'floor.fsync', what: 'Floor: disk, 4 KiB write + fdatasync back to back: syncs/s (p50 / p99)', value: `${fmt(ingest.fsync.eventsPerSec)} /s (${fs ? `${ms(fs.p50)} / ${ms(fs.p99)}` : 'n/a'})`, num: ingest.fsync.eventsPerSec });
  rows.push({ id: 'floor.bare', what: `Floor: bare node:http, parse JSON + reply (${CONNECTIONS} conns)`, value: `${fmt(bare)} ev/s`, num: bare });
  rows.push({ id: 'floor.lmdb', what: 'Floor: + one lmdb put per event, ack after flush', value: `${fmt(ingest.lmdbSingle.eventsPerSec)} ev/s`, num: ingest.lmdbSingle.eventsPerSec, ratio: ratio(ingest.lmdbSingle, ingest.bareSingle), ref: 'bare' });
  rows.push({ id: 'floor.raw', what: `Floor: raw lmdb puts, ${BATCH_SIZE}/txn, ${CONNECTIONS} writers, flushed`, value: `${fmt(raw)} ev/s`, num: raw });
  rows.push({ id: 'floor.bareBatch', what: `Floor: bare node:http, batches of ${BATCH_SIZE}`, value: `${fmt(ingest.bareBatch.eventsPerSec)} ev/s`, num: ingest.bareBatch.eventsPerSec });

  const sl = ingest.serviceSingle.latency;
  rows.push({
    id: 'http.single',
    what: `HTTP single-event ingest, ${CONNECTIONS} conns (saturated p50/p99 ${sl ? `${ms(sl.p50)} / ${ms(sl.p99)}` : 'n/a'})`,
    value: `${fmt(single)} ev/s`,
    num: single,
    ratio: ratio(ingest.serviceSingle, ingest.bareSingle),
    ref: 'bare',
    goal: '≥ 50 %',
    met: ratio(ingest.serviceSingle, ingest.bareSingle) >= 0.5,
  });
  const commit = ingest.serviceSingleCommit.eventsPerSec;
  rows.push({
    id: 'http.single.commit',
    what: 'HTTP single-event ingest, ANALYTICS_DURABILITY=commit (no fsync awaited)',
    value: `${fmt(commit)} ev/s`,
    num: commit,
    ratio: ratio(ingest.serviceSingleCommit, ingest.bareSingle),
    ref: 'bare',
  });
  rows.push({
    id: 'http.single.vsLmdb',
    what: 'HTTP single-event ingest vs the durable (lmdb + flush) floor',
    value: `${fmt(single)} ev/s`,
    num: single,
    ratio: ratio(ingest.serviceSingle, ingest.lmdbSingle),
    ref: 'lmdb floor',
  });
  if (ingest.openLoop) {
    const l = ingest.openLoop.result.latency;
    rows.push({
      id: 'http.single.latency',
      what: `HTTP single-event latency at a fixed ${fmt(ingest.openLoop.rate)} ev/s (from intended send), p50 / p99`,
      value: `${ms(l.p50)} / ${ms(l.p99)}`,
      num: l.p99,
      goal: 'p99 ≤ 10 ms',
      met: l.p99 <= 10,
    });
    const f = ingest.openLoop.lmdbFloor.latency;
    rows.push({ id: 'floor.lmdb.latency', what: `Floor: lmdb + flush server at the same fixed rate, p50 / p99`, value: `${ms(f.p50)} / ${ms(f.p99)}`, num: f.p99 });
  }
  rows.push({ id: 'http.batch', what: `HTTP batch ingest, ${BATCH_SIZE} events/request, ${CONNECTIONS} conns`, value: `${fmt(batch)} ev/s`, num: batch, ratio: ratio(ingest.serviceBatch, ingest.rawPuts), ref: 'raw puts', goal: '≥ 60 %', met: ratio(ingest.serviceBatch, ingest.rawPuts) >= 0.6 });
  rows.push({ id: 'http.batch.vsBare', what: 'HTTP batch ingest vs bare node:http with the same batches', value: `${fmt(batch)} ev/s`, num: batch, ratio: ratio(ingest.serviceBatch, ingest.bareBatch), ref: 'bare batch' });
  rows.push({
    id: 'engine.pipeline',
    what: `Engine steps per event in-process (guard, validate, source, normalize, fold): ${pipeline.totalUsPerEvent.toFixed(2)} µs, one-core ceiling`,
    value: `${fmt(pipeline.ceilingEventsPerSec)} ev/s`,
    num: pipeline.ceilingEventsPerSec,
  });
  if (!('skipped' in ingest.grpc)) {
    const u = ingest.grpc.unary.eventsPerSec;
    const s = ingest.grpc.stream.eventsPerSec;
    const ru = ratio(ingest.grpc.unary, ingest.serviceBatch);
    const rs = ratio(ingest.grpc.stream, ingest.serviceBatch);
    rows.push({ id: 'grpc.unary', what: 'gRPC unary Ingest, 100 events/call (benchGrpc)', value: `${fmt(u)} ev/s`, num: u, ratio: ru, ref: 'HTTP batch' });
    rows.push({ id: 'grpc.stream', what: 'gRPC IngestStream, 100 events/message (benchGrpc)', value: `${fmt(s)} ev/s`, num: s, ratio: rs, ref: 'HTTP batch', goal: '≥ 100 %', met: rs >= 1 });
  } else {
    rows.push({ id: 'grpc', what: 'gRPC unary / streaming', value: 'skipped', goal: 'stream ≥ HTTP batch', note: ingest.grpc.skipped });
  }

  const uaCost = 1 - ratio(ingest.serviceSingle, ingest.serviceSingleNoUa);
  rows.push({ id: 'enrich.ua', what: 'Enrichment: single-event ingest with a browser UA vs without (throughput lost)', value: pct(uaCost), num: uaCost, goal: '≤ 15 %', met: uaCost <= 0.15 });
  if (enrich) {
    const usPerEvent = 1e6 / enrich.classifyPerSec + 1e6 / enrich.sourcePerSec + 1e6 / enrich.sessionIdPerSec;
    const share = usPerEvent / (1e6 / single);
    rows.push({
      id: 'enrich.micro',
      what: `Enrichment micro-bench: classify + source + session id = ${usPerEvent.toFixed(2)} µs/event, share of single-event time`,
      value: pct(share),
      num: share,
      goal: '≤ 15 %',
      met: share <= 0.15,
    });
  }

  for (const r of state.build.core) {
    const l = r.latency;
    rows.push({ id: `metrics.core.${r.days}d`, what: `metrics() in-process, ${r.days}-day range, ${n} events: p50 / p95 / p99`, value: `${ms(l.p50)} / ${ms(l.p95)} / ${ms(l.p99)}`, num: l.p95, ...(r.days === 30 ? { goal: 'p95 ≤ 5 ms', met: l.p95 <= 5 } : {}) });
  }
  {
    const l = state.build.coreFullCompare.latency;
    rows.push({ id: 'metrics.core.30d.fullCompare', what: `metrics() in-process, 30 days compared with 30 days of data (worst case of compare), ${n} events: p50 / p95 / p99`, value: `${ms(l.p50)} / ${ms(l.p95)} / ${ms(l.p99)}`, num: l.p95, goal: 'p95 ≤ 5 ms', met: l.p95 <= 5 });
  }
  for (const r of state.http) {
    const l = r.latency;
    rows.push({ id: `metrics.http.${r.days}d`, what: `GET /metrics over HTTP, ${r.days}-day range: p50 / p95 / p99`, value: `${ms(l.p50)} / ${ms(l.p95)} / ${ms(l.p99)}`, num: l.p95, ...(r.days === 30 ? { goal: 'p95 ≤ 5 ms', met: l.p95 <= 5 } : {}) });
  }
  const sessions = state.build.sessions.toLocaleString('en-US');
  rows.push({ id: 'startup.restore', what: `Snapshot restore (read + checksum + deserialize + fromSnapshot), ${n} events`, value: `${fmt(state.restore.totalMs / 1000, 2)} s`, num: state.restore.totalMs, goal: '≤ 2 s', met: state.restore.totalMs <= 2000 });
  rows.push({ id: 'startup.replay', what: `Full replay from the log (readAfter + apply), ${n} records`, value: `${fmt(state.replay.eventsPerSec)} ev/s`, num: state.replay.eventsPerSec, goal: '≥ 300k ev/s', met: state.replay.eventsPerSec >= 300_000 });
  rows.push({ id: 'startup.rss', what: `RSS of the service holding ${n} events / ${sessions} sessions (after GC)`, value: mib(state.serve.rssBytes), num: state.serve.rssBytes, goal: '≤ 1 GiB', met: state.serve.rssBytes <= 2 ** 30 });
  if (trackerGzip !== undefined) rows.push({ id: 'tracker.gzip', what: 'Tracker script, gzip -9', value: `${fmt(trackerGzip)} B`, num: trackerGzip, goal: '≤ 1,024 B', met: trackerGzip <= 1024 });
  return rows;
}

main().catch((err: unknown) => {
  process.stderr.write(`\nbench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
