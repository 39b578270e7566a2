import { isDeepStrictEqual } from 'node:util';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { StoredEvent } from '../src/core/types.ts';
import { ColumnProjection } from '../src/engine/column-projection.ts';
import { ColumnStore } from '../src/store/lmdb/column-store.ts';
import type { Row } from './report.ts';
import { benchQuestions, closeDuckDb, duckdbAnswer, loadDuckDb } from './duckdb-questions.ts';
import { rng } from './lib/seeded-random.ts';

/**
 * The column store's questions (issue "Ask anything", Q1–Q6), in-process: generated events are folded into a
 * ColumnProjection over a real columns.lmdb (sealed as the service seals them), then each question is asked
 * repeatedly and its p95 reported, with the columns' bytes per event; DuckDB holds the same events and answers the
 * same questions in the same run (its p95, the ratio, and whether both answers agree). HTTP is not part of this section.
 */

export interface QuestionParams {
  events: number;
  days: number;
  iterations: number;
}
export const QUESTIONS_QUICK: QuestionParams = { events: 300_000, days: 30, iterations: 5 };
export const QUESTIONS_FULL: QuestionParams = { events: 10_000_000, days: 30, iterations: 20 };

/** Events per visit on average, and the fold's chunk (one appended batch). */
const EVENTS_PER_VISIT = 5;
const CHUNK = 500;
const DAY_MS = 86_400_000;

const COUNTRIES = ['US', 'DE', 'FR', 'GB', 'IN', 'BR', 'JP', 'CA', 'NL', 'ES', 'IT', 'PL', 'SE', 'AU', 'MX', 'KR', 'CH', 'AT', 'BE', 'DK'];
const SOURCES = ['Direct', 'Google', 'Bing', 'DuckDuckGo', 'Twitter', 'Facebook', 'LinkedIn', 'Reddit', 'Hacker News', 'GitHub', ...Array.from({ length: 20 }, (_, i) => `site${i}.example`)];
const PATHS = ['/', '/pricing', '/signup', '/docs', ...Array.from({ length: 196 }, (_, i) => `/blog/post-${i}`)];
const NAMES = ['signup', 'click', 'download', 'purchase', 'scroll'];
const BROWSERS = ['Chrome', 'Firefox', 'Safari', 'Edge'];
const OSES = ['Windows', 'Mac OS', 'iOS', 'Android', 'Linux'];

/** Generated visits, each of ~EVENTS_PER_VISIT events within 30 minutes, spread over `days` days ending at `end`. */
function* generate(p: QuestionParams, end: number): Generator<StoredEvent> {
  const rand = rng(1);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() ** 2 * xs.length)]!;
  const start = end - p.days * DAY_MS;
  const perDay = Math.ceil(p.events / p.days);
  let n = 0;
  for (let d = 0; d < p.days && n < p.events; d++) {
    const dayStart = start + d * DAY_MS;
    const day = new Date(dayStart).toISOString().slice(0, 10);
    let made = 0;
    let visit = 0;
    while (made < perDay && n < p.events) {
      const sessionId = `s${d}-${visit++}`;
      const user = rand() < 0.3 ? `u:${Math.floor(rand() * 200_000)}` : `s:${sessionId}`;
      const len = 1 + Math.floor(rand() * (2 * EVENTS_PER_VISIT - 1));
      let ts = dayStart + Math.floor(rand() * (DAY_MS - 1_800_000));
      const source = pick(SOURCES);
      const country = pick(COUNTRIES);
      const browser = pick(BROWSERS);
      const os = pick(OSES);
      const device = rand() < 0.6 ? 'desktop' : 'mobile';
      for (let i = 0; i < len && made < perDay; i++, made++, n++) {
        const pv = i === 0 || rand() < 0.7;
        const event = pv ? 'page_view' : pick(NAMES);
        const p2 = pick(PATHS);
        ts += Math.floor(rand() * 300_000);
        const params: StoredEvent['params'] = {};
        if (rand() < 0.2) params.plan = pick(['free', 'pro', 'team']);
        yield {
          t: 'e',
          p: 'p_bench',
          ts,
          rt: ts,
          day,
          event,
          url: `https://bench.example${p2}`,
          path: p2,
          referrer: '',
          source,
          sessionId,
          user,
          country,
          device,
          params,
          browser,
          os,
        };
      }
    }
  }
}

function p95(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(s.length * 0.95) - 1)]!;
}

export interface QuestionResults {
  events: number;
  foldSeconds: number;
  columnBytes: number;
  fileBytes: number;
  segments: number;
  p95: Record<string, number>;
  /** DuckDB's p95 for the same question over the same events */
  duckP95: Record<string, number>;
  agreement: Record<string, Agreement>;
}

/** Equal; or every number within the contract's 1 % for range visitors (a sketch past 2,048 distinct visitors); or not. */
type Agreement = 'equal' | 'within 1 %' | 'DIFFER';

function agree(a: unknown, b: unknown): Agreement {
  if (isDeepStrictEqual(a, b)) return 'equal';
  const close = (x: unknown, y: unknown): boolean => {
    if (typeof x === 'number' && typeof y === 'number') return x === y || Math.abs(x - y) <= 0.01 * Math.max(Math.abs(x), Math.abs(y));
    if (Array.isArray(x) && Array.isArray(y)) return x.length === y.length && x.every((v, i) => close(v, y[i]));
    if (x !== null && y !== null && typeof x === 'object' && typeof y === 'object') {
      const kx = Object.keys(x);
      return kx.length === Object.keys(y).length && kx.every((k) => close((x as Record<string, unknown>)[k], (y as Record<string, unknown>)[k]));
    }
    return x === y;
  };
  return close(a, b) ? 'within 1 %' : 'DIFFER';
}

