import { recentFrom } from './dates.ts';
import type { DayAggregate } from './day-aggregate.ts';
import type { AnalyticsState } from './state.ts';

/**
 * Which live days the engine may put to sleep (DayAggregate.sleep): those nobody wrote to for a while. A day of a month
 * ago takes a late event now and then; a day of today or yesterday takes traffic all day, and waking a large day costs
 * tens of ms (its tables are rebuilt from the bytes), so those must be idle longer, and so must an older day woken
 * again soon after it slept (its need doubles). Idleness is counted in passes (the caller runs one every
 * REST_EVERY_MS), so this stays pure: no clock, only what passes saw. A pass looks at the days awake (those the state
 * lists as woken, and those it watches already), and walks every live day only now and then.
 */

/** Passes a day of the clock's two newest dates must see it unchanged before it sleeps (~5 min at REST_EVERY_MS). */
export const RECENT_IDLE_PASSES = 300;
/**
 * Passes an older day must see it unchanged: two whole intervals without a write (1–2 s at REST_EVERY_MS), so a
 * month of history sent in time order keeps a day or two awake, not the ten-odd of the last 15 s (each ~15 MB at
 * 100,000 visits).
 */
export const OLDER_IDLE_PASSES = 2;
/** An older day woken within this many passes of going to sleep (~1 min) needs twice the passes next time. */
export const REWAKE_PASSES = 60;
/** The most an older day's need doubles to (~1 min): a late event every few seconds then finds it awake. */
export const MAX_OLDER_IDLE_PASSES = 64;
/** Every this many passes (~30 s) a pass walks every live day: days awake by a path the state does not list. */
export const FULL_WALK_PASSES = 30;

interface Watched {
  /** the day's lastSeq when a pass first saw it at that sequence (-1: not yet seen) */
  seq: number;
  /** passes since */
  passes: number;
}

interface Nap {
  /** the pass that found the day due (-1 once it is seen awake again) */
  at: number;
  /** the idle passes it needs, for an older day */
  need: number;
}

export class RestWatch {
  private passes = 0;
  /** the awake days being watched */
  private awake = new Map<DayAggregate, Watched>();
  /** older days this watch found due: when, and the passes they need next time */
  private readonly naps = new WeakMap<DayAggregate, Nap>();

  /**
   * One pass over the state: every awake day idle for long enough, with its lastSeq now. A day is idle for a pass when
   * its lastSeq did not move since the pass before; days handed over for sealing are left to the sealer.
   */
  due(state: AnalyticsState): Array<[DayAggregate, number]> {
    const pass = ++this.passes;
    if (pass % FULL_WALK_PASSES === 1 || state.wokenOverflow) {
      const watched = this.awake;
      this.awake = new Map();
      for (const p of state.projects.values()) {
        for (const d of p.days.values()) {
          if (d.isAsleep || d.sealing) continue;
          const w = watched.get(d);
          if (w) this.awake.set(d, w);
          else this.watch(d, pass);
        }
      }
      state.wokenOverflow = false;
    }
    for (const d of state.woken) this.watch(d, pass);
    state.woken.clear();

    const out: Array<[DayAggregate, number]> = [];
    const recent = recentFrom(state.maxRt);
    for (const [d, w] of this.awake) {
      if (d.isAsleep || d.sealing) {
        this.awake.delete(d);
        continue;
      }
      if (w.seq !== d.lastSeq) {
        w.seq = d.lastSeq;
        w.passes = 0;
        continue;
      }
      w.passes++;
      if (d.day >= recent) {
        if (w.passes >= RECENT_IDLE_PASSES) out.push([d, d.lastSeq]);
        continue;
      }
      let nap = this.naps.get(d);
      if (w.passes < (nap?.need ?? OLDER_IDLE_PASSES)) continue;
      if (nap === undefined) this.naps.set(d, (nap = { at: pass, need: OLDER_IDLE_PASSES }));
      nap.at = pass;
      out.push([d, d.lastSeq]);
    }
    return out;
  }

  /** The passes an older day needs before it sleeps now (tests and operator figures). */
  need(d: DayAggregate): number {
    return this.naps.get(d)?.need ?? OLDER_IDLE_PASSES;
  }

  /** Watches an awake day from this pass on; one woken soon after it slept needs twice the passes next time. */
  private watch(d: DayAggregate, pass: number): void {
    this.awake.set(d, { seq: -1, passes: 0 });
    const nap = this.naps.get(d);
    if (nap === undefined || nap.at < 0) return;
    nap.need = pass - nap.at <= REWAKE_PASSES ? Math.min(nap.need * 2, MAX_OLDER_IDLE_PASSES) : OLDER_IDLE_PASSES;
    nap.at = -1;
  }
}
