import { parseDay } from './ranges.ts';

/** Numbers, dates and names in the reader's own locale (navigator.language). */

const integer = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
const percent = new Intl.NumberFormat(undefined, { style: 'percent', maximumFractionDigits: 0 });
const shortDay = new Intl.DateTimeFormat(undefined, { day: 'numeric', month: 'short', timeZone: 'UTC' });
const longDay = new Intl.DateTimeFormat(undefined, { day: 'numeric', month: 'short', year: 'numeric', timeZone: 'UTC' });
const relative = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto', style: 'short' });
let regions: Intl.DisplayNames | undefined;
try {
  regions = new Intl.DisplayNames(undefined, { type: 'region' });
} catch {
  regions = undefined; // an old browser: codes stay codes
}

export function count(n: number): string {
  return integer.format(n);
}

export function share(part: number, whole: number): string {
  return whole > 0 ? percent.format(part / whole) : '';
}

export function day(d: string, withYear = false): string {
  return (withYear ? longDay : shortDay).format(parseDay(d));
}

export function rangeLabel(from: string, to: string): string {
  if (from === to) return day(from, true);
  const f = longDay as Intl.DateTimeFormat & { formatRange?: (a: number, b: number) => string };
  return f.formatRange ? f.formatRange(parseDay(from), parseDay(to)) : `${day(from, true)} – ${day(to, true)}`;
}

export function country(code: string): string {
  if (/^[A-Z]{2}$/.test(code) && regions) {
    try {
      return regions.of(code) ?? code;
    } catch {
      return code;
    }
  }
  return code;
}

export function money(amount: number, currency: string): string {
  try {
    return new Intl.NumberFormat(undefined, { style: 'currency', currency }).format(amount);
  } catch {
    return `${integer.format(amount)} ${currency}`;
  }
}

export function ago(ts: number, now: number): string {
  const s = Math.round((ts - now) / 1000);
  if (s > -60) return relative.format(Math.min(0, s), 'second');
  if (s > -3600) return relative.format(Math.round(s / 60), 'minute');
  if (s > -86_400) return relative.format(Math.round(s / 3600), 'hour');
  return relative.format(Math.round(s / 86_400), 'day');
}

export function timeIn(ts: number, timeZone: string): string {
  try {
    return new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short', timeZone }).format(ts);
  } catch {
    return new Date(ts).toISOString();
  }
}

/** A path for display: the URL's path and query, or the text as given when it is not a URL. */
export function pathOf(url: string): string {
  try {
    const u = new URL(url, 'http://x');
    return u.pathname + u.search;
  } catch {
    return url;
  }
}

/** A referrer as a reader recognises it: the host without www., or the text as given (a source name). */
export function hostOf(referrer: string): string {
  try {
    return new URL(referrer).hostname.replace(/^www\./, '');
  } catch {
    return referrer;
  }
}

export function capitalize(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

const twoPlaces = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2, minimumFractionDigits: 2 });
const hourOfDay = new Intl.DateTimeFormat(undefined, { hour: 'numeric', timeZone: 'UTC' });
const monthOfYear = new Intl.DateTimeFormat(undefined, { month: 'short', year: 'numeric', timeZone: 'UTC' });

export function decimal(n: number): string {
  return twoPlaces.format(n);
}

/** Seconds as "1m 05s", "2h 03m" or "42s". */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  const two = (n: number) => String(n).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)}m ${two(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${two(Math.floor((s % 3600) / 60))}m`;
}

/** The UTC midnight (or hour) a bucket key names, as a wall-clock time in the project's zone shown as UTC. */
export function bucketTime(key: string): number {
  return Date.UTC(Number(key.slice(0, 4)), Number(key.slice(5, 7)) - 1, Number(key.slice(8, 10) || 1), Number(key.slice(11, 13) || 0));
}

/** A bucket for people: "14:00"-style hours, days, "Week of Nov 16", "Nov 2026". */
export function bucketLabel(key: string, unit: 'hour' | 'day' | 'week' | 'month', long = false): string {
  const t = bucketTime(key);
  if (unit === 'hour') return long ? `${day(key.slice(0, 10))}, ${hourOfDay.format(t)}` : hourOfDay.format(t);
  if (unit === 'month') return monthOfYear.format(t);
  return day(key.slice(0, 10), long);
}
