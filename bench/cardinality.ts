import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startOutside, type OutsideService } from './lib/service-outside.ts';
import type { Row } from './report.ts';

/**
 * The cardinality section (`npm run bench -- --cardinality`): memory follows what is stored, whatever the shape of the
 * events. For each field a browser or backend controls, N events over the public `pk_` key where that field takes a
 * new value in every event, beside a plain run of the same N events whose fields cycle through a few values. Measured
 * from outside (anonymous RSS from /proc): after the ingest, after a restart (with the time to the first /health), and
 * while a question over that day runs (`prop:<key>` breakdown, its time and the peak). Then all fields distinct at
 * once over a larger N, with the peak sampled through the ingest.
 *
 * Runnable alone: `node --import tsx bench/cardinality.ts --events=100000 [--fields=propKey,path] [--all=1000000]`;
 * its last stdout line is the result as JSON.
 */

/** Fields a client controls, each with how event i gives it a value: distinct (new in every event) or plain (one of a few). */
export const FIELDS = ['name', 'path', 'referrer', 'session', 'user', 'country', 'device', 'propKey', 'propValue', 'itemFields', 'pageContext'] as const;
export type Field = (typeof FIELDS)[number];

/** Values a plain field cycles through: the same events' shape without the new values. */
const PLAIN_VALUES = 50;
/** Events a request carries (the contract's batch limit). */
const BATCH = 500;
/** Requests in flight at once, as a handful of browsers would send. */
const CONCURRENCY = 4;
/** How often the peak anonymous RSS is sampled while events go in and while a question runs. */
const SAMPLE_MS = 25;

/** Event i, with `distinct` fields taking a new value and the others one of PLAIN_VALUES. */
export function eventFor(i: number, distinct: ReadonlySet<Field>): Record<string, unknown> {
  const v = (f: Field, prefix: string) => (distinct.has(f) ? `${prefix}${i}` : `${prefix}${i % PLAIN_VALUES}`);
  const name = distinct.has('name') ? v('name', 'ev') : 'page_view';
  const e: Record<string, unknown> = {
    event: name,
    url: `https://shop.example/${v('path', 'p')}`,
    referrer: `https://${v('referrer', 'r')}.example.net/`,
    sessionId: distinct.has('session') ? `s${i}` : `s${i % 1000}`,
    userId: v('user', 'u'),
    country: v('country', 'C'),
    device: v('device', 'd'),
    eventParams: { [v('propKey', 'k')]: 1, plan: v('propValue', 'plan') },
    items: [{ item_id: v('itemFields', 'it'), [v('itemFields', 'f')]: 'x', price: 1 }],
    [v('pageContext', 'ctx')]: v('pageContext', 'title'),
  };
  return e;
}

interface Project {
  id: string;
  pk: string;
  sk: string;
}

async function createProject(url: string, admin: string, name: string): Promise<Project> {
  const r = await fetch(`${url}/projects`, {
    method: 'POST',
    headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name, allowed_origins: [], allowed_referrers: [], monthly_quota: 0 }),
  });
  if (r.status !== 201 && r.status !== 200) throw new Error(`POST /projects: ${r.status} ${await r.text()}`);
  const j = (await r.json()) as { project: { id: string }; keys: { secret: string; publishable: string } };
  return { id: j.project.id, pk: j.keys.publishable, sk: j.keys.secret };
}

/** Sends events first..first+n-1 in batches; returns the peak anonymous RSS seen meanwhile. */
async function send(svc: OutsideService, key: string, first: number, n: number, distinct: ReadonlySet<Field>): Promise<number> {
  let peak = svc.anonBytes();
  const timer = setInterval(() => (peak = Math.max(peak, svc.anonBytes())), SAMPLE_MS);
  let next = first;
  const end = first + n;
  const worker = async () => {
    while (next < end) {
      const from = next;
      next = Math.min(end, next + BATCH);
      const batch = [];
      for (let i = from; i < next; i++) batch.push(eventFor(i, distinct));
      const r = await fetch(`${svc.url}/analytics`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify(batch),
      });
      const body = await r.text();
      if (r.status !== 200 && r.status !== 202) throw new Error(`POST /analytics: ${r.status} ${body.slice(0, 300)}`);
    }
  };
  try {
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  } finally {
    clearInterval(timer);
  }
  return Math.max(peak, svc.anonBytes());
}

