import { performance } from 'node:perf_hooks';
import { dayOf } from '../src/core/dates.ts';
import { parseEvent, type EventInput } from '../src/core/event-schema.ts';
import { guardJson } from '../src/core/json-guard.ts';
import { normalizeEvent } from '../src/core/normalize.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { AnalyticsState, apply } from '../src/core/state.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';
import type { StoredEvent } from '../src/core/types.ts';
import { classifySource } from '../src/enrich/index.ts';
import { TRACKED_PROPS, wireEvents } from './state/generate-events.ts';

/**
 * The CPU cost of each step the engine runs per event of a batch, in-process and single-threaded, on the same events
 * the HTTP batch bench sends. Their sum is the ceiling of batch ingest on one core before HTTP, LMDB and the event
 * loop take their share; it is what bounds `http.batch` against the raw-put floor.
 */

export interface StageCost {
  stage: string;
  usPerEvent: number;
}

export interface PipelineResult {
  stages: StageCost[];
  totalUsPerEvent: number;
  /** 1e6 / total: events/s one core could validate, normalize and fold, with no HTTP and no storage */
  ceilingEventsPerSec: number;
}

const BATCH = 100;

export function benchPipeline(batches: number): PipelineResult {
  const bodies = Array.from({ length: 20 }, (_, i) =>
    JSON.stringify(wireEvents(BATCH, 100 + i)).replaceAll('__N__', () => Math.random().toString(36).slice(2)),
  );
  const n = batches * BATCH;
  const now = Date.now();
  const state = new AnalyticsState();
  const dir = mkdtempSync(path.join(tmpdir(), 'analytics-pipeline-'));
  const store = LogStore.open(dir, 'commit');
  const ids = store.openRememberedIds();
  const totals = new Map<string, number>();
  const time = <T>(stage: string, fn: () => T): T => {
    const t = performance.now();
    const out = fn();
    totals.set(stage, (totals.get(stage) ?? 0) + (performance.now() - t));
    return out;
  };
  let seq = 0;
  for (let round = 0; round < 2; round++) {
    if (round === 1) totals.clear(); // the first round warms up the JIT
    for (let b = 0; b < batches; b++) {
      const text = bodies[b % bodies.length]!;
      const events = time('JSON.parse (HTTP face)', () => JSON.parse(text) as Record<string, unknown>[]);
      time('guardJson of the body (HTTP face)', () => guardJson(events));
      time('guardJson + encoded size per event (engine)', () => {
        for (const e of events) {
          guardJson(e);
          Buffer.byteLength(JSON.stringify(e));
        }
      });
      const inputs = time('parseEvent (zod schema)', () => events.map((e) => (parseEvent(e) as { ok: true; event: EventInput }).event));
      const sources = time('classifySource (enrich)', () => inputs.map((e) => classifySource(e.referrer ?? '', e.url ?? '')));
      time('remembered eventId lookup (table, then LMDB on a hit)', () => {
        for (const e of inputs) ids.has('p_bench', e.eventId!, now);
      });
      const records = time('normalizeEvent', () =>
        inputs.map((e, i) => {
          const r = normalizeEvent(e, {
            projectId: 'p_bench',
            timezone: 'UTC',
            now,
            source: sources[i]!.source,
            referrer: sources[i]!.referrer,
            sessionId: e.sessionId!,
            device: 'desktop',
            country: 'DE',
            browser: 'Chrome',
            os: 'Windows',
            trackedProps: TRACKED_PROPS,
          });
          return (r as { ok: true; event: StoredEvent }).event;
        }),
      );
      time('dayOf (receive day)', () => dayOf(now, 'UTC'));
      time('apply (reducer)', () => {
        for (const r of records) apply(state, ++seq, r);
      });
    }
  }
  void store.close().then(() => rmSync(dir, { recursive: true, force: true }));
  const stages = [...totals].map(([stage, ms]) => ({ stage, usPerEvent: (ms * 1000) / n }));
  const totalUsPerEvent = stages.reduce((s, x) => s + x.usPerEvent, 0);
  return { stages, totalUsPerEvent, ceilingEventsPerSec: 1e6 / totalUsPerEvent };
}
