/** Public types of the TypeScript client. Shapes follow CONTRACT.md "POST /analytics" → "Event fields". */

/** A value of `eventParams` and of line-item fields: the service aggregates scalars only. */
export type ParamValue = string | number | boolean | null;

/** Custom parameters of one event: at most 25 keys of at most 40 characters, strings at most 500 characters. */
export type EventParams = Record<string, ParamValue>;

/** Any JSON value; page-context fields may be nested (within the service's 8-level limit). */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** One purchased line: `item_id`, `price`, `quantity`, plus any other scalar fields (name, category, ...). */
export interface PurchaseItem {
  item_id: string;
  price: number;
  /** an integer */
  quantity: number;
  [field: string]: ParamValue;
}

/**
 * Who, where and when of an event. Every field is optional; in a browser `url`, `referrer`, `screen` and
 * `language` default to the current page. In Node pass at least `url` to `pageView`, and a `sessionId` or
 * `userId`: without them the service derives the session from the caller's IP and User-Agent, which for a
 * backend is the backend itself.
 */
export interface EventContext {
  /** absolute http(s) URL or a path starting with `/` */
  url?: string;
  /** a URL, or a source name of at most 100 characters ('' = direct) */
  referrer?: string;
  sessionId?: string;
  userId?: string;
  fingerprint?: string;
  /** ISO 3166-1 alpha-2 code (any case) or a name */
  country?: string;
  /** desktop, mobile, tablet, ... */
  device?: string;
  /** event time; the service accepts 31 days in the past to 5 minutes ahead of its clock */
  timestamp?: number | string | Date;
  /** idempotency key; generated when absent. Reuse one (e.g. an order number) to count a resend once. */
  eventId?: string;
  /** page context, e.g. "1280x720" */
  screen?: string;
  language?: string;
  /** further page-context fields: stored with the event, not aggregated */
  [field: string]: JsonValue | Date | undefined;
}

/** Why a batch did not reach the service; handed to `onError`. */
export type DeliveryFailure =
  /** the service refused the batch (400/401/403/413/415, or another 4xx); it is not retried */
  | 'rejected'
  /** network errors, timeouts, 429 or 5xx on every attempt */
  | 'retries_exhausted'
  /** the queue was full, the oldest events were discarded */
  | 'dropped'
  /** an event was recorded after shutdown() */
  | 'closed';

export interface ClientOptions {
  /** a project key: `sk_...` on a server, `pk_...` in a browser */
  apiKey: string;
  projectId: string;
  /** full ingestion URL, `{base_url}/analytics` */
  endpoint: string;
  /** send as soon as this many events are queued (default 50, at most 500 per the service) */
  batchSize?: number;
  /** send queued events at least this often (default 1,000 ms) */
  flushIntervalMs?: number;
  /** events kept while the service is unreachable; beyond it the oldest are dropped (default 10,000) */
  maxQueue?: number;
  /** retries of one batch after the first attempt (default 5) */
  maxRetries?: number;
  /** first backoff step; doubles each retry, with jitter (default 500 ms) */
  retryBaseMs?: number;
  /** ceiling of one backoff wait and of an honoured Retry-After (default 30,000 ms) */
  retryMaxMs?: number;
  /** abort one request after this long and retry it (default 10,000 ms) */
  timeoutMs?: number;
  /** fields merged into every event's context (per-call context wins), e.g. `{ device: 'server' }` */
  defaults?: EventContext;
  /** replaces the global fetch (a proxy agent, instrumentation) */
  fetch?: typeof fetch;
  /** told about every batch that did not arrive; never about events that did */
  onError?: (error: DeliveryError) => void;
}

export interface ClientStats {
  /** events waiting to be sent */
  queued: number;
  /** events in requests currently on the wire */
  inFlight: number;
  /** events the service acknowledged */
  sent: number;
  /** events discarded because the queue was full, or recorded after shutdown */
  dropped: number;
  /** events in batches that were refused or ran out of retries */
  failed: number;
  /** requests repeated after a network error, timeout, 429 or 5xx */
  retries: number;
  /** requests that got an answer or failed on the network, retries included */
  requests: number;
}

/** A batch (or part of the queue) that the service did not count. */
export class DeliveryError extends Error {
  override readonly name = 'DeliveryError';
  constructor(
    readonly reason: DeliveryFailure,
    /** how many events were lost */
    readonly events: number,
    message: string,
    /** HTTP status of the last attempt, when there was one */
    readonly status?: number,
    /** the service's error code (`invalid_event`, `unauthorized`, ...), when it sent one */
    readonly code?: string,
  ) {
    super(message);
  }
}

/** Thrown synchronously by a recording method when its input breaks a service limit; nothing is queued. */
export class InvalidEventError extends TypeError {
  override readonly name = 'InvalidEventError';
  constructor(
    /** the field at fault, as a JSON path (`eventParams.plan`, `items.3.price`) */
    readonly path: string,
    message: string,
  ) {
    super(`${path}: ${message}`);
  }
}

export interface AnalyticsClient {
  /**
   * Records a page view. In a browser the URL, referrer, screen and language default to the current page; in
   * Node pass `context.url` (a path or an absolute URL). Returns the event's `eventId`.
   * @example analytics.pageView({ url: '/pricing', sessionId: 's_1', referrer: 'https://news.ycombinator.com/' });
   */
  pageView(context?: EventContext): string;
  /**
   * Records a custom event with up to 25 scalar parameters. Returns the event's `eventId`.
   * @example analytics.track('signup', { plan: 'pro', seats: 3 }, { userId: 'u_42' });
   */
  track(name: string, params?: EventParams, context?: EventContext): string;
  /**
   * Records a `purchase` with params `transaction_id`, `value` and `currency`, and the line items as the event's
   * `items`. Returns the event's `eventId`.
   * @example analytics.purchase('T-1001', 59.9, 'EUR', [{ item_id: 'sku-1', price: 29.95, quantity: 2 }]);
   */
  purchase(transactionId: string, value: number, currency: string, items: PurchaseItem[], context?: EventContext): string;
  /**
   * Records an `exception` with params `description` (the message, cut to 500 characters) and `fatal`. Accepts
   * anything that was thrown. Returns the event's `eventId`.
   * @example process.on('uncaughtException', (e) => analytics.captureException(e, { fatal: true }));
   */
  captureException(error: unknown, options?: { fatal?: boolean; context?: EventContext }): string;
  /**
   * Sends everything queued and resolves when the queue is empty (delivered, or given up and reported to
   * `onError`). Never rejects. The caller's events are sent from the caller's own context, next to any send
   * already under way, so an edge function can hand it to the runtime after answering:
   * `ctx.waitUntil(analytics.flush())`.
   * @example await analytics.flush();
   */
  flush(): Promise<void>;
  /**
   * Flushes, then stops: later events are dropped (counted, reported as `closed`) and no timer stays behind.
   * @example process.on('SIGTERM', () => analytics.shutdown().then(() => process.exit(0)));
   */
  shutdown(): Promise<void>;
  /**
   * Counters since creation: queued, in flight, sent, dropped, failed, retries, requests.
   * @example if (analytics.stats().dropped > 0) console.warn('analytics queue overflowed');
   */
  stats(): ClientStats;
}
