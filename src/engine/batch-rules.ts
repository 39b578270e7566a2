import { parseEvent, type EventInput, type ParseMode } from '../core/event-schema.ts';
import { guardJson } from '../core/json-guard.ts';
import { MAX_BATCH_EVENTS, MAX_EVENT_BYTES } from '../core/limits.ts';
import { failure as fail, type ErrorDetail, type Failure, type RateInfo } from './types.ts';

/**
 * The rules a batch of events meets on POST /analytics and POST /projects/{id}/history alike: its size, each event's
 * shape, the all-or-nothing refusal of a batch with a bad event, and the 503 of a write storage did not take.
 */

/** 1 to MAX_BATCH_EVENTS events (undefined = the size is fine). */
export function batchSizeRefusal(events: readonly unknown[], rate: RateInfo): Failure | undefined {
  if (events.length === 0) return fail('invalid_request', 'the batch is empty: send 1 to 500 events', {}, rate);
  if (events.length > MAX_BATCH_EVENTS) {
    return fail('payload_too_large', `a batch holds at most ${MAX_BATCH_EVENTS} events (got ${events.length})`, {}, rate);
  }
  return undefined;
}

/**
 * One event of a batch: safe JSON, at most MAX_EVENT_BYTES encoded, the event schema; problems go to `details`.
 * `guarded`: the body it came from passed guardJson whole (a body is checked to a depth that bounds each event's).
 */
export function readEvent(raw: unknown, index: number, mode: ParseMode, details: ErrorDetail[], guarded = false): EventInput | undefined {
  const guard = guarded ? ({ ok: true } as const) : guardJson(raw);
  if (!guard.ok) {
    details.push({ index, path: guard.path, message: guard.message });
    return undefined;
  }
  // the exact size only when the cheap bound says it may be over (an event is ~200 bytes; encoding it is ~1.5 µs)
  const bytes = encodedBytesBound(raw) <= MAX_EVENT_BYTES ? 0 : Buffer.byteLength(JSON.stringify(raw) ?? '');
  if (bytes > MAX_EVENT_BYTES) {
    details.push({ index, path: '', message: `an event is at most ${MAX_EVENT_BYTES} bytes encoded (got ${bytes})` });
    return undefined;
  }
  const parsed = parseEvent(raw, mode);
  if (!parsed.ok) {
    for (const issue of parsed.issues) details.push({ index, path: issue.path, message: issue.message });
    return undefined;
  }
  return parsed.event;
}

/** The longest a number is written by JSON.stringify (-2.2250738585072014e-308). */
const MAX_NUMBER_CHARS = 24;
/** A UTF-16 unit is written as at most 3 UTF-8 bytes, or escaped as 6 (\u001f). */
const MAX_BYTES_PER_UNIT = 6;

/**
 * At least the UTF-8 bytes of JSON.stringify(value), from string lengths alone (no encoding, no scan of characters);
 * Infinity for anything but JSON's own values in plain objects and arrays (a toJSON, a bigint: encoded exactly).
 * The value passed guardJson first, so its depth is bounded.
 */
function encodedBytesBound(value: unknown): number {
  switch (typeof value) {
    case 'string':
      return 2 + MAX_BYTES_PER_UNIT * value.length;
    case 'number':
      return MAX_NUMBER_CHARS;
    case 'boolean':
      return 5;
    case 'undefined':
      return 0;
    case 'object': {
      if (value === null) return 4;
      let n = 2;
      if (Array.isArray(value)) {
        for (const v of value) n += 1 + Math.max(4, encodedBytesBound(v)); // undefined is written as null
        return n;
      }
      const proto: unknown = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return Infinity;
      for (const k in value) n += 4 + MAX_BYTES_PER_UNIT * k.length + encodedBytesBound((value as Record<string, unknown>)[k]);
      return n;
    }
    default:
      return Infinity;
  }
}

/** A batch with any bad event stores nothing, and lists every problem. */
export function invalidEvents(details: ErrorDetail[], total: number, rate: RateInfo): Failure {
  return fail('invalid_event', `${new Set(details.map((d) => d.index)).size} of ${total} events are invalid; nothing was stored`, { details }, rate);
}

/** Storage did not take the batch's append. */
export function notStored(rate: RateInfo): Failure {
  return fail('unavailable', 'storage is not accepting writes; nothing was stored', { retryAfterSeconds: 1 }, rate);
}
