import { fromBinary } from '@bufbuild/protobuf';
import type { DescMessage, JsonObject, MessageShape } from '@bufbuild/protobuf';
import type {
  CreateKeyRequest,
  CreateProjectRequest,
  RateLimit,
  UpdateProjectRequest,
  Event,
  GetMetricsRequest,
  GetRealtimeRequest,
  Item,
  ParamValue,
} from '../gen/analytics/v1/analytics_pb.ts';
import { failure, type Failure, type MetricsQuery, type RealtimeQuery } from '../engine/types.ts';
import { EVENT_JSON_FIELDS, ITEM_JSON_FIELDS } from './event-fields.ts';
import type { WireDetail } from './status.ts';

/**
 * Request messages → the plain objects an HTTP caller would send. The engine validates those with its one schema,
 * so every rule and limit is the HTTP one. A field is set only when the message carries it: an absent proto3
 * `optional` stays absent, and the engine applies the same default as for a missing JSON field.
 *
 * The only refusals made here are ones JSON cannot express (a ParamValue that sets nothing, a page-context key
 * that collides with a typed field); they read like the engine's own, with index and field.
 */

export type Converted<T> = { ok: true; value: T } | Failure;

type Plain = Record<string, unknown>;

/**
 * Sets a property as JSON.parse would: `__proto__` becomes an own data property instead of replacing the
 * prototype, so the engine sees (and refuses) it exactly as it does over HTTP.
 */
function setOwn(target: Plain, key: string, value: unknown): void {
  if (key === '__proto__') {
    Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
  } else {
    target[key] = value;
  }
}

/** Bytes → message. Garbage is the caller's fault (INVALID_ARGUMENT), never an exception in a handler. */
export function decode<S extends DescMessage>(schema: S, bytes: Uint8Array): Converted<MessageShape<S>> {
  try {
    return { ok: true, value: fromBinary(schema, bytes) };
  } catch (err) {
    const reason = err instanceof Error ? err.message : 'undecodable';
    return failure('invalid_request', `request is not a valid ${schema.typeName} message (${reason})`);
  }
}

class WireError {
  constructor(readonly detail: WireDetail) {}
}

function paramValue(value: ParamValue, index: number, path: string, field: string): string | number | boolean | null {
  switch (value.kind.case) {
    case 'stringValue':
    case 'numberValue':
    case 'boolValue':
      return value.kind.value;
    case 'nullValue':
      return null;
    case undefined:
      throw new WireError({
        index,
        path,
        field,
        message: 'ParamValue must set one of string_value, number_value, bool_value, null_value',
      });
    default: {
      const unreachable: never = value.kind;
      throw new Error(`unknown ParamValue kind ${JSON.stringify(unreachable)}`);
    }
  }
}

function params(map: Record<string, ParamValue>, index: number, path: string, field: string): Plain {
  const out: Plain = {};
  for (const key of Object.keys(map)) {
    const value = map[key];
    if (value !== undefined) setOwn(out, key, paramValue(value, index, `${path}.${key}`, `${field}.${key}`));
  }
  return out;
}

function item(it: Item, index: number, position: number): Plain {
  const out: Plain = {};
  if (it.itemId !== undefined) out.item_id = it.itemId;
  if (it.price !== undefined) out.price = it.price;
  if (it.quantity !== undefined) out.quantity = it.quantity;
  const field = `events[${index}].items[${position}].extra`;
  const extra = params(it.extra, index, `items.${position}`, field);
  for (const key of Object.keys(extra)) {
    if (ITEM_JSON_FIELDS.has(key)) {
      throw new WireError({
        index,
        path: `items.${position}.${key}`,
        field: `${field}.${key}`,
        message: `"${key}" is a field of Item; set it there, not in extra`,
      });
    }
    setOwn(out, key, extra[key]);
  }
  return out;
}

function spreadContext(out: Plain, context: JsonObject, index: number): void {
  for (const key of Object.keys(context)) {
    if (EVENT_JSON_FIELDS.has(key)) {
      throw new WireError({
        index,
        path: key,
        field: `events[${index}].page_context.${key}`,
        message: `"${key}" is a field of Event; set it there, not in page_context`,
      });
    }
    setOwn(out, key, context[key]);
  }
}

