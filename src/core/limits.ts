/**
 * Every bound of the service, each with the reason it has the value it has.
 * CONTRACT.md fixes most of them; the rest protect memory or latency.
 */

/** CONTRACT: events per batch; a batch is one LMDB transaction, 500 keeps a commit well under 10 ms. */
export const MAX_BATCH_EVENTS = 500;
/** CONTRACT: one encoded event; page context is free-form, so this caps what the log keeps per event. */
export const MAX_EVENT_BYTES = 32 * 1024;
/** CONTRACT: request body cap, enforced while streaming. */
export const MAX_BODY_BYTES = 1024 * 1024;
/** CONTRACT: JSON nesting beyond this is refused (deep nesting is an attack, never analytics). */
export const MAX_JSON_DEPTH = 8;

/** CONTRACT: event name length. */
export const MAX_EVENT_NAME = 64;
/** CONTRACT: URLs longer than this are almost always tracking junk. */
export const MAX_URL = 2048;
/** CONTRACT: a referrer that is not a URL is a source name of at most this length. */
export const MAX_SOURCE_NAME = 100;
/** CONTRACT: session, user and fingerprint identifiers. */
export const MAX_ID = 128;
/** CONTRACT: idempotency key length. */
export const MAX_EVENT_ID = 64;
/** CONTRACT: free-form country names (ISO codes are two letters). */
export const MAX_COUNTRY = 64;
/** CONTRACT: device class names. */
export const MAX_DEVICE = 32;
/** CONTRACT: custom parameters per event. */
export const MAX_PARAMS = 25;
/** CONTRACT: parameter key length. */
export const MAX_PARAM_KEY = 40;
/** CONTRACT: string parameter value length. */
export const MAX_PARAM_STRING = 500;
/** CONTRACT: purchase line items per event. */
export const MAX_ITEMS = 200;
/** Project identifiers are ours (p_ + 22 chars) but callers may send anything; cap what we look up. */
export const MAX_PROJECT_ID = 128;

/** CONTRACT: timestamps older than this are refused (late beacons, clock skew, offline queues). */
export const MAX_PAST_MS = 31 * 24 * 3600 * 1000;
/** CONTRACT: timestamps ahead of the server clock by more than this are refused. */
export const MAX_FUTURE_MS = 5 * 60 * 1000;
/** CONTRACT (History): the earliest event time POST /projects/{id}/history takes; no web analytics predates it. */
export const HISTORY_MIN_TS = Date.UTC(2000, 0, 1);
/**
 * A day that took history is kept live this long (receive time) after its last history event, past its seal time:
 * an import sends a day in consecutive batches, and sealing between two of them would split its visits into two
 * segments (counted twice). Two seconds covers batches a CLI sends back to back; the heap holds only the days an
 * import touched in the last two seconds.
 */
export const HISTORY_QUIET_MS = 2_000;
/** A derived name an import may carry (source, browser, OS): a referrer host is at most 253 characters. */
export const MAX_DERIVED_NAME = 256;
/** CONTRACT (History): an export covers at most ten years (3,653 days, leap days included). */
export const MAX_EXPORT_DAYS = 3653;
/** A day's last instant is at most this long after its UTC midnight (its end at UTC-12, the westernmost zone). */
export const LATEST_DAY_END_MS = 36 * 3600 * 1000;
/**
 * A day is sealed this long after its window closed (judged by receive times): covers a server clock stepped back by
 * up to a day. An event that still arrives later is kept as a second segment of the day (counts add, see sealed-day.ts).
 */
export const SEAL_MARGIN_MS = 24 * 3600 * 1000;
/** Monthly allowance counters older than this (by receive time) are dropped: only the current month is ever asked. */
export const MONTHLY_KEPT_MS = 62 * 24 * 3600 * 1000;
/** CONTRACT: how long an eventId is remembered for de-duplication. */
export const DEDUP_WINDOW_MS = 48 * 3600 * 1000;
/**
 * The reducer forgets eventIds older than the window by the newest receive time it has folded, less this margin so a
 * server clock stepped back by up to an hour still finds them. Without it a replay of 30 days keeps every id (10M
 * events: ~1 GB of strings) until the first hourly prune.
 */
