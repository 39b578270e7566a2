import type { HyperLogLog } from './hyperloglog.ts';

/**
 * What a range read needs from one piece of history, wherever it lives: a live day in the heap, a sealed day or a
 * sealed month read from the store. metrics() only sees this interface, so live, sealed and mixed ranges give the
 * same answers by construction.
 */

/** The scalar figures of one day. */
export interface DayFigures {
  date: string;
  /** exact distinct users of the day */
  users: number;
  sessions: number;
  pageviews: number;
  /** sessions with exactly one page_view */
  bounces: number;
  /** sessions with at least one page_view */
  sessionsWithPageview: number;
  bots: number;
}

/** One piece of a range: a day (live or sealed) or a sealed month. */
export interface RangePart {
  /** one entry per day the part covers that has data */
  figures(): readonly DayFigures[];
  /** adds the counts of the breakdown called `name` (a field of the metrics answer) into `into` */
  sumBreakdown(name: string, into: Map<string, number>): void;
  /** the part's distinct users as a sketch, once it is too large to keep exactly */
  readonly sketch: HyperLogLog | undefined;
  /** every user hash of the part, when `sketch` is undefined (a part with a sketch may still have them) */
  forEachUser(fn: (hash: number) => void): void;
}

/** Live days of a project by date (only `firstSeq` matters to the sealed side). */
export type LiveDays = ReadonlyMap<string, { firstSeq: number }>;

/**
 * Sealed history of every project, read through the store. `parts` answers the sealed pieces of [from, to] that are
 * not live: a segment whose live instance is still in `live` (written, not yet dropped) is read from the heap only,
 * so nothing is counted twice.
 */
export interface SealedSource {
  parts(projectId: string, from: string, to: string, live: LiveDays): RangePart[];
}

/**
 * Two parts of one day's figures added: the live day and a sealed segment of the same date, or two sealed segments
 * (events that arrived after the day was sealed, only possible when the server clock jumped back further than the seal
 * margin, or history imported after the day was sealed). Counts add; users add here too, and readers that hold the
 * parts replace a day's users with the union of its parts' users (metrics headline, month rollups).
 */
export function addFigures(a: DayFigures, b: DayFigures): DayFigures {
  return {
    date: a.date,
    users: a.users + b.users,
    sessions: a.sessions + b.sessions,
    pageviews: a.pageviews + b.pageviews,
    bounces: a.bounces + b.bounces,
    sessionsWithPageview: a.sessionsWithPageview + b.sessionsWithPageview,
    bots: a.bots + b.bots,
  };
}
