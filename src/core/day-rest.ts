import { addDays } from './dates.ts';
import type { DayAggregate } from './day-aggregate.ts';
import type { AnalyticsState } from './state.ts';

/**
 * Which live days the engine may put to sleep (DayAggregate.sleep): those nobody wrote to for a while. A day of a month
 * ago takes a late event now and then; a day of today or yesterday takes traffic all day, and waking a large day costs
 * tens of ms (its tables are rebuilt from the bytes), so those must be idle longer. Idleness is counted in passes
 * (the caller runs one every REST_EVERY_MS), so this stays pure: no clock, only what passes saw.
 */

/** Passes a day of the clock's two newest dates must see it unchanged before it sleeps (~5 min at REST_EVERY_MS). */
export const RECENT_IDLE_PASSES = 60;
/** Passes an older day must see it unchanged: two whole intervals without a write (10–15 s at REST_EVERY_MS). */
export const OLDER_IDLE_PASSES = 2;
/** Dates this close to the clock's (UTC) date are recent: today and yesterday in any time zone. */
const RECENT_DATES = 2;

export class RestWatch {
  /** per awake day: its lastSeq when a pass first saw it at that sequence, and passes since */
  private readonly seen = new WeakMap<DayAggregate, { seq: number; passes: number }>();

  /**
   * One pass over the state: every awake day idle for long enough, with its lastSeq now. A day is idle for a pass when
   * its lastSeq did not move since the pass before; days handed over for sealing are left to the sealer.
   */
  due(state: AnalyticsState): Array<[DayAggregate, number]> {
    const out: Array<[DayAggregate, number]> = [];
    const recentFrom = state.maxRt > 0 ? addDays(new Date(state.maxRt).toISOString().slice(0, 10), 1 - RECENT_DATES) : '';
    for (const p of state.projects.values()) {
      for (const d of p.days.values()) {
        if (d.isAsleep || d.sealing) continue;
        const s = this.seen.get(d);
        if (s === undefined || s.seq !== d.lastSeq) {
          this.seen.set(d, { seq: d.lastSeq, passes: 0 });
          continue;
        }
        s.passes++;
        if (s.passes >= (d.day >= recentFrom ? RECENT_IDLE_PASSES : OLDER_IDLE_PASSES)) out.push([d, d.lastSeq]);
      }
    }
    return out;
  }
}
