import { addDays } from './dates.ts';
import { DayAggregate } from './day-aggregate.ts';
import type { RangePart } from './day-view.ts';
import { HyperLogLog } from './hyperloglog.ts';
import { NumberSet, type RawNumberSet } from './number-table.ts';

/**
 * A range's distinct users and breakdown sums, remembered between reads. Users: as a sketch merge for large ranges, as
 * an exact union of the parts' user hashes for ranges of at most RANGE_EXACT_HASHES. Merging a part's 64 KiB sketch costs ~50–130 µs, so a
 * 30-day read of large days spent ~4 ms merging the same sketches on every read; the exact union of a busy project's
 * 30 days (~25k hashes) cost 2–3 ms a read the same way. Every part is named by its identity and version (a live
 * day's last folded sequence; a sealed part never changes), so a remembered result is used only for exactly the parts
 * it was made of:
 * - the whole range's count, for a read of parts none of which changed since;
 * - the merge (or union) of its settled parts (every part but the live days of its two newest dates, which take
 *   today's traffic), so a dashboard re-reading a range while events arrive adds only those few days onto a copy.
 * Pure (no clock, no I/O); bounded by entry counts, so a wrong guess costs a merge, never an answer.
 */

/** Remembered merges of settled parts: 64 KiB each, so 4 MiB. */
export const SETTLED_MERGES = 64;
/** Remembered exact unions of settled parts: a table of ≤ 32,768 hashes is ≤ 512 KiB, so ≤ 8 MiB. */
export const SETTLED_UNIONS = 16;
/**
 * Remembered breakdown sums of settled parts (one map per breakdown name: a 30-day sum of capped day breakdowns holds
 * up to a few thousand names, ~100 KiB), so at most ~25 MiB; a read asks for ~15 of them.
 */
export const SETTLED_SUMS = 256;
/** Remembered whole-range counts: a number and its key (~0.5 KB for a 12-month range) each. */
export const RANGE_ESTIMATES = 1_024;
/** Live days of this many newest dates of a range are merged on every read (today and yesterday in any timezone). */
const RECENT_DATES = 2;

const partIds = new WeakMap<RangePart, number>();
let nextPartId = 1;

function partKey(part: RangePart): string {
  let id = partIds.get(part);
  if (id === undefined) partIds.set(part, (id = nextPartId++));
  return part instanceof DayAggregate ? `${id}.${part.lastSeq}` : String(id);
}

/** A Map used as a least-recently-used cache of at most `max` entries. */
function remember<T>(map: Map<string, T>, key: string, value: T, max: number): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > max) map.delete(map.keys().next().value!);
}

function recall<T>(map: Map<string, T>, key: string): T | undefined {
  const v = map.get(key);
  if (v !== undefined) {
    map.delete(key);
    map.set(key, v);
  }
  return v;
}

const settledMerges = new Map<string, Uint8Array>();
const settledSums = new Map<string, Map<string, number>>();
const settledUnions = new Map<string, RawNumberSet>();
const rangeEstimates = new Map<string, number>();

function mergeInto(target: HyperLogLog, parts: readonly RangePart[]): void {
  const add = (u: number) => target.add(u);
  for (const d of parts) {
    if (d.sketch) target.merge(d.sketch);
    else d.forEachUser(add);
  }
}

/** The parts' settled ones and the live days of their newest dates (see the file comment), with their keys. */
function split(parts: readonly RangePart[], keys: readonly string[]): { settled: RangePart[]; settledKey: string; recent: RangePart[] } {
  let newest = '';
  for (const p of parts) if (p instanceof DayAggregate && p.day > newest) newest = p.day;
  const recentFrom = newest === '' ? '' : addDays(newest, 1 - RECENT_DATES);
  const settled: RangePart[] = [];
  const settledKeys: string[] = [];
  const recent: RangePart[] = [];
  parts.forEach((p, i) => {
    if (p instanceof DayAggregate && p.day >= recentFrom) recent.push(p);
    else {
      settled.push(p);
      settledKeys.push(keys[i]!);
    }
  });
  return { settled, settledKey: settledKeys.join(','), recent };
}

/** The distinct users of `parts` by a sketch merge (within 1 %), merging only what changed since a read of the same parts. */
export function sketchedUsers(parts: readonly RangePart[]): number {
  const keys = parts.map(partKey);
  const whole = `s${keys.join(',')}`;
  const known = recall(rangeEstimates, whole);
  if (known !== undefined) return known;
  const { settled, settledKey, recent } = split(parts, keys);
  const merged = new HyperLogLog();
  if (settled.length > 0) {
    const base = recall(settledMerges, settledKey);
    if (base) merged.registers.set(base);
    else {
      mergeInto(merged, settled);
      remember(settledMerges, settledKey, merged.registers.slice(), SETTLED_MERGES);
    }
  }
  mergeInto(merged, recent);
  const estimate = merged.estimate();
  remember(rangeEstimates, whole, estimate, RANGE_ESTIMATES);
  return estimate;
}

/**
 * The exact distinct users of `parts` (none holds a sketch; `hashes` is the sum of their user counts, an upper bound
 * of the union), adding only the parts that changed since a read of the same parts onto a copy of the rest's union.
 */
export function exactUsers(parts: readonly RangePart[], hashes: number): number {
  const keys = parts.map(partKey);
  const whole = `x${keys.join(',')}`;
  const known = recall(rangeEstimates, whole);
  if (known !== undefined) return known;
  const { settled, settledKey, recent } = split(parts, keys);
  const base = settled.length > 0 ? recall(settledUnions, settledKey) : undefined;
  const union = base ? NumberSet.fromRaw({ ...base, keys: base.keys.slice() }) : new NumberSet(hashes);
  const add = (u: number) => void union.add(u);
  if (!base && settled.length > 0) {
    for (const d of settled) d.forEachUser(add);
    remember(settledUnions, settledKey, union.raw(), SETTLED_UNIONS);
  }
  for (const d of recent) d.forEachUser(add);
  remember(rangeEstimates, whole, union.size, RANGE_ESTIMATES);
  return union.size;
}

/**
 * The range's breakdown sums by name (`sumBreakdown` of every part), each adding only the parts that changed since a
 * read of the same parts onto a copy of the settled parts' sum: a 30-day read of a busy project summed the same 28
 * days' capped counters again for each of its ~15 breakdowns (~0.6 ms of a ~1.4 ms `metrics()`).
 */
export function breakdownSums(parts: readonly RangePart[]): (name: string) => Map<string, number> {
  const { settled, settledKey, recent } = split(parts, parts.map(partKey));
  return (name) => {
    let sum: Map<string, number>;
    if (settled.length === 0) sum = new Map();
    else {
      const key = `${name}\u0000${settledKey}`;
      let base = recall(settledSums, key);
      if (!base) {
        base = new Map();
        for (const part of settled) part.sumBreakdown(name, base);
        remember(settledSums, key, base, SETTLED_SUMS);
      }
      sum = new Map(base);
    }
    for (const part of recent) part.sumBreakdown(name, sum);
    return sum;
  };
}
