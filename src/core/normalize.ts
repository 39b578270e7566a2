import { dayOf } from './dates.ts';
import type { EventInput } from './event-schema.ts';
import { HISTORY_FIELDS, isoMillis, KNOWN_FIELDS } from './event-schema.ts';
import { HISTORY_MIN_TS, MAX_FUTURE_MS, MAX_PAST_MS } from './limits.ts';
import type { LineItem, Scalar, StoredEvent } from './types.ts';
import { boundedMemo } from './bounded-memo.ts';

/** What the engine has worked out about the request and the event before it can be stored. */
export interface NormalizeContext {
  projectId: string;
  timezone: string;
  /** server receive time */
  now: number;
  /** traffic source and normalized referrer (from enrich/classifySource) */
  source: string;
  referrer: string;
  /** the event's sessionId, or the derived anonymous one */
  sessionId: string;
  /** from the request when the event does not say */
  device: string;
  country: string;
  /** extra page context derived from the request */
  context?: Record<string, string> | undefined;
  /** browser and OS names from the User-Agent parser, when it named them */
  browser?: string | undefined;
  os?: string | undefined;
  /** the project's `tracked_props`: their values are stamped into the record */
  trackedProps?: readonly string[] | undefined;
  /**
   * POST /projects/{id}/history: the timestamp may lie back to 2000-01-01, the record is marked `h`, and the derived
   * fields an export wrote (HISTORY_FIELDS) are taken out of the page context (the caller passed them as facts).
   */
  history?: boolean;
}

export type NormalizeResult = { ok: true; event: StoredEvent } | { ok: false; path: string; message: string };

const ISO_COUNTRY = /^[A-Za-z]{2}$/;
/**
 * Page-context fields that would keep what the privacy page says is never stored: a raw User-Agent (a history line
 * may carry one to derive device, browser and OS from) and a client address. They are read, never kept.
 */
const PRIVATE_CONTEXT = ['userAgent', 'user_agent', 'ua', 'ip', 'ipAddress', 'ip_address'];

const known = new Set<string>([...KNOWN_FIELDS, ...PRIVATE_CONTEXT]);

/** Turns a validated event into the record the log stores and the reducer folds. */
export function normalizeEvent(input: EventInput, ctx: NormalizeContext): NormalizeResult {
  const ts = eventTime(input.timestamp, ctx.now);
  if (ts === undefined) return { ok: false, path: 'timestamp', message: 'not a valid time' };
  const oldest = ctx.history ? HISTORY_MIN_TS : ctx.now - MAX_PAST_MS;
  if (ts < oldest) {
    // A clock in seconds (Unix time) reads as 1970 in milliseconds: say so rather than "in the past" (history too).
    if (typeof input.timestamp === 'number' && ts * 1000 >= oldest && ts * 1000 <= ctx.now + MAX_FUTURE_MS) {
      return { ok: false, path: 'timestamp', message: `looks like seconds since epoch (${ts}); milliseconds since epoch are expected (${ts * 1000})` };
    }
    if (ctx.history) return { ok: false, path: 'timestamp', message: 'is before 2000-01-01' };
    return { ok: false, path: 'timestamp', message: 'is more than 31 days in the past (older events: POST /projects/{id}/history)' };
  }
  if (ts > ctx.now + MAX_FUTURE_MS) return { ok: false, path: 'timestamp', message: 'is more than 5 minutes in the future' };

  const url = input.url ?? '';
  const userId = input.userId || undefined;
  const fingerprint = input.fingerprint || undefined;
  const user = userId !== undefined ? `u:${userId}` : fingerprint !== undefined ? `f:${fingerprint}` : `s:${ctx.sessionId}`;

  const out: StoredEvent = {
    t: 'e',
    p: ctx.projectId,
    ts,
    rt: ctx.now,
    day: dayOf(ts, ctx.timezone),
    event: input.event,
    url,
    path: urlPath(url),
    referrer: ctx.referrer,
    source: ctx.source,
    sessionId: ctx.sessionId,
    user,
    country: normalizeCountry(input.country) ?? ctx.country,
    device: input.device ? input.device.toLowerCase() : ctx.device,
    params: (input.eventParams ?? {}) as Record<string, Scalar>,
  };
  if (userId !== undefined) out.userId = userId;
  if (fingerprint !== undefined) out.fingerprint = fingerprint;
  if (input.items !== undefined) out.items = input.items as LineItem[];
  if (input.eventId !== undefined) out.eventId = input.eventId;
  if (ctx.browser) out.browser = ctx.browser;
  if (ctx.os) out.os = ctx.os;
  if (url.includes('utm_')) {
    const utm = utmOf(url);
    if (utm.medium) out.utmMedium = utm.medium;
    if (utm.campaign) out.utmCampaign = utm.campaign;
  }
  if (ctx.trackedProps !== undefined && ctx.trackedProps.length > 0) {
    const props = trackedValues(out.params, ctx.trackedProps);
    if (props) out.props = props;
  }
  const pageContext = pickContext(input, ctx.context, ctx.history === true);
  if (pageContext) out.ctx = pageContext;
  if (ctx.history) out.h = 1;
  return { ok: true, event: out };
}