/** A question over today by one property key; its time and the peak anonymous RSS while it ran. */
async function ask(svc: OutsideService, sk: string, projectId: string, dim: string): Promise<{ ms: number; peak: number; rows: number }> {
  const day = new Date().toISOString().slice(0, 10);
  let peak = svc.anonBytes();
  const timer = setInterval(() => (peak = Math.max(peak, svc.anonBytes())), SAMPLE_MS);
  const t0 = performance.now();
  try {
    const r = await fetch(`${svc.url}/query`, {
      method: 'POST',
      headers: { authorization: `Bearer ${sk}`, 'content-type': 'application/json' },
      body: JSON.stringify({ projectId, from: day, to: day, metrics: ['visitors', 'events'], dimensions: [dim] }),
    });
    const body = await r.text();
    if (r.status !== 200) throw new Error(`POST /query: ${r.status} ${body.slice(0, 300)}`);
    const j = JSON.parse(body) as { results?: unknown[] };
    return { ms: performance.now() - t0, peak: Math.max(peak, svc.anonBytes()), rows: j.results?.length ?? 0 };
  } finally {
    clearInterval(timer);
  }
}

/** Generous limits: the bench is one client sending what many browsers would. */
const ENV = { ANALYTICS_RATE_PER_IP: '1000000000', ANALYTICS_BURST_PER_IP: '1000000000', ANALYTICS_RATE_PER_KEY: '1000000000', ANALYTICS_BURST_PER_KEY: '1000000000' };
export const ADMIN = 'ak_cardinality_bench_admin_key_0123456789';

export interface CardinalityRun {
  fields: string;
  events: number;
  /** anonymous RSS, MiB: at start, peak while ingesting, after ingest */
  startMiB: number;
  peakMiB: number;
  afterMiB: number;
  /** restart: time to /health, anonymous RSS after it, and a question by prop:<key> over the day */
  restartMs: number;
  restartMiB: number;
  questionMs: number;
  questionPeakMiB: number;
  questionRows: number;
  ingestSeconds: number;
}

const mib = (b: number) => Math.round((b / 2 ** 20) * 10) / 10;

/** How a run starts its service: more settings (cluster mode), and how long it waits after the ingest for a flush and a collection. */
export interface RunOptions {
  env?: Record<string, string>;
  settleMs?: number;
}

