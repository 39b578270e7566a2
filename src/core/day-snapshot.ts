import type { RawNumberCounts } from './number-table.ts';
import type { RawVisitTable } from './visit-table.ts';

type Pairs = [string, number][];

/** A live day as a snapshot holds it: plain data, restored by DayAggregate.restore. */
export interface DaySnapshot {
  day: string;
  firstSeq: number;
  lastSeq: number;
  pageviews: number;
  bounces: number;
  sessionsWithPageview: number;
  bots: number;
  /** each visit's visitor and first event time */
  visits: RawVisitTable;
  /**
   * The page views of each visit, in `visits` order: the form written since snapshot version 6. A day's sessions are
   * its visits (every event enters both), and its visitors' visit counts are counted from the visits, so neither
   * table is written (28 bytes a visit instead of 48). Absent in version 5, which holds the two tables below.
   */
  visitPageviews?: Uint32Array;
  /** version 5: session -> page views */
  sessions?: RawNumberCounts;
  /** version 5: visitor -> visits (entries at 0 no longer count) */
  users?: RawNumberCounts;
  /** breakdown name -> pairs (see DayAggregate.breakdowns: insights, revenue and props included) */
  breakdowns: Record<string, Pairs>;
  /**
   * Derivable, kept so a large day wakes without a pass over its users: their count, and the HyperLogLog registers
   * of a day past EXACT_USERS_PER_DAY (absent in older snapshots, and when the sketch was dropped: built at restore).
   */
  userCount?: number;
  sketch?: Uint8Array;
}