function event(e: Event, index: number): Plain {
  const out: Plain = {};
  if (e.projectId !== undefined) out.projectId = e.projectId;
  if (e.sessionId !== undefined) out.sessionId = e.sessionId;
  if (e.userId !== undefined) out.userId = e.userId;
  if (e.url !== undefined) out.url = e.url;
  if (e.referrer !== undefined) out.referrer = e.referrer;
  if (e.country !== undefined) out.country = e.country;
  if (e.device !== undefined) out.device = e.device;
  if (e.event !== undefined) out.event = e.event;
  // A map cannot be told apart from an empty one; the engine treats a missing eventParams as {} anyway.
  if (Object.keys(e.eventParams).length > 0) {
    out.eventParams = params(e.eventParams, index, 'eventParams', `events[${index}].event_params`);
  }
  if (e.fingerprint !== undefined) out.fingerprint = e.fingerprint;
  switch (e.timestamp.case) {
    case 'timestampMs':
      // Exact up to 2^53 ms (year 287396); anything that large is refused by the engine's time window anyway.
      out.timestamp = Number(e.timestamp.value);
      break;
    case 'timestampIso':
      out.timestamp = e.timestamp.value;
      break;
    case undefined:
      break;
    default: {
      const unreachable: never = e.timestamp;
      throw new Error(`unknown timestamp case ${JSON.stringify(unreachable)}`);
    }
  }
  if (e.eventId !== undefined) out.eventId = e.eventId;
  if (e.items.length > 0) out.items = e.items.map((it, position) => item(it, index, position));
  if (e.pageContext !== undefined) spreadContext(out, e.pageContext, index);
  return out;
}

/** A batch of Event messages → the JSON events of `POST /analytics` `{ "events": [...] }`. */
export function eventsToPlain(events: readonly Event[]): Converted<Plain[]> {
  try {
    return { ok: true, value: events.map(event) };
  } catch (err) {
    if (!(err instanceof WireError)) throw err;
    return failure('invalid_event', 'invalid event in batch', { details: [err.detail] });
  }
}

/** GetMetricsRequest → the query string of `GET /metrics`. */
export function metricsQuery(req: GetMetricsRequest): MetricsQuery {
  const query: MetricsQuery = {};
  if (req.date !== undefined) query.date = req.date;
  if (req.from !== undefined) query.from = req.from;
  if (req.to !== undefined) query.to = req.to;
  if (req.projectId !== undefined) query.projectId = req.projectId;
  if (req.compare !== undefined) query.compare = req.compare;
  return query;
}

/** GetRealtimeRequest → the query string of `GET /metrics/realtime`. */
export function realtimeQuery(req: GetRealtimeRequest): RealtimeQuery {
  return req.projectId !== undefined ? { projectId: req.projectId } : {};
}

/** UpdateProjectRequest → the body of `PATCH /projects/{id}`: only the fields that are set. */
export function updateProjectBody(req: UpdateProjectRequest): Plain {
  const body: Plain = {};
  if (req.name !== undefined) body.name = req.name;
  if (req.allowedOrigins !== undefined) body.allowed_origins = [...req.allowedOrigins.values];
  if (req.allowedReferrers !== undefined) body.allowed_referrers = [...req.allowedReferrers.values];
  if (req.monthlyQuota !== undefined) body.monthly_quota = Number(req.monthlyQuota);
  if (req.trackedProps !== undefined) body.tracked_props = [...req.trackedProps.values];
  if (req.rateLimit !== undefined) body.rate_limit = rateLimitBody(req.rateLimit);
  if (req.domain !== undefined) body.domain = req.domain === '' ? null : req.domain;
  return body;
}

/** CreateKeyRequest → the body of `POST /projects/{id}/keys`. */
export function createKeyBody(req: CreateKeyRequest): Plain {
  const body: Plain = { type: req.type };
  if (req.expiresAt !== undefined) body.expires_at = req.expiresAt;
  return body;
}

function rateLimitBody(r: RateLimit): Plain {
  const rate: Plain = {};
  if (r.perKey !== undefined) rate.per_key = r.perKey;
  if (r.burstPerKey !== undefined) rate.burst_per_key = r.burstPerKey;
  if (r.perIp !== undefined) rate.per_ip = r.perIp;
  if (r.burstPerIp !== undefined) rate.burst_per_ip = r.burstPerIp;
  return rate;
}

/** CreateProjectRequest → the body of `POST /projects`. Repeated fields are always present (absent = empty). */
export function createProjectBody(req: CreateProjectRequest): Plain {
  const body: Plain = { allowed_origins: [...req.allowedOrigins], allowed_referrers: [...req.allowedReferrers] };
  if (req.name !== undefined) body.name = req.name;
  if (req.timezone !== undefined) body.timezone = req.timezone;
  if (req.monthlyQuota !== undefined) body.monthly_quota = Number(req.monthlyQuota);
  if (req.trackedProps.length > 0) body.tracked_props = [...req.trackedProps];
  if (req.domain !== undefined) body.domain = req.domain;
  if (req.rateLimit !== undefined) {
    const r = req.rateLimit;
    const rate: Plain = {};
    if (r.perKey !== undefined) rate.per_key = r.perKey;
    if (r.burstPerKey !== undefined) rate.burst_per_key = r.burstPerKey;
    if (r.perIp !== undefined) rate.per_ip = r.perIp;
    if (r.burstPerIp !== undefined) rate.burst_per_ip = r.burstPerIp;
    body.rate_limit = rate;
  }
  return body;
}
