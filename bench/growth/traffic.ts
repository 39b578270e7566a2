import type { StoredEvent } from '../../src/core/types.ts';
import { COUNTRIES, DEVICES, PATHS, SITE, SOURCES, rng } from '../state/generate-events.ts';

/**
 * The growth benches' traffic: N events over D days for P projects with Zipf(1) traffic, in receive-time order (a
 * day's sessions start in time order), sessions of ~3.3 events, an eventId on every event.
 */

const DAY_MS = 86_400_000;
/** Mean events per session ≈ 3.3, as in bench/state. */
const MEAN_EXTRA_EVENTS = 2.3;

export interface TrafficArgs {
  events: number;
  days: number;
  /** the last day of traffic (UTC, YYYY-MM-DD) */
  lastDay: string;
}

/** Zipf(1) over `n` ranks: cumulative weights for a binary search. */
function zipf(n: number): Float64Array {
  const c = new Float64Array(n);
  let s = 0;
  for (let i = 0; i < n; i++) c[i] = s += 1 / (i + 1);
  for (let i = 0; i < n; i++) c[i]! /= s;
  return c;
}

/** Each project's expected share of the events (ids[i] is rank i + 1): what traffic's picks converge to. */
export function zipfShares(n: number): Float64Array {
  const c = zipf(n);
  return c.map((x, i) => x - (i === 0 ? 0 : c[i - 1]!));
}

function pick(c: Float64Array, x: number): number {
  let lo = 0;
  let hi = c.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (c[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Each path's URL, built once (the traffic's strings are shared, as the enricher would intern them). */
const URLS = PATHS.map((p) => SITE + p);
const SITE_REFERRER = `${SITE}/`;

export function* traffic(a: TrafficArgs, ids: string[]): Generator<StoredEvent> {
  const rand = rng(1234);
  const weights = zipf(ids.length);
  const first = Date.parse(`${a.lastDay}T00:00:00Z`) - (a.days - 1) * DAY_MS;
  let made = 0;
  let sessions = 0;
  for (let d = 0; d < a.days; d++) {
    const target = Math.round(((d + 1) * a.events) / a.days);
    // A day's sessions start in time order, so receive times only move forward (as the log would have them).
    const starts: number[] = [];
    let planned = made;
    const counts: number[] = [];
    while (planned < target) {
      const n = Math.min(target - planned, 1 + Math.floor(-Math.log(1 - rand()) * MEAN_EXTRA_EVENTS));
      counts.push(n);
      planned += n;
      starts.push(first + d * DAY_MS + Math.floor(rand() * (DAY_MS - 600_000)));
    }
    // Numeric order (a Float64Array sorts by value, faster than a comparator over boxed numbers).
    const sorted = Float64Array.from(starts).sort();
    // The day's date once, not per event: an event's own date differs only past midnight (a session running over).
    const dayStart = first + d * DAY_MS;
    const dayEnd = dayStart + DAY_MS;
    const date = new Date(dayStart).toISOString().slice(0, 10);
    for (let s = 0; s < counts.length; s++) {
      const p = ids[pick(weights, rand())]!;
      const sessionId = `s${(sessions++).toString(36)}`;
      const user = `s:${sessionId}`;
      const [referrer, source] = SOURCES[Math.floor(rand() * SOURCES.length)]!;
      const country = COUNTRIES[Math.floor(rand() ** 2 * COUNTRIES.length)]!;
      const device = DEVICES[Math.floor(rand() * DEVICES.length)]!;
      let ts = sorted[s]!;
      for (let k = 0; k < counts[s]!; k++) {
        const at = Math.floor(rand() ** 1.5 * PATHS.length);
        yield {
          t: 'e', p, ts, rt: ts + 150, day: ts < dayEnd ? date : new Date(ts).toISOString().slice(0, 10), event: k === 0 || rand() < 0.8 ? 'page_view' : 'click',
          url: URLS[at]!, path: PATHS[at]!, referrer: k === 0 ? referrer : SITE_REFERRER, source: k === 0 ? source : 'Direct', sessionId,
          user, country, device, params: {}, eventId: `${(made + k).toString(36)}`,
        };
        ts += 1000;
      }
      made += counts[s]!;
    }
  }
}
