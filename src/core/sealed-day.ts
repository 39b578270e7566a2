import type { DayAggregate } from './day-aggregate.ts';
import type { DaySnapshot } from './day-snapshot.ts';
import { addFigures, type DayFigures, type RangePart } from './day-view.ts';
import { HyperLogLog } from './hyperloglog.ts';
import { EXACT_USERS_PER_DAY, HLL_PRECISION } from './limits.ts';
import { NumberSet } from './number-table.ts';

/**
 * The read form of history: what a day keeps once no event can arrive for it any more, and the month rollups built
 * from those days. Plain data (typed arrays for users), written once to the store and read back through a cache.
 *
 * A sealed day drops what only exactness of later events needed (its per-session table) and keeps what reads need:
 * the scalar figures (users exact), every capped breakdown by name, and its users as exact hashes while the day is
 * small (≤ EXACT_USERS_PER_DAY, so small ranges stay exact, as they are while live) or else as the same HyperLogLog
 * the live day holds, so accuracy is exactly today's.
 */

export const SEALED_VERSION = 1;

/**
 * A month rollup keeps its users exact (the union of its days' hashes) up to as many as a day does; past it, a
 * sketch, so a long range merges registers instead of unioning hundreds of thousands of hashes (a 12-month read of
 * 2,700-user days took 32 ms as an exact union). Ranges are within 1 % by contract; single days stay exact.
 */
export const ROLLUP_EXACT_USERS = EXACT_USERS_PER_DAY;

export type Pairs = Array<[string, number]>;

/** One sealed segment of a day: `firstSeq` names it, so sealing the same live instance again overwrites it. */
export interface SealedDay {
  v: number;
  date: string;
  firstSeq: number;
  lastSeq: number;
  figures: DayFigures;
  /** breakdown name (a field of the metrics answer) -> [key, count] pairs, capped per day */
  breakdowns: Record<string, Pairs>;
  /** every user hash, when the day has at most EXACT_USERS_PER_DAY */
  userHashes?: Float64Array;
  /** HyperLogLog registers, when it has more */
  sketch?: Uint8Array;
}

/** Every sealed day of one project's calendar month, merged: a 12-month read merges ~12 of these. */
export interface SealedMonth {
  v: number;
  month: string;
  /** one entry per day with data, in date order */
  daily: DayFigures[];
  breakdowns: Record<string, Pairs>;
  userHashes?: Float64Array;
  sketch?: Uint8Array;
}

/** The sealed form of a live day. */
export function sealDay(d: DayAggregate): SealedDay {
  const asleep = d.sealedForm(); // a sleeping day seals without rebuilding its tables
  if (asleep) return asleep;
  const breakdowns: Record<string, Pairs> = {};
  for (const [name, c] of d.breakdowns()) if (c.size > 0) breakdowns[name] = c.pairs();
  const out: SealedDay = { v: SEALED_VERSION, date: d.day, firstSeq: d.firstSeq, lastSeq: d.lastSeq, figures: d.figures()[0]!, breakdowns };
  // Built from each visit's final visitor (a sketch of a live day that lost a visitor is rebuilt by its getter).
  if (d.userCount <= EXACT_USERS_PER_DAY) out.userHashes = d.userHashes();
  else out.sketch = d.sketch!.registers.slice();
  return out;
}

/**
 * The sealed form of a live day from its snapshot form, without building its tables: what a day asleep answers reads
 * with, and what it seals as. Equal to sealDay of the day the snapshot describes (hashes in the snapshot's order).
 */
export function sealedFromSnapshot(ds: DaySnapshot): SealedDay {
  const exactWanted = ds.userCount === undefined || ds.userCount <= EXACT_USERS_PER_DAY || ds.sketch?.length !== 1 << HLL_PRECISION;
  const hashes: number[] = [];
  let count = 0;
  // Visitors are walked only when their count or hashes are wanted: a large day with its count and sketch held needs
  // neither (30 such days of 137,000 visits took ~0.3 s to walk on a first read).
  if (exactWanted && ds.visitPageviews) {
    // the compact form: the day's visitors are its visits' visitors (each counted once)
    const distinct = new NumberSet();
    const visitors = ds.visits.visitors;
    for (let i = 0; i < visitors.length; i++) {
      const v = visitors[i]!;
      if (distinct.has(v)) continue;
      distinct.add(v);
      count++;
      hashes.push(v);
    }
  } else if (exactWanted) {
    const users = ds.users!;
    // entries only (keys.length === size: the key 0 among them) or a table with its slots (0 = empty, hasZero aside)
    const listForm = users.keys.length === users.size;
    if (!listForm && users.hasZero && users.zeroValue > 0) {
      count++;
      hashes.push(0);
    }
    for (let j = 0; j < users.keys.length; j++) {
      if ((!listForm && users.keys[j] === 0) || users.values[j]! <= 0) continue;
      count++;
      hashes.push(users.keys[j]!);
    }
  }
  const userCount = ds.userCount ?? count;
  const out: SealedDay = {
    v: SEALED_VERSION,
    date: ds.day,
    firstSeq: ds.firstSeq,
    lastSeq: ds.lastSeq,
    figures: { date: ds.day, users: userCount, sessions: ds.visits.size, pageviews: ds.pageviews, bounces: ds.bounces, sessionsWithPageview: ds.sessionsWithPageview, bots: ds.bots },
    breakdowns: ds.breakdowns,
  };
  if (userCount <= EXACT_USERS_PER_DAY) out.userHashes = Float64Array.from(hashes);
  else if (ds.sketch?.length === 1 << HLL_PRECISION) out.sketch = ds.sketch.slice();
  else {
    const h = new HyperLogLog();
    for (const u of hashes) h.add(u);
    out.sketch = h.registers;
  }
  return out;
}

