import { CappedCounter } from './capped-counter.ts';
import type { DayFigures, RangePart } from './day-view.ts';
import { hash53 } from './hash.ts';
import { HyperLogLog } from './hyperloglog.ts';
import { EXACT_USERS_PER_DAY } from './limits.ts';
import { NumberCounts, NumberSet } from './number-table.ts';
import type { StoredEvent } from './types.ts';

/**
 * Everything one project's day needs to answer /metrics exactly while the day is live (events may still arrive
 * for it). A session is a (sessionId, day) pair, so a session crossing midnight counts on both days and every
 * figure sums exactly over days. Once the day is sealed it is reduced to a SealedDay (sealed-day.ts).
 */
export class DayAggregate implements RangePart {
  pageviews = 0;
  /** sessions with exactly one page_view */
  bounces = 0;
  /** sessions with at least one page_view */
  sessionsWithPageview = 0;
  /** bot hits (acknowledged, not counted as traffic) */
  bots = 0;
  /** sequence of the first record folded into this instance: names its sealed segment, so re-sealing overwrites */
  firstSeq = 0;
  /** sequence of the last record folded into this instance */
  lastSeq = 0;
  /** true once the reducer has handed the day over for sealing */
  sealing = false;
  /** hash53(sessionId) -> page_views of that session on this day (typed-array table: see number-table.ts) */
  sessions = new NumberCounts();
  /** hash53(user identity) */
  users = new NumberSet();
  /** built once the day passes EXACT_USERS_PER_DAY; derivable from `users`, so never snapshotted */
  sketch: HyperLogLog | undefined;
  readonly sources = new CappedCounter();
  readonly countries = new CappedCounter();
  readonly devices = new CappedCounter();
  readonly pages = new CappedCounter();
  readonly events = new CappedCounter();

  constructor(readonly day: string) {}

  /**
   * Every capped breakdown by the name of its field in the metrics answer. Sealing, snapshots and reads go through
   * this list, so a new breakdown is one line here (and its counting in apply), with no new sealed format.
   */
  breakdowns(): Array<[string, CappedCounter]> {
    return [
      ['trafficSources', this.sources],
      ['countries', this.countries],
      ['devices', this.devices],
      ['pages', this.pages],
      ['events', this.events],
    ];
  }

  apply(e: StoredEvent): void {
    this.events.add(e.event);
    const isPageview = e.event === 'page_view';
    if (isPageview) {
      this.pageviews++;
      this.pages.add(e.path || '/');
    }

    const u = hash53(e.user);
    if (this.users.add(u)) {
      if (this.sketch) this.sketch.add(u);
      else if (this.users.size > EXACT_USERS_PER_DAY) this.buildSketch();
    }

    const s = hash53(e.sessionId);
    const pv = this.sessions.get(s); // -1: the session's first event of the day
    if (pv < 0) {
      // The session's first event of the day decides its source, country and device.
      this.sources.add(e.source);
      this.countries.add(e.country);
      this.devices.add(e.device);
    }
    if (isPageview) {
      const next = (pv < 0 ? 0 : pv) + 1;
      this.sessions.set(s, next);
      if (next === 1) {
        this.sessionsWithPageview++;
        this.bounces++;
      } else if (next === 2) {
        this.bounces--;
      }
    } else if (pv < 0) {
      this.sessions.set(s, 0);
    }
  }

  buildSketch(): void {
    const h = new HyperLogLog();
    this.users.forEach((u) => h.add(u));
    this.sketch = h;
  }

  // RangePart: a live day read directly.

  figures(): DayFigures[] {
    return [
      {
        date: this.day,
        users: this.users.size,
        sessions: this.sessions.size,
        pageviews: this.pageviews,
        bounces: this.bounces,
        sessionsWithPageview: this.sessionsWithPageview,
        bots: this.bots,
      },
    ];
  }

  sumBreakdown(name: string, into: Map<string, number>): void {
    for (const [n, c] of this.breakdowns()) if (n === name) c.sumInto(into);
  }

  forEachUser(fn: (hash: number) => void): void {
    this.users.forEach(fn);
  }
}

export function formatRate(numerator: number, denominator: number): string {
  if (denominator === 0) return '0.0%';
  return `${((numerator / denominator) * 100).toFixed(1)}%`;
}
