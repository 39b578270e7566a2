import { z } from 'zod';
import { isValidDate } from './dates.ts';
import {
  MAX_COUNTRY,
  MAX_DERIVED_NAME,
  MAX_DEVICE,
  MAX_EVENT_ID,
  MAX_EVENT_NAME,
  MAX_ID,
  MAX_ITEMS,
  MAX_PARAM_KEY,
  MAX_PARAM_STRING,
  MAX_PARAMS,
  MAX_PROJECT_ID,
  MAX_SOURCE_NAME,
  MAX_URL,
} from './limits.ts';

/**
 * The one schema of an incoming event. HTTP and gRPC both hand it plain objects, so every limit is the same on
 * both faces. Fields not named here are page context: kept in the log, not aggregated.
 */

const NO_CONTROL = /^[^\u0000-\u001f\u007f-\u009f]*$/;
/** An ISO-8601 date-time; without an offset it is read as UTC (CONTRACT "Event fields": `timestamp`). */
const ISO_8601 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?$/;
const ISO_OFFSET = /(Z|[+-]\d{2}:?\d{2})$/;

/**
 * Milliseconds since epoch of an ISO-8601 date-time (NaN when it is none). Without an offset it is UTC: Date.parse
 * would read it as the server's local time, so the same event would land on different days on different servers.
 */
export function isoMillis(t: string): number {
  return Date.parse(ISO_OFFSET.test(t) ? t : `${t}Z`);
}

/** An ISO-8601 date-time whose calendar date is real and whose instant Date can hold (the timestamp rule for strings). */
function isIsoTimestamp(t: string): boolean {
  return ISO_8601.test(t) && isValidDate(t.slice(0, 10)) && Number.isFinite(isoMillis(t));
}

export function isHttpUrl(s: string): boolean {
  if (!/^https?:\/\//i.test(s)) return false;
  return URL.canParse(s);
}

const finiteNumber = z.number().refine(Number.isFinite, 'must be a finite number');
/** What an eventParams value may be; anything else (an object, an array) is refused with this message. */
const SCALAR_RULE = 'values must be a string, number, boolean or null';
const scalar = z.union([z.string().max(MAX_PARAM_STRING), finiteNumber, z.boolean(), z.null()], {
  error: (issue) =>
    issue.input !== null && typeof issue.input === 'object'
      ? `${Array.isArray(issue.input) ? 'arrays' : 'nested objects'} are not allowed in eventParams: ${SCALAR_RULE}`
      : typeof issue.input === 'number'
        ? 'must be a finite number'
        : `${SCALAR_RULE}, not ${typeof issue.input}`,
});

const eventParams = z
  .record(z.string().min(1).max(MAX_PARAM_KEY), scalar)
  .refine((o) => Object.keys(o).length <= MAX_PARAMS, `at most ${MAX_PARAMS} parameters`);

const lineItem = z.looseObject({
  item_id: z.string().min(1).max(MAX_ID).optional(),
  price: finiteNumber.optional(),
  quantity: z.number().int().optional(),
}).refine(
  (o) => Object.values(o).every((v) => v === null || ['string', 'number', 'boolean'].includes(typeof v)),
  'item fields must be scalars',
);

/** ms since epoch, or an ISO-8601 date-time whose calendar date is real (no 2026-11-31 rolling into December). */
const timestamp = z
  .union([z.number(), z.string()], { error: 'must be ms since epoch or an ISO-8601 date-time' })
  .superRefine((t, ctx) => {
    const problem =
      typeof t === 'number'
        ? Number.isInteger(t) && t >= 0
          ? undefined
          : 'must be a non-negative integer number of milliseconds'
        : !ISO_8601.test(t)
          ? 'must be ms since epoch or an ISO-8601 date-time'
          : !isIsoTimestamp(t)
            ? 'not a real date-time'
            : undefined;
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  });

export const KNOWN_FIELDS = [
  'projectId', 'sessionId', 'userId', 'url', 'referrer', 'country', 'device', 'event',
  'eventParams', 'fingerprint', 'timestamp', 'eventId', 'items',
] as const;

export const EventSchema = z
  .looseObject({
    event: z
      .string({ error: 'is required' })
      .min(1, 'must not be empty')
      .max(MAX_EVENT_NAME)
      .regex(NO_CONTROL, 'must not contain control characters'),
    url: z
      .string()
      .max(MAX_URL)
      .refine((s) => s.startsWith('/') || isHttpUrl(s), 'must be an absolute http(s) URL or a path starting with /')
      .optional(),
    projectId: z.string().min(1).max(MAX_PROJECT_ID).optional(),
    sessionId: z.string().min(1).max(MAX_ID).optional(),
    userId: z.string().max(MAX_ID).optional(),
    fingerprint: z.string().max(MAX_ID).optional(),
    referrer: z
      .string()
      .max(MAX_URL)
      .refine((s) => s.length <= MAX_SOURCE_NAME || isHttpUrl(s), `must be a URL or a source name of at most ${MAX_SOURCE_NAME} characters`)
      .optional(),
    country: z.string().max(MAX_COUNTRY).optional(),
    device: z.string().max(MAX_DEVICE).optional(),
    eventParams: eventParams.optional(),
    timestamp: timestamp.optional(),
    eventId: z.string().min(1).max(MAX_EVENT_ID).optional(),
    items: z.array(lineItem).max(MAX_ITEMS).optional(),
  })
  .superRefine((e, ctx) => {
    if (e.event === 'page_view' && e.url === undefined) {
      ctx.addIssue({ code: 'custom', path: ['url'], message: 'is required for page_view' });
    }
  });

export type EventInput = z.infer<typeof EventSchema>;

/**
 * History mode (POST /projects/{id}/history): the same event, plus what export writes. `timestamp` is required, and
 * the values the service derived at ingestion may come along, kept as given instead of derived again: `source`
 * (traffic source), `browser`, `os`. Other derived values already have their field (sessionId, country, device).
 */
export const HISTORY_FIELDS = ['source', 'browser', 'os'] as const;
export type HistoryExtras = Partial<Record<(typeof HISTORY_FIELDS)[number], string>>;

export type ParseMode = 'live' | 'history';


export interface FieldIssue {
  path: string;
  message: string;
}

export type EventParse = { ok: true; event: EventInput } | { ok: false; issues: FieldIssue[] };

export function parseEvent(raw: unknown, mode: ParseMode = 'live'): EventParse {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    return { ok: false, issues: [{ path: '', message: 'an event must be a JSON object' }] };
  }
  if (mode === 'history') {
    const issues = historyIssues(raw as Record<string, unknown>);
    const base = parseEvent(raw, 'live');
    if (issues.length === 0) return base;
    return { ok: false, issues: base.ok ? issues : [...base.issues, ...issues] };
  }
  // zod returns a copy equal in content to a valid input, so a plainly valid event can skip it.
  if (isPlainlyValid(raw as Record<string, unknown>)) return { ok: true, event: raw as EventInput };
  const r = EventSchema.safeParse(raw);
  if (r.success) return { ok: true, event: r.data };
  return {
    ok: false,
    issues: r.error.issues.map((i) => ({ path: i.path.map(String).join('.'), message: i.message })),
  };
}

