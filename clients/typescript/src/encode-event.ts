import {
  MAX_COUNTRY,
  MAX_DEVICE,
  MAX_EVENT_BYTES,
  MAX_EVENT_ID,
  MAX_EVENT_NAME,
  MAX_FUTURE_MS,
  MAX_ID,
  MAX_ITEMS,
  MAX_JSON_DEPTH,
  MAX_PARAM_KEY,
  MAX_PARAM_STRING,
  MAX_PARAMS,
  MAX_PAST_MS,
  MAX_PROJECT_ID,
  MAX_SOURCE_NAME,
  MAX_URL,
} from './limits.js';
import { InvalidEventError } from './types.js';

/**
 * Checks one outgoing event against the service's own rules (its src/core/event-schema.ts, json-guard.ts) and
 * returns it encoded. The service refuses a whole batch for one bad event, so every event is checked here, alone,
 * before it can share a batch with others. limits.ts is this package's copy of the service's bounds.
 */

/** The event as the client assembles it: known fields plus page context. */
export type OutgoingEvent = Record<string, unknown>;

/** Events travel as `{"events":[…]}`: the wrapper object and array take two of the service's nesting levels. */
const EVENT_MAX_DEPTH = MAX_JSON_DEPTH - 2;
const CONTROL_CHARS = /[\u0000-\u001f\u007f-\u009f]/;
/** Keys the service refuses anywhere in a body, because careless code could reach Object.prototype with them. */
const FORBIDDEN_KEYS = new Set(['__proto__', 'constructor', 'prototype']);
const ISO_8601 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})$/;

const utf8 = new TextEncoder();

/** An accepted event, ready to share a batch: its JSON and that JSON's UTF-8 size (batches stay under 1 MiB). */
export interface EncodedEvent {
  json: string;
  bytes: number;
}

export function encodeEvent(event: OutgoingEvent, now: number): EncodedEvent {
  const name = event['event'];
  if (typeof name !== 'string' || name.length === 0 || name.length > MAX_EVENT_NAME || CONTROL_CHARS.test(name)) {
    fail('event', `must be 1-${MAX_EVENT_NAME} characters without control characters`);
  }
  const url = event['url'];
  if (url === undefined) {
    if (name === 'page_view') fail('url', 'is required for page_view (in Node pass context.url)');
  } else if (typeof url !== 'string' || url.length > MAX_URL || !(url.startsWith('/') || isHttpUrl(url))) {
    fail('url', `must be an absolute http(s) URL or a path starting with /, at most ${MAX_URL} characters`);
  }
  const referrer = event['referrer'];
  if (
    referrer !== undefined &&
    (typeof referrer !== 'string' || referrer.length > MAX_URL || (referrer.length > MAX_SOURCE_NAME && !isHttpUrl(referrer)))
  ) {
    fail('referrer', `must be a URL or a source name of at most ${MAX_SOURCE_NAME} characters`);
  }
  checkString(event, 'projectId', 1, MAX_PROJECT_ID);
  checkString(event, 'sessionId', 1, MAX_ID);
  checkString(event, 'userId', 0, MAX_ID);
  checkString(event, 'fingerprint', 0, MAX_ID);
  checkString(event, 'country', 0, MAX_COUNTRY);
  checkString(event, 'device', 0, MAX_DEVICE);
  checkString(event, 'eventId', 1, MAX_EVENT_ID);
  checkTimestamp(event['timestamp'], now);
  checkParams(event['eventParams']);
  checkItems(event['items']);
  checkTree(event, 1, '');

  const json = JSON.stringify(event);
  const bytes = utf8.encode(json).length;
  if (bytes > MAX_EVENT_BYTES) fail('', `encodes to ${bytes} bytes, more than ${MAX_EVENT_BYTES}`);
  return { json, bytes };
}

function fail(path: string, message: string): never {
  throw new InvalidEventError(path, message);
}