/** One run: a fresh data directory, N events with `distinct` fields, a restart and a question. */
export async function runOne(events: number, distinct: ReadonlySet<Field>, label: string, opts: RunOptions = {}): Promise<CardinalityRun> {
  const dir = mkdtempSync(path.join(tmpdir(), 'analytics-cardinality-'));
  const env = { ...ENV, ...opts.env };
  try {
    let svc = await startOutside(dir, ADMIN, env);
    const project = await createProject(svc.url, ADMIN, label);
    const startB = svc.anonBytes();
    const t0 = performance.now();
    const peak = await send(svc, project.pk, 0, events, distinct);
    const ingestSeconds = (performance.now() - t0) / 1000;
    // let a flush and a collection settle what the ingest left
    await new Promise((r) => setTimeout(r, opts.settleMs ?? 1000));
    const after = svc.anonBytes();
    await svc.stop();
    svc = await startOutside(dir, ADMIN, env);
    const restartMs = svc.startMs;
    const restartB = svc.anonBytes();
    const key = distinct.has('propKey') ? `k${events - 1}` : 'k7';
    const q = await ask(svc, project.sk, project.id, `prop:${key}`);
    await svc.stop();
    return {
      fields: label,
      events,
      startMiB: mib(startB),
      peakMiB: mib(peak),
      afterMiB: mib(after),
      restartMs: Math.round(restartMs),
      restartMiB: mib(restartB),
      questionMs: Math.round(q.ms),
      questionPeakMiB: mib(q.peak),
      questionRows: q.rows,
      ingestSeconds: Math.round(ingestSeconds * 10) / 10,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export interface CardinalityResults {
  plain: CardinalityRun;
  fields: CardinalityRun[];
  all?: CardinalityRun;
}

export async function runCardinality(events: number, fields: readonly Field[], allEvents: number, show: (line: string) => void): Promise<CardinalityResults> {
  show(`cardinality: plain, ${events.toLocaleString('en-US')} events`);
  const plain = await runOne(events, new Set(), 'plain');
  show(`  ${JSON.stringify(plain)}`);
  const out: CardinalityRun[] = [];
  for (const f of fields) {
    show(`cardinality: ${f} distinct, ${events.toLocaleString('en-US')} events`);
    out.push(await runOne(events, new Set([f]), f));
    show(`  ${JSON.stringify(out.at(-1))}`);
  }
  let all: CardinalityRun | undefined;
  if (allEvents > 0) {
    show(`cardinality: every field distinct, ${allEvents.toLocaleString('en-US')} events`);
    all = await runOne(allEvents, new Set(FIELDS), 'all');
  }
  return { plain, fields: out, all };
}

/** Sizes of the section: the (100,000 events a field, 1M with every field new) and the CI smoke run's. */
export const CARDINALITY_FULL = { events: 100_000, fields: FIELDS as readonly Field[], allEvents: 1_000_000 };
export const CARDINALITY_QUICK = { events: 10_000, fields: ['propKey', 'propValue'] as readonly Field[], allEvents: 20_000 };

/** Goals: +100 MiB over the plain run (ingest, restart, question), a question ≤ 1 s; every field at once ≤ 600 MiB at its peak. */
const GOAL_MIB = 100;
const GOAL_QUESTION_MS = 1000;
const GOAL_ALL_PEAK_MIB = 600;

export function cardinalityRows(r: CardinalityResults): Row[] {
  const rows: Row[] = [];
  const p = r.plain;
  rows.push({ id: 'card-plain', what: `cardinality: plain ${p.events.toLocaleString('en-US')} events: anonymous RSS peak / after restart / question`, value: `${p.peakMiB} / ${p.restartMiB} / ${p.questionPeakMiB} MiB`, num: p.peakMiB });
  for (const f of r.fields) {
    const over = Math.max(f.peakMiB - p.peakMiB, f.restartMiB - p.restartMiB, f.questionPeakMiB - p.questionPeakMiB);
    rows.push({
      id: `card-${f.fields}`,
      what: `cardinality: ${f.fields} new in each event: RSS over plain (worst of ingest, restart, question); question; restart`,
      value: `+${over.toFixed(1)} MiB; ${f.questionMs} ms; ${f.restartMs} ms (plain ${p.restartMs})`,
      num: over,
      goal: `≤ +${GOAL_MIB} MiB, ≤ ${GOAL_QUESTION_MS} ms`,
      met: over <= GOAL_MIB && f.questionMs <= GOAL_QUESTION_MS,
    });
  }
  if (r.all) {
    const a = r.all;
    rows.push({
      id: 'card-all',
      what: `cardinality: every field new in each of ${a.events.toLocaleString('en-US')} events: RSS peak ingesting (after); question ms and peak`,
      value: `${a.peakMiB} MiB (${a.afterMiB}); ${a.questionMs} ms, ${a.questionPeakMiB} MiB`,
      num: a.peakMiB,
      goal: `ingest peak ≤ ${GOAL_ALL_PEAK_MIB} MiB`,
      met: a.peakMiB <= GOAL_ALL_PEAK_MIB,
    });
  }
  return rows;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (name: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const events = Number(arg('events') ?? 100_000);
  const fields = (arg('fields')?.split(',') ?? [...FIELDS]) as Field[];
  for (const f of fields) if (!FIELDS.includes(f)) throw new Error(`unknown field ${f}; fields: ${FIELDS.join(', ')}`);
  const all = Number(arg('all') ?? 0);
  const r = await runCardinality(events, fields, all, (l) => process.stderr.write(`${l}\n`));
  process.stdout.write(`${JSON.stringify(r)}\n`);
}