/** What history mode adds to the live rules: a timestamp is required, and the derived names are short strings. */
function historyIssues(o: Record<string, unknown>): FieldIssue[] {
  const issues: FieldIssue[] = [];
  if (o.timestamp === undefined) issues.push({ path: 'timestamp', message: 'is required for history (each event counts in its own day)' });
  for (const name of HISTORY_FIELDS) {
    const v = o[name];
    if (v === undefined) continue;
    if (typeof v !== 'string' || v.length < 1 || v.length > MAX_DERIVED_NAME) {
      issues.push({ path: name, message: `must be a string of 1 to ${MAX_DERIVED_NAME} characters` });
    }
  }
  return issues;
}

/**
 * The common event (strings, an integer ms or ISO-8601 timestamp, flat eventParams, no items) checked by hand against exactly the
 * rules of EventSchema. zod took ~2 us an event, the largest single step of batch ingest (bench/pipeline.ts); this
 * takes a fraction of that. It only ever says yes to what the schema accepts: anything else, valid or not, goes to
 * zod, which gives the error messages and handles the rest (items).
 */
function isPlainlyValid(o: Record<string, unknown>): boolean {
  // an own "__proto__" key (guardJson refuses it anyway) is dropped by zod's copy: leave that to zod
  if (!isPlainObject(o) || Object.hasOwn(o, '__proto__')) return false;
  const event = o.event;
  if (typeof event !== 'string' || event.length < 1 || event.length > MAX_EVENT_NAME || !NO_CONTROL.test(event)) return false;
  const url = o.url;
  if (url === undefined) {
    if (event === 'page_view') return false;
  } else if (typeof url !== 'string' || url.length > MAX_URL || !(url.startsWith('/') || isHttpUrl(url))) return false;
  const referrer = o.referrer;
  if (referrer !== undefined) {
    if (typeof referrer !== 'string' || referrer.length > MAX_URL) return false;
    if (referrer.length > MAX_SOURCE_NAME && !isHttpUrl(referrer)) return false;
  }
  if (
    !optionalString(o.projectId, 1, MAX_PROJECT_ID) ||
    !optionalString(o.sessionId, 1, MAX_ID) ||
    !optionalString(o.userId, 0, MAX_ID) ||
    !optionalString(o.fingerprint, 0, MAX_ID) ||
    !optionalString(o.country, 0, MAX_COUNTRY) ||
    !optionalString(o.device, 0, MAX_DEVICE) ||
    !optionalString(o.eventId, 1, MAX_EVENT_ID)
  ) {
    return false;
  }
  const ts = o.timestamp;
  if (ts !== undefined && !(typeof ts === 'number' ? Number.isInteger(ts) && ts >= 0 : typeof ts === 'string' && isIsoTimestamp(ts))) return false;
  if (o.items !== undefined) return false;
  const params = o.eventParams;
  return params === undefined || isPlainParams(params);
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

function optionalString(v: unknown, min: number, max: number): boolean {
  return v === undefined || (typeof v === 'string' && v.length >= min && v.length <= max);
}

function isPlainParams(p: unknown): boolean {
  if (!isPlainObject(p)) return false;
  const keys = Object.keys(p);
  if (keys.length > MAX_PARAMS) return false;
  for (const k of keys) {
    if (k.length < 1 || k.length > MAX_PARAM_KEY || k === '__proto__') return false;
    const v = p[k];
    if (typeof v === 'string') {
      if (v.length > MAX_PARAM_STRING) return false;
    } else if (typeof v === 'number') {
      if (!Number.isFinite(v)) return false;
    } else if (typeof v !== 'boolean' && v !== null) return false;
  }
  return true;
}
