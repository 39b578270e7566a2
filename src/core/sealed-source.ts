import { addDays } from './dates.ts';
import type { LiveDays, RangePart, SealedSource } from './day-view.ts';

/**
 * Which sealed pieces answer a range: a month rollup for every whole calendar month inside the range (so a 12-month
 * read merges about a dozen items, not 365 days), sealed days for the rest. The store supplies the lookups; this
 * choice is pure, so the engine's LMDB store and the property tests read history the same way.
 */

export interface SealedSegment {
  date: string;
  /** the segment's name: the first sequence folded into the live day it was sealed from */
  firstSeq: number;
  part: RangePart;
}

export interface SealedLookup {
  /** the rollup of a calendar month ('YYYY-MM'), once every day of it is sealed */
  month(projectId: string, month: string): RangePart | undefined;
  /** every sealed segment of the days in [from, to], in date order */
  days(projectId: string, from: string, to: string): SealedSegment[];
}

export function sealedSource(lookup: SealedLookup): SealedSource {
  return {
    parts(projectId, from, to, live) {
      return sealedParts(lookup, projectId, from, to, live);
    },
  };
}

function sealedParts(
  lookup: SealedLookup,
  projectId: string,
  from: string,
  to: string,
  live: LiveDays,
): RangePart[] {
  const out: RangePart[] = [];
  let cursor = from;
  while (cursor <= to) {
    const month = cursor.slice(0, 7);
    const last = monthEnd(month);
    const end = last < to ? last : to;
    // A rollup answers a whole month unless one of its days is live (just sealed and not dropped yet, or a late
    // segment): then its days are read one by one so nothing is counted twice.
    if (cursor.endsWith('-01') && last <= to && !hasLiveDayIn(live, month)) {
      const rollup = lookup.month(projectId, month);
      if (rollup) {
        out.push(rollup);
        cursor = addDays(last, 1);
        continue;
      }
    }
    for (const s of lookup.days(projectId, cursor, end)) if (live.get(s.date)?.firstSeq !== s.firstSeq) out.push(s.part);
    cursor = addDays(end, 1);
  }
  return out;
}

function hasLiveDayIn(live: LiveDays, month: string): boolean {
  for (const date of live.keys()) if (date.startsWith(month)) return true;
  return false;
}

/** The last day of a calendar month 'YYYY-MM'. */
export function monthEnd(month: string): string {
  const y = Number(month.slice(0, 4));
  const m = Number(month.slice(5, 7));
  return new Date(Date.UTC(y, m, 0)).toISOString().slice(0, 10);
}