/** Merges the sealed days of one month (any order, any number of segments per day) into its rollup. */
export function rollupMonth(month: string, days: readonly SealedDay[]): SealedMonth {
  const byDate = new Map<string, DayFigures>();
  const segments = new Map<string, SealedDay[]>();
  const sums = new Map<string, Map<string, number>>();
  let exact: NumberSet | undefined = new NumberSet();
  let sketch: HyperLogLog | undefined;
  for (const d of days) {
    const f = byDate.get(d.date);
    byDate.set(d.date, f ? addFigures(f, d.figures) : { ...d.figures });
    const of = segments.get(d.date);
    if (of) of.push(d);
    else segments.set(d.date, [d]);
    for (const [name, pairs] of Object.entries(d.breakdowns)) {
      let m = sums.get(name);
      if (!m) sums.set(name, (m = new Map()));
      for (const [k, v] of pairs) m.set(k, (m.get(k) ?? 0) + v);
    }
    if (d.sketch) {
      sketch ??= new HyperLogLog();
      sketch.merge(new HyperLogLog(d.sketch));
    } else if (d.userHashes) {
      if (exact) for (const u of d.userHashes) exact.add(u);
      if (sketch) for (const u of d.userHashes) sketch.add(u);
    }
    if (exact && (sketch || exact.size > ROLLUP_EXACT_USERS)) {
      sketch ??= new HyperLogLog();
      const s = sketch;
      exact.forEach((u) => s.add(u));
      exact = undefined;
    }
  }
  // A day sealed in several segments: its users are their union, not their sum.
  for (const [date, of] of segments) if (of.length > 1) byDate.set(date, { ...byDate.get(date)!, users: unionUsers(of) });
  const breakdowns: Record<string, Pairs> = {};
  for (const [name, m] of sums) breakdowns[name] = [...m];
  const out: SealedMonth = {
    v: SEALED_VERSION,
    month,
    daily: [...byDate.values()].sort((a, b) => (a.date < b.date ? -1 : 1)),
    breakdowns,
  };
  if (sketch) out.sketch = sketch.registers;
  else out.userHashes = exact!.toArray();
  return out;
}

/** Distinct users of several segments of one day: exact from their hashes, else a sketch merge (within 1 %). */
export function unionUsers(segments: readonly SealedDay[]): number {
  if (segments.every((d) => d.userHashes !== undefined)) {
    const union = new NumberSet();
    for (const d of segments) for (const u of d.userHashes!) union.add(u);
    return union.size;
  }
  const merged = new HyperLogLog();
  for (const d of segments) {
    if (d.sketch) merged.merge(new HyperLogLog(d.sketch));
    else if (d.userHashes) for (const u of d.userHashes) merged.add(u);
  }
  return merged.estimate();
}

/** A sealed day or month as a RangePart. */
export class SealedPart implements RangePart {
  readonly sketch: HyperLogLog | undefined;
  private readonly daily: readonly DayFigures[];
  private readonly breakdowns: Record<string, Pairs>;
  private readonly hashes: Float64Array | undefined;
  /** rough heap bytes, for the read cache's budget */
  readonly bytes: number;

  constructor(data: SealedDay | SealedMonth) {
    this.daily = 'daily' in data ? data.daily : [data.figures];
    this.breakdowns = data.breakdowns;
    this.hashes = data.userHashes;
    this.sketch = data.sketch ? new HyperLogLog(data.sketch) : undefined;
    let pairs = 0;
    for (const p of Object.values(data.breakdowns)) pairs += p.length;
    this.bytes = 200 + this.daily.length * 100 + pairs * 60 + (data.userHashes?.byteLength ?? 0) + (data.sketch?.byteLength ?? 0);
  }

  figures(): readonly DayFigures[] {
    return this.daily;
  }

  sumBreakdown(name: string, into: Map<string, number>): void {
    const pairs = this.breakdowns[name];
    if (pairs) for (const [k, v] of pairs) into.set(k, (into.get(k) ?? 0) + v);
  }

  forEachUser(fn: (hash: number) => void): void {
    const h = this.hashes;
    if (h) for (let i = 0; i < h.length; i++) fn(h[i]!);
  }
}
