/**
 * Range presets as calendar days in the project's timezone (YYYY-MM-DD), the way GET /metrics counts them.
 * Pure date arithmetic on UTC midnights, so no browser timezone can shift a day.
 */

export type Preset = 'today' | 'yesterday' | '7d' | '30d' | 'month' | 'lastmonth' | '12mo' | 'all' | 'custom';

export const PRESETS: ReadonlyArray<readonly [Preset, string]> = [
  ['today', 'Today'],
  ['yesterday', 'Yesterday'],
  ['7d', 'Last 7 days'],
  ['30d', 'Last 30 days'],
  ['month', 'This month'],
  ['lastmonth', 'Last month'],
  ['12mo', 'Last 12 months'],
  ['all', 'All time'],
  ['custom', 'Custom range'],
];

export const DEFAULT_PRESET = '30d' satisfies Preset;
/** GET /metrics answers at most 366 days at once. */
export const MAX_RANGE_DAYS = 366;
/** POST /query answers up to ten years: "All time" looks that far back for the project's first day. */
export const ALL_TIME_DAYS = 3653;

export interface Range {
  from: string;
  to: string;
}

const DAY_MS = 86_400_000;

export function isPreset(value: string | null): value is Preset {
  return PRESETS.some(([p]) => p === value);
}

export function parseDay(day: string): number {
  return Date.UTC(Number(day.slice(0, 4)), Number(day.slice(5, 7)) - 1, Number(day.slice(8, 10)));
}

export function formatDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

export function addDays(day: string, n: number): string {
  return formatDay(parseDay(day) + n * DAY_MS);
}

export function daysBetween(from: string, to: string): number {
  return Math.round((parseDay(to) - parseDay(from)) / DAY_MS) + 1;
}

/** Today in `timeZone`, or undefined when the browser does not know that zone. */
export function todayIn(timeZone: string, now: number = Date.now()): string | undefined {
  try {
    const parts = new Intl.DateTimeFormat('en-US', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit' }).formatToParts(now);
    const part = (type: string) => parts.find((p) => p.type === type)?.value ?? '';
    return `${part('year')}-${part('month')}-${part('day')}`;
  } catch {
    return undefined;
  }
}

/** The bucket key of `now` in `timeZone` for a chart unit (YYYY-MM-DDTHH, YYYY-MM-DD, the week's Monday, YYYY-MM). */
export function nowKey(unit: 'hour' | 'day' | 'week' | 'month', timeZone: string, now: number = Date.now()): string | undefined {
  const today = todayIn(timeZone, now);
  if (today === undefined) return undefined;
  if (unit === 'day') return today;
  if (unit === 'month') return today.slice(0, 7);
  if (unit === 'week') return addDays(today, -((new Date(parseDay(today)).getUTCDay() + 6) % 7));
  const hour = new Intl.DateTimeFormat('en-US', { timeZone, hour: '2-digit', hourCycle: 'h23' }).format(now);
  return `${today}T${hour.padStart(2, '0')}`;
}

/** The time of day now in `timeZone`, HH:MM (a running period's elapsed part), or undefined when the zone is unknown. */
export function timeIn(timeZone: string, now: number = Date.now()): string | undefined {
  try {
    const parts = new Intl.DateTimeFormat('en-US', { timeZone, hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).formatToParts(now);
    const part = (type: string) => parts.find((p) => p.type === type)?.value ?? '';
    return `${part('hour').padStart(2, '0')}:${part('minute')}`;
  } catch {
    return undefined;
  }
}

export function rangeOf(preset: Exclude<Preset, 'custom'>, today: string): Range {
  const y = Number(today.slice(0, 4));
  const m = Number(today.slice(5, 7)) - 1;
  switch (preset) {
    case 'today':
      return { from: today, to: today };
    case 'yesterday': {
      const d = addDays(today, -1);
      return { from: d, to: d };
    }
    case '7d':
      return { from: addDays(today, -6), to: today };
    case '30d':
      return { from: addDays(today, -29), to: today };
    case 'month':
      return { from: formatDay(Date.UTC(y, m, 1)), to: today };
    case 'lastmonth':
      return { from: formatDay(Date.UTC(y, m - 1, 1)), to: formatDay(Date.UTC(y, m, 0)) };
    case '12mo':
      return { from: addDays(today, -364), to: today };
    case 'all':
      return { from: addDays(today, 1 - ALL_TIME_DAYS), to: today }; // narrowed to the first day with data (figures.ts)
    default: {
      const never: never = preset;
      return never;
    }
  }
}

/** Why a custom range cannot be asked for, or undefined when it can. */
export function checkCustom(from: string, to: string): string | undefined {
  const day = /^\d{4}-\d{2}-\d{2}$/;
  if (!day.test(from) || !day.test(to)) return 'Pick both a start and an end date.';
  if (from > to) return 'The start date is after the end date.';
  if (daysBetween(from, to) > ALL_TIME_DAYS) return `A range covers at most ten years (${ALL_TIME_DAYS} days).`;
  return undefined;
}

/**
 * Which of `n` buckets get a label on the x axis: evenly spaced, at most `room` of them, the last one always.
 * One label per bucket at most, so a day is never labelled twice.
 */
export function tickIndexes(n: number, room: number): number[] {
  if (n <= 0) return [];
  const step = Math.max(1, Math.ceil(n / Math.max(1, room)));
  const out: number[] = [];
  for (let i = (n - 1) % step; i < n; i += step) out.push(i);
  return out;
}