async function timed(ask: () => Promise<unknown>, n: number): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await ask();
    times.push(performance.now() - t);
  }
  return times;
}

export async function runQuestions(p: QuestionParams, log: (line: string) => void = () => {}): Promise<QuestionResults> {
  const dir = mkdtempSync(path.join(tmpdir(), 'analytics-questions-'));
  try {
    const end = Date.UTC(2026, 10, 1);
    const store = ColumnStore.open(dir);
    const columns = new ColumnProjection(store, log);
    const foldStarted = performance.now();
    let seq = 1;
    let batch: StoredEvent[] = [];
    for (const e of generate(p, end)) {
      batch.push(e);
      if (batch.length === CHUNK) {
        columns.fold(seq, batch);
        seq += batch.length;
        batch = [];
        if (columns.openCount() === 0) await columns.flush(); // a bound flush started: let it finish
      }
    }
    if (batch.length > 0) columns.fold(seq, batch);
    await columns.flush();
    // a second flush finds every day idle and merges its segments, as the service does a flush interval after a day's last event
    await columns.flush();
    const foldSeconds = (performance.now() - foldStarted) / 1000;
    const size = store.size();
    const from = new Date(end - p.days * DAY_MS).toISOString().slice(0, 10);
    const to = new Date(end - DAY_MS).toISOString().slice(0, 10);
    // DuckDB holds the same events (the generator is deterministic) and answers the same questions with the contract's
    // semantics in SQL (bench/duckdb-questions.ts; test/duckdb-reference.test.ts checks the SQL against the store).
    const duck = await loadDuckDb(generate(p, end));
    const out: Record<string, number> = {};
    const duckP95: Record<string, number> = {};
    const agreement: Record<string, Agreement> = {};
    try {
      for (const { label, question } of benchQuestions(from, to)) {
        const ask = (): Promise<unknown> => ('steps' in question ? columns.funnel('p_bench', 'UTC', question) : columns.query('p_bench', 'UTC', [], question));
        const ours = await ask(); // the first ask decodes the segments into the cache
        const theirs = await duckdbAnswer(duck, question);
        agreement[label] = agree(ours, theirs);
        const times = await timed(ask, p.iterations);
        const duckTimes = await timed(() => duckdbAnswer(duck, question), Math.max(3, Math.ceil(p.iterations / 2)));
        out[label] = p95(times);
        duckP95[label] = p95(duckTimes);
        const sorted = [...times].sort((x, y) => x - y);
        log(`${label}: p95 ${out[label]!.toFixed(1)} ms (min ${sorted[0]!.toFixed(1)}, median ${sorted[sorted.length >> 1]!.toFixed(1)}); DuckDB p95 ${duckP95[label]!.toFixed(1)} ms; answers ${agreement[label]}`);
      }
    } finally {
      closeDuckDb(duck);
    }
    await columns.close();
    return { events: size.events, foldSeconds, columnBytes: size.bytes, fileBytes: statSync(path.join(dir, 'columns.lmdb')).size, segments: size.segments, p95: out, duckP95, agreement };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Goals from the issue: ≤ 50 ms for Q1, Q2, Q4, Q5 over 30 days at 10M events; ≤ 10 ms for Q3; ≤ 200 ms for Q6. */
const GOALS_MS = [50, 50, 10, 50, 50, 200];

/** The goal: at least this many times faster than DuckDB at p95, on the same events. */
const DUCKDB_GOAL = 10;

export function questionRows(r: QuestionResults, p: QuestionParams): Row[] {
  const rows: Row[] = Object.entries(r.p95).map(([what, ms], i) => {
    const duck = r.duckP95[what]!;
    const faster = duck / ms;
    return {
      id: `questions.q${i + 1}`,
      what: `${what} (${p.days} d, ${(r.events / 1e6).toFixed(1)}M events), p95; DuckDB ${duck.toFixed(1)} ms (${faster.toFixed(1)}× faster, goal ≥ ${DUCKDB_GOAL}×); answers ${r.agreement[what]}`,
      value: `${ms.toFixed(1)} ms`,
      num: ms,
      ratio: ms / duck,
      ref: 'DuckDB',
      goal: `≤ ${GOALS_MS[i]} ms at 10M`,
      met: r.agreement[what] === 'DIFFER' ? false : p.events >= QUESTIONS_FULL.events ? ms <= GOALS_MS[i]! && faster >= DUCKDB_GOAL : undefined,
    };
  });
  rows.push({
    id: 'questions.bytesPerEvent',
    what: `column store bytes per event (${r.segments} segments)`,
    value: `${(r.columnBytes / r.events).toFixed(1)} B (file ${(r.fileBytes / r.events).toFixed(1)} B)`,
    num: r.columnBytes / r.events,
    goal: '≤ 32 B',
    met: r.columnBytes / r.events <= 32,
  });
  rows.push({ id: 'questions.fold', what: 'column fold + seal, events per second', value: `${Math.round(r.events / r.foldSeconds).toLocaleString('en-US')}/s`, num: r.events / r.foldSeconds });
  return rows;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const p = process.argv.includes('--quick') ? QUESTIONS_QUICK : QUESTIONS_FULL;
  const r = await runQuestions(p, (l) => process.stderr.write(`${l}\n`));
  const { renderTable } = await import('./report.ts');
  process.stdout.write(`${renderTable(questionRows(r, p))}\n`);
}
