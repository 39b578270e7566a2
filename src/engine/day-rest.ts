import { deserialize, serialize } from 'node:v8';
import type { DayAggregate } from '../core/day-aggregate.ts';
import { RestWatch } from '../core/day-rest.ts';
import { daySnapshot, type DaySnapshot } from '../core/snapshot.ts';
import type { AnalyticsState } from '../core/state.ts';

/**
 * Puts live days nobody writes to back to sleep (core/day-rest.ts decides which): each is encoded as its snapshot
 * form, the same bytes a snapshot writes for it, and its tables are dropped. So the heap follows the days being
 * written, not the 31-day window: a month of traffic ingested in time order holds one or two days' tables, as it does
 * after a restart. Runs in slices between requests.
 */

/**
 * How often idle days are looked for: a finished older day's tables leave the heap 1–2 s after its last event. A pass
 * looks at the awake days only (core/day-rest.ts), well under a ms for thousands of them.
 */
export const REST_EVERY_MS = 1_000;
/** Main-thread time per slice of a pass: well under the 50 ms a request may wait (one large day is ~5–15 ms). */
const REST_SLICE_MS = 8;

export class DayRest {
  private readonly watch = new RestWatch();
  private running = false;
  /** days put to sleep so far (operator figure) */
  slept = 0;

  /** `state()`: the fold's state now (a restart replaces it: a pass stops at the first slice that sees another). */
  constructor(private readonly state: () => AnalyticsState) {}

  /** One pass: the days idle long enough are encoded and put to sleep, yielding to requests between slices. */
  async pass(): Promise<number> {
    if (this.running) return 0;
    this.running = true;
    try {
      const state = this.state();
      const due = this.watch.due(state);
      let slept = 0;
      let sliceStart = performance.now();
      for (const [d, seq] of due) {
        if (performance.now() - sliceStart > REST_SLICE_MS) {
          await new Promise((resolve) => setImmediate(resolve));
          sliceStart = performance.now();
          if (this.state() !== state) break;
        }
        // written, woken or handed over for sealing since the pass began: the next pass looks again
        if (d.isAsleep || d.sealing || d.lastSeq !== seq) continue;
        sleepDay(d);
        slept++;
      }
      this.slept += slept;
      return slept;
    } finally {
      this.running = false;
    }
  }
}

/** Encodes an awake day as its snapshot bytes and puts it to sleep on them. */
export function sleepDay(d: DayAggregate): void {
  const bytes = serialize(daySnapshot(d));
  d.sleep({
    day: d.day,
    firstSeq: d.firstSeq,
    lastSeq: d.lastSeq,
    bytes,
    length: bytes.length,
    load: () => deserialize(bytes) as DaySnapshot,
    // Transferring the buffer detaches it here: its memory goes with the clone, which nothing keeps (v8.serialize
    // gives a buffer of its own, so nothing else is in it).
    release: () => void structuredClone(bytes.buffer, { transfer: [bytes.buffer] }),
  });
}
