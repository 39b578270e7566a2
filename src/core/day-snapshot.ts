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
  sessions: RawNumberCounts;
  /** visitor -> visits (entries at 0 no longer count) */
  users: RawNumberCounts;
  /** each visit's visitor and first event time */
  visits: RawVisitTable;
  /** breakdown name -> pairs (see DayAggregate.breakdowns: insights, revenue and props included) */
  breakdowns: Record<string, Pairs>;
}