function eventTime(t: number | string | undefined, now: number): number | undefined {
  if (t === undefined) return now;
  const ms = typeof t === 'number' ? t : isoMillis(t);
  return Number.isFinite(ms) ? ms : undefined;
}

function normalizeCountry(c: string | undefined): string | undefined {
  if (c === undefined || c === '') return undefined;
  return ISO_COUNTRY.test(c) ? c.toUpperCase() : c;
}

/**
 * Distinct URLs whose path is remembered: a site's events repeat a few hundred pages, and a WHATWG URL parse is ~1 µs
 * an event. Past this many the memo starts over, so millions of distinct URLs hold at most this many (~1 MiB).
 */
const PATH_MEMO_ENTRIES = 4_096;

/** URL path without query or fragment: pages are counted by path. */
export const urlPath: (url: string) => string = boundedMemo(PATH_MEMO_ENTRIES, (url) => {
  if (url === '') return '';
  try {
    // Bare paths go through the same parser as absolute URLs, so /café and https://x/café are one page (/caf%C3%A9).
    return new URL(url, 'http://path.invalid').pathname;
  } catch {
    return '';
  }
});

/** utm_medium and utm_campaign of a URL's query ('' when absent or unparsable). */
export function utmOf(url: string): { medium: string; campaign: string } {
  try {
    const q = new URL(url, 'http://path.invalid').searchParams;
    return { medium: q.get('utm_medium') ?? '', campaign: q.get('utm_campaign') ?? '' };
  } catch {
    return { medium: '', campaign: '' };
  }
}

/** The tracked keys present in `params`, each value as a string (null as "null"). */
function trackedValues(params: Record<string, Scalar>, tracked: readonly string[]): Record<string, string> | undefined {
  let out: Record<string, string> | undefined;
  for (const key of tracked) {
    if (!Object.hasOwn(params, key)) continue;
    // defineProperty: a "__proto__" key stays a key instead of setting the prototype.
    Object.defineProperty((out ??= {}), key, { value: String(params[key]), enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/** `revenue: true` of an export line is read by the history route (StoredEvent.rev), not kept as page context. */
const knownInHistory = new Set<string>([...KNOWN_FIELDS, ...HISTORY_FIELDS, ...PRIVATE_CONTEXT, 'revenue']);

function pickContext(input: EventInput, derived: Record<string, string> | undefined, history: boolean): Record<string, unknown> | undefined {
  let ctx: Record<string, unknown> | undefined;
  const skip = history ? knownInHistory : known;
  for (const key of Object.keys(input)) {
    if (skip.has(key)) continue;
    (ctx ??= {})[key] = (input as Record<string, unknown>)[key];
  }
  if (derived) for (const [k, v] of Object.entries(derived)) if (!(ctx && k in ctx)) (ctx ??= {})[k] = v;
  return ctx;
}
