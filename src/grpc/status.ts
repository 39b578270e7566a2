import { Metadata, status } from '@grpc/grpc-js';
import type { StatusObject } from '@grpc/grpc-js';
import type { EngineError, ErrorDetail, RateInfo } from '../engine/types.ts';
import { ITEM_JSON_FIELDS, PROTO_FIELD_OF } from './event-fields.ts';

/**
 * The one mapping of engine outcomes to gRPC statuses and trailing metadata. The HTTP face has its own mapping of
 * the same codes; both are exhaustive switches, so a new ErrorCode does not compile until both faces decide.
 */

/**
 * Details listed in trailers. Trailers are HTTP/2 headers, and gRPC C-core clients refuse header blocks over 8 KiB
 * by default: 10 details (≈ 3.5 KiB as base64 JSON) plus the status message stay well under it. HTTP lists them all.
 */
const MAX_REPORTED_DETAILS = 10;
/** Details also spelled out in the status message, for a human reading grpcurl output. */
const MAX_DETAILS_IN_MESSAGE = 5;
/** A detail message longer than this is cut; engine messages are one short sentence. */
const MAX_DETAIL_MESSAGE = 200;

/** A detail from the engine, or from this face's own wire checks (which know the proto field path already). */
export type WireDetail = ErrorDetail & { field?: string };

/**
 * Where a detail points in the request message, in proto terms. Engine paths name JSON fields of one event, dotted
 * (`eventParams.plan`, `items.0.price`) or as a JSON pointer (`/eventParams/__proto__`); a gRPC caller wrote
 * `events[3].event_params.plan`, `events[3].items[0].price`. A top-level name that is not a typed field came from
 * page_context (spread into the JSON event), and an item field other than item_id/price/quantity from its `extra`.
 */
export function protoFieldOf(detail: WireDetail): string {
  if (detail.field !== undefined) return detail.field;
  // Not about one event (CreateProject, a whole request): JSON and proto names agree; only list indexes differ.
  if (detail.index === undefined) return detail.path.replace(/\.(\d+)(?=\.|$)/g, '[$1]');
  const segments = (detail.path.startsWith('/') ? detail.path.split('/') : detail.path.split('.')).filter((s) => s !== '');
  let field = `events[${detail.index}]`;
  const [head, ...rest] = segments;
  if (head === undefined) return field;
  field += `.${PROTO_FIELD_OF[head] ?? `page_context.${head}`}`;
  rest.forEach((segment, i) => {
    if (/^\d+$/.test(segment)) field += `[${segment}]`;
    else if (head === 'items' && i === 1 && !ITEM_JSON_FIELDS.has(segment)) field += `.extra.${segment}`;
    else field += `.${segment}`;
  });
  return field;
}

/** `ratelimit-*` trailers, as the HTTP face sends `RateLimit-*` headers. */
export function rateMetadata(rate: RateInfo | undefined, into: Metadata = new Metadata()): Metadata {
  if (rate !== undefined) {
    into.set('ratelimit-limit', String(rate.limit));
    into.set('ratelimit-remaining', String(rate.remaining));
    into.set('ratelimit-reset', String(rate.resetSeconds));
  }
  return into;
}

function statusCodeOf(code: EngineError['code']): status {
  switch (code) {
    case 'unauthorized':
      return status.UNAUTHENTICATED;
    case 'forbidden':
      return status.PERMISSION_DENIED;
    case 'rate_limited':
    case 'quota_exceeded':
      return status.RESOURCE_EXHAUSTED;
    case 'invalid_json':
    case 'invalid_event':
    case 'invalid_request':
    case 'payload_too_large':
    case 'unsupported_media_type':
      return status.INVALID_ARGUMENT;
    case 'not_found':
      return status.NOT_FOUND;
    case 'method_not_allowed':
      return status.UNIMPLEMENTED;
    case 'conflict':
      return status.FAILED_PRECONDITION;
    case 'unavailable':
      return status.UNAVAILABLE;
    case 'internal':
      return status.INTERNAL;
    default: {
      const unreachable: never = code;
      throw new Error(`unmapped engine error code ${String(unreachable)}`);
    }
  }
}

function cut(text: string): string {
  return text.length <= MAX_DETAIL_MESSAGE ? text : `${text.slice(0, MAX_DETAIL_MESSAGE - 1)}…`;
}

/** A refusal as grpc-js sends it: status code, message naming the bad fields, and machine-readable trailers. */
export function toStatus(error: EngineError, rate?: RateInfo): StatusObject {
  const metadata = rateMetadata(rate);
  metadata.set('error-code', error.code);
  if (error.retryAfterSeconds !== undefined) {
    metadata.set('retry-after', String(Math.max(0, Math.ceil(error.retryAfterSeconds))));
  }
  let details = error.message;
  const all: WireDetail[] = error.details ?? [];
  if (all.length > 0) {
    const reported = all.slice(0, MAX_REPORTED_DETAILS).map((d) => ({
      ...(d.index === undefined ? {} : { index: d.index }),
      path: d.path,
      field: protoFieldOf(d),
      message: cut(d.message),
    }));
    metadata.set('error-details-bin', Buffer.from(JSON.stringify(reported), 'utf8'));
    const spelled = reported.slice(0, MAX_DETAILS_IN_MESSAGE).map((d) => `${d.field}: ${d.message}`);
    const more = all.length - spelled.length;
    details = `${error.message}: ${spelled.join('; ')}${more > 0 ? ` (and ${more} more)` : ''}`;
  }
  return { code: statusCodeOf(error.code), details, metadata };
}
