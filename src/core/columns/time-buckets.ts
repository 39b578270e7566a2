/**
 * Time buckets of a question in the project's timezone: `time:hour` labels an event by its local hour, the other
 * buckets follow from the event's stored day (already the local day). Hour boundaries of a day are found once per
 * (timezone, day) and kept, so a question never formats a date per event.
 */

import { addDays, eachDay, utcMidnight } from '../dates.ts';
import type { TimeDimension } from '../query/types.ts';

/** Offsets in use are multiples of 15 minutes: scanning at that step finds every local hour boundary. */
const STEP_MS = 15 * 60_000;
/** Local days lie within UTC midnight −14 h … +38 h (UTC−12 … UTC+14 and a 25-hour day). */
const SCAN_FROM_MS = -15 * 3_600_000;
const SCAN_TO_MS = 40 * 3_600_000;
/** Hour tables kept: a year of days for a few timezones. */
const MAX_CACHED_DAYS = 4_096;

export interface DayHours {
  /** starts of the day's local hours, ms relative to the day's UTC midnight, ascending */
  starts: number[];
  /** `YYYY-MM-DDTHH` of each start */
  labels: string[];
}

const formatters = new Map<string, Intl.DateTimeFormat>();
const cache = new Map<string, DayHours>();

function localLabel(ms: number, timeZone: string): string {
  let f = formatters.get(timeZone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-CA', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', hourCycle: 'h23' });
    formatters.set(timeZone, f);
  }
  const p: Record<string, string> = {};
  for (const part of f.formatToParts(ms)) p[part.type] = part.value;
  return `${p.year}-${p.month}-${p.day}T${p.hour}`;
}

/** The local hours of `day` in `timeZone`. */
export function dayHours(day: string, timeZone: string): DayHours {
  const key = `${timeZone}\u0000${day}`;
  let h = cache.get(key);
  if (h) return h;
  const base = utcMidnight(day);
  const starts: number[] = [];
  const labels: string[] = [];
  if (timeZone === 'UTC') {
    for (let i = 0; i < 24; i++) {
      starts.push(i * 3_600_000);
      labels.push(`${day}T${String(i).padStart(2, '0')}`);
    }
  } else {
    let prev = '';
    for (let off = SCAN_FROM_MS; off < SCAN_TO_MS; off += STEP_MS) {
      const label = localLabel(base + off, timeZone);
      if (label !== prev && label.startsWith(day)) {
        starts.push(off);
        labels.push(label);
      }
      prev = label;
    }
  }
  h = { starts, labels };
  if (cache.size >= MAX_CACHED_DAYS) cache.clear();
  cache.set(key, h);
  return h;
}

/** The Monday that starts the ISO week of `day`. */
export function weekOf(day: string): string {
  const dow = new Date(utcMidnight(day)).getUTCDay(); // 0 = Sunday
  return addDays(day, -((dow + 6) % 7));
}

/** The bucket label of a whole day (every bucket but the hour). */
export function dayBucket(dim: TimeDimension, day: string): string {
  return dim === 'time:day' ? day : dim === 'time:week' ? weekOf(day) : day.slice(0, 7);
}

/** Every bucket of the range, in order (rows with zeros when a time dimension is asked alone). */
export function rangeBuckets(dim: TimeDimension, from: string, to: string, timeZone: string): string[] {
  const out: string[] = [];
  for (const day of eachDay(from, to)) {
    if (dim === 'time:hour') out.push(...dayHours(day, timeZone).labels);
    else {
      const b = dayBucket(dim, day);
      if (out[out.length - 1] !== b) out.push(b);
    }
  }
  return out;
}