function isHttpUrl(s: string): boolean {
  if (!/^https?:\/\//i.test(s)) return false;
  try {
    new URL(s); // URL.canParse is missing from browsers before 2023
    return true;
  } catch {
    return false;
  }
}

function checkString(event: OutgoingEvent, field: string, min: number, max: number): void {
  const v = event[field];
  if (v !== undefined && (typeof v !== 'string' || v.length < min || v.length > max)) {
    fail(field, `must be a string of ${min}-${max} characters`);
  }
}

function checkTimestamp(v: unknown, now: number): void {
  if (v === undefined) return;
  let ms: number;
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) ms = v;
  else if (typeof v === 'string' && ISO_8601.test(v)) ms = Date.parse(v);
  else return fail('timestamp', 'must be ms since epoch, an ISO-8601 date-time or a Date');
  if (!Number.isFinite(ms) || ms < now - MAX_PAST_MS || ms > now + MAX_FUTURE_MS) {
    fail('timestamp', 'must lie between 31 days ago and 5 minutes ahead');
  }
}

function isScalar(v: unknown): boolean {
  return v === null || typeof v === 'boolean' || typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v));
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function checkParams(params: unknown): void {
  if (params === undefined) return;
  if (!isPlainObject(params)) return fail('eventParams', 'must be an object');
  const keys = Object.keys(params);
  if (keys.length > MAX_PARAMS) fail('eventParams', `at most ${MAX_PARAMS} parameters`);
  for (const key of keys) {
    const path = `eventParams.${key}`;
    if (key.length === 0 || key.length > MAX_PARAM_KEY) fail(path, `keys must be 1-${MAX_PARAM_KEY} characters`);
    const v = params[key];
    if (!isScalar(v)) fail(path, 'must be a string, a finite number, a boolean or null');
    if (typeof v === 'string' && v.length > MAX_PARAM_STRING) fail(path, `at most ${MAX_PARAM_STRING} characters`);
  }
}

function checkItems(items: unknown): void {
  if (items === undefined) return;
  if (!Array.isArray(items)) return fail('items', 'must be a list');
  if (items.length > MAX_ITEMS) fail('items', `at most ${MAX_ITEMS} line items`);
  items.forEach((item: unknown, i) => {
    const path = `items.${i}`;
    if (!isPlainObject(item)) return fail(path, 'must be an object');
    const { item_id: id, price, quantity } = item;
    if (id !== undefined && (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID)) {
      fail(`${path}.item_id`, `must be a string of 1-${MAX_ID} characters`);
    }
    if (price !== undefined && !(typeof price === 'number' && Number.isFinite(price))) {
      fail(`${path}.price`, 'must be a finite number');
    }
    if (quantity !== undefined && !Number.isSafeInteger(quantity)) fail(`${path}.quantity`, 'must be an integer');
    for (const [key, v] of Object.entries(item)) if (!isScalar(v)) fail(`${path}.${key}`, 'must be a scalar');
  });
}

/** Forbidden keys and nesting depth, over the whole event including page context. */
function checkTree(value: unknown, depth: number, path: string): void {
  if (value === null || typeof value !== 'object') {
    if (typeof value === 'number' && !Number.isFinite(value)) fail(path, 'must be a finite number');
    if (typeof value === 'bigint' || typeof value === 'function' || typeof value === 'symbol') {
      fail(path, 'is not a JSON value');
    }
    return;
  }
  if (depth > EVENT_MAX_DEPTH) fail(path, `nesting deeper than ${EVENT_MAX_DEPTH} levels inside an event`);
  const entries = Array.isArray(value) ? value.entries() : Object.entries(value);
  for (const [key, v] of entries) {
    const at = path ? `${path}.${key}` : String(key);
    if (typeof key === 'string' && FORBIDDEN_KEYS.has(key)) fail(at, `key "${key}" is not allowed`);
    checkTree(v, depth + 1, at);
  }
}
