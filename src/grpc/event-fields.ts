/**
 * JSON field names of the Event message's typed fields, and the proto field each arrives in. Page context is
 * spread beside these in the JSON event, so its keys must not collide with them, and an engine error path whose
 * first segment is not listed here points into page_context.
 */
export const PROTO_FIELD_OF: Readonly<Record<string, string>> = Object.freeze({
  projectId: 'project_id',
  sessionId: 'session_id',
  userId: 'user_id',
  url: 'url',
  referrer: 'referrer',
  country: 'country',
  device: 'device',
  event: 'event',
  eventParams: 'event_params',
  fingerprint: 'fingerprint',
  timestamp: 'timestamp',
  eventId: 'event_id',
  items: 'items',
});

export const EVENT_JSON_FIELDS: ReadonlySet<string> = new Set(Object.keys(PROTO_FIELD_OF));

/** Fields of the Item message that are not spread from `extra`. */
export const ITEM_JSON_FIELDS: ReadonlySet<string> = new Set(['item_id', 'price', 'quantity']);