export const DEDUP_PRUNE_MARGIN_MS = 3600 * 1000;
/** The reducer's eventId prune runs when the map has doubled since the last one (amortized O(1) per event). */
export const DEDUP_PRUNE_MIN_SIZE = 65_536;

/** CONTRACT: distinct keys per breakdown per project and day; the rest go under OTHER_KEY. */
export const MAX_BREAKDOWN_KEYS = 1000;
export const OTHER_KEY = '(other)';
/** CONTRACT: recent events kept per project (the ring). */
export const RECENT_RING_SIZE = 1000;
/** CONTRACT: recent events returned by one metrics read. */
export const RECENT_RETURNED = 50;
/** CONTRACT: longest metrics range, inclusive. */
export const MAX_RANGE_DAYS = 366;
/** CONTRACT: longest question range (POST /query, funnels): ten years, the dashboard's "All time". */
export const MAX_QUESTION_DAYS = 3653;
/** CONTRACT: longest range a question may ask by `time:hour` (744 rows at most). */
export const MAX_HOUR_DAYS = 31;
/** CONTRACT: the earliest date a metrics read may name; no analytics predates it, and it keeps day loops finite. */
export const MIN_QUERY_DATE = '2000-01-01';
/** CONTRACT: the latest; far enough for any real range, far from year 9999, where the day after no longer sorts after it. */
export const MAX_QUERY_DATE = '2199-12-31';

/**
 * Days with fewer distinct users than this are unioned exactly on range reads; larger days keep a
 * HyperLogLog sketch. 4096 hashes merge in ~0.1 ms, a sketch costs 64 KiB, so small days stay exact and cheap.
 */
export const EXACT_USERS_PER_DAY = 4096;
/**
 * A range whose parts are all exact is unioned exactly up to this many user hashes (~3 ms); past it, hashes go into
 * a sketch (~20 ns each) instead: within the contract's 1 %, and a 30-day read of 2,700-user days stays under 5 ms.
 */
export const RANGE_EXACT_HASHES = 32_768;
/** HyperLogLog precision: 2^16 registers give 0.41 % standard error, so a range is within 1 % at 2.4 sigma. */
export const HLL_PRECISION = 16;

/** CONTRACT: currencies in the revenue figure per project and day (ISO 4217 has fewer than 200 active codes). */
export const MAX_REVENUE_CURRENCIES = 200;
/** CONTRACT: keys a project may track as custom properties (`tracked_props`). */
export const MAX_TRACKED_PROPS = 10;
/** CONTRACT: distinct values counted per tracked key per day; the rest go under OTHER_KEY. */
export const MAX_PROP_VALUES = 100;
/**
 * Property keys kept per project and day: the tracked set can be replaced during a day (PATCH), so a day may see up
 * to twice the tracked maximum; keys beyond it that day are not counted.
 */
export const MAX_PROP_KEYS_PER_DAY = 2 * MAX_TRACKED_PROPS;
/** CONTRACT: the browser or OS name of a session whose User-Agent the parser could not name. */
export const UNKNOWN_NAME = 'Unknown';

/** CONTRACT: realtime page views per minute cover the last 30 minutes (the current minute is the last). */
export const REALTIME_MINUTES = 30;
/** CONTRACT: realtime visitors are the distinct sessions of the last 5 minutes. */
export const REALTIME_VISITOR_MINUTES = 5;
/**
 * Realtime minutes older than this before the newest receive time are dropped, checked this often (an idle project
 * keeps none): twice the 30-minute window, so only a server clock stepped back by over half an hour hides minutes.
 */
export const REALTIME_KEPT_MS = 3600 * 1000;
/** CONTRACT: realtime pages and sources return the top 10. */
export const REALTIME_TOP = 10;
/**
 * Pages and sources kept per realtime minute; the rest go under OTHER_KEY. A top 10 over 30 minutes needs far fewer,
 * and 100 keeps a busy project's realtime state at ~6,000 entries at most.
 */
export const REALTIME_KEYS_PER_MINUTE = 100;
/**
 * Distinct sessions remembered per realtime minute (12 bytes each in a typed table, so ≤ 30 × ~170 KB per project). Past
 * it, further new sessions of that minute are counted without de-duplication (an over-count only on huge sites).
 */
export const REALTIME_SESSIONS_PER_MINUTE = 10_000;
