/**
 * The service's bounds that the client checks before sending, copied so the package imports nothing from outside
 * itself. The service's test suite (test/client-package.test.ts) fails when a value here differs from the
 * service's src/core/limits.ts, so the copy cannot drift.
 */

/** Events per batch. */
export const MAX_BATCH_EVENTS = 500;
/** One encoded event. */
export const MAX_EVENT_BYTES = 32 * 1024;
/** Request body. */
export const MAX_BODY_BYTES = 1024 * 1024;
/** JSON nesting depth of a request. */
export const MAX_JSON_DEPTH = 8;
/** Event name length. */
export const MAX_EVENT_NAME = 64;
/** URL length. */
export const MAX_URL = 2048;
/** A referrer that is not a URL is a source name of at most this length. */
export const MAX_SOURCE_NAME = 100;
/** Session, user and fingerprint identifiers. */
export const MAX_ID = 128;
/** Idempotency key (eventId) length. */
export const MAX_EVENT_ID = 64;
/** Free-form country names. */
export const MAX_COUNTRY = 64;
/** Device class names. */
export const MAX_DEVICE = 32;
/** Custom parameters per event. */
export const MAX_PARAMS = 25;
/** Parameter key length. */
export const MAX_PARAM_KEY = 40;
/** String parameter value length. */
export const MAX_PARAM_STRING = 500;
/** Purchase line items per event. */
export const MAX_ITEMS = 200;
/** Project id length. */
export const MAX_PROJECT_ID = 128;
/** Timestamps older than this are refused. */
export const MAX_PAST_MS = 31 * 24 * 3600 * 1000;
/** Timestamps ahead of the server clock by more than this are refused. */
export const MAX_FUTURE_MS = 5 * 60 * 1000;
