import { MAX_BATCH_EVENTS, MAX_BODY_BYTES, MAX_PARAM_STRING } from './limits.js';
import { type EncodedEvent, type OutgoingEvent, encodeEvent } from './encode-event.js';
import { describeThrown, truncate } from './describe-thrown.js';
import { isRetryableStatus, parseRetryAfter, retryDelayMs } from './retry-policy.js';
import { encodeBody } from './gzip-body.js';
import {
  type AnalyticsClient,
  type ClientOptions,
  type ClientStats,
  DeliveryError,
  type DeliveryFailure,
  type EventContext,
  type EventParams,
  InvalidEventError,
  type PurchaseItem,
} from './types.js';

/**
 * The zero-dependency TypeScript client for browsers and Node ≥ 20.
 *
 * Events are checked when recorded (a bad one throws InvalidEventError at the call and is never queued), queued,
 * and posted as `{ events: [...] }` batches: when `batchSize` are waiting, after `flushIntervalMs`, on `flush()`,
 * and in a browser when the page is hidden. One request is on the wire at a time; network errors, timeouts, 429
 * and 5xx are retried with backoff, and every event's `eventId` makes a repeated batch count once.
 *
 * ```ts
 * import { createClient } from '@privacy-analytics/client';
 * const analytics = createClient({ apiKey: 'sk_...', projectId: 'p_...', endpoint: 'https://a.example/analytics' });
 * analytics.track('signup', { plan: 'pro' }, { userId: 'u_42', url: '/signup' });
 * await analytics.shutdown();
 * ```
 */

export * from './types.js';

/** The service's batch cap; larger batches would be refused with 400. */
const MAX_BATCH_SIZE = MAX_BATCH_EVENTS;
/** 50 events ≈ 15 KB: one small request per burst, and little lost if a tab dies before the next flush. */
const DEFAULT_BATCH_SIZE = 50;
/** One request per second at most while events trickle in; short enough that nothing waits noticeably. */
const DEFAULT_FLUSH_INTERVAL_MS = 1000;
/** 10,000 events ≈ 3 MB of memory: minutes of a busy backend's traffic while the service is down. */
const DEFAULT_MAX_QUEUE = 10_000;
/** 5 retries with doubling steps from 500 ms span ≈ 15 s: a service restart, not a long outage. */
const DEFAULT_MAX_RETRIES = 5;
/** Half a second: long enough for a restarting service to bind its port again. */
const DEFAULT_RETRY_BASE_MS = 500;
/** No single wait beyond 30 s: longer Retry-Afters (a monthly quota) give the batch up instead of the queue. */
const DEFAULT_RETRY_MAX_MS = 30_000;
/** A healthy ingestion answers in milliseconds; 10 s means the connection is gone. */
const DEFAULT_TIMEOUT_MS = 10_000;
/** Browsers refuse keepalive bodies over 64 KiB in flight; stay below so a hidden page still delivers. */
const KEEPALIVE_MAX_BYTES = 60 * 1024;
/** `{"events":[` + `]}` around the comma-joined events. */
const BATCH_ENVELOPE_BYTES = 13;

/**
 * Creates a client. Only `apiKey`, `projectId` and `endpoint` are required.
 * @example const analytics = createClient({ apiKey: 'pk_...', projectId: 'p_...', endpoint: 'https://a.example/analytics' });
 */
export function createClient(options: ClientOptions): AnalyticsClient {
  return new BatchingClient(options);
}

function positiveInt(value: number | undefined, fallback: number, name: string, max = Number.MAX_SAFE_INTEGER): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 0 || value > max) throw new TypeError(`${name} must be an integer 0-${max}`);
  return value;
}

function newEventId(): string {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === 'function') return c.randomUUID();
  // randomUUID is missing in insecure browser contexts (plain http); getRandomValues is not.
  return Array.from(c.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');
}

const RESERVED_CONTEXT = ['event', 'eventParams', 'items', 'projectId'];

class BatchingClient implements AnalyticsClient {
  readonly #endpoint: string;
  readonly #headers: Record<string, string>;
  readonly #projectId: string;
  readonly #batchSize: number;
  readonly #flushIntervalMs: number;
  readonly #maxQueue: number;
  readonly #maxRetries: number;
  readonly #retryBaseMs: number;
  readonly #retryMaxMs: number;
  readonly #timeoutMs: number;
  readonly #defaults: EventContext;
  readonly #fetch: typeof fetch;
  readonly #onError: ((error: DeliveryError) => void) | undefined;
  readonly #browser = typeof document !== 'undefined' && typeof location !== 'undefined';
  readonly #queue: EncodedEvent[] = [];
  readonly #stats: ClientStats = { queued: 0, inFlight: 0, sent: 0, dropped: 0, failed: 0, retries: 0, requests: 0 };
  #timer: ReturnType<typeof setTimeout> | undefined;
  #draining: Promise<void> | undefined;
  #closed = false;
  #onHidden: (() => void) | undefined;

  constructor(o: ClientOptions) {
    for (const field of ['apiKey', 'projectId', 'endpoint'] as const) {
      if (typeof o[field] !== 'string' || o[field].length === 0) throw new TypeError(`${field} is required`);
    }
    this.#endpoint = o.endpoint;
    this.#projectId = o.projectId;
    this.#headers = { 'Content-Type': 'application/json', Authorization: `Bearer ${o.apiKey}` };
    this.#batchSize = Math.max(1, positiveInt(o.batchSize, DEFAULT_BATCH_SIZE, 'batchSize', MAX_BATCH_SIZE));
    this.#flushIntervalMs = positiveInt(o.flushIntervalMs, DEFAULT_FLUSH_INTERVAL_MS, 'flushIntervalMs');
    this.#maxQueue = Math.max(1, positiveInt(o.maxQueue, DEFAULT_MAX_QUEUE, 'maxQueue'));
    this.#maxRetries = positiveInt(o.maxRetries, DEFAULT_MAX_RETRIES, 'maxRetries');
    this.#retryBaseMs = positiveInt(o.retryBaseMs, DEFAULT_RETRY_BASE_MS, 'retryBaseMs');
    this.#retryMaxMs = positiveInt(o.retryMaxMs, DEFAULT_RETRY_MAX_MS, 'retryMaxMs');
    this.#timeoutMs = positiveInt(o.timeoutMs, DEFAULT_TIMEOUT_MS, 'timeoutMs');
    this.#defaults = o.defaults ?? {};
    for (const key of [...RESERVED_CONTEXT, 'eventId', 'timestamp']) {
      // One eventId for every event would de-duplicate them all into one; a fixed timestamp soon falls out of range.
      if (key in this.#defaults) throw new TypeError(`defaults.${key} is per event; pass it in the call's context`);
    }
    // Bound to globalThis: browsers throw "Illegal invocation" when fetch is called as a method of another object.
    this.#fetch = o.fetch ?? globalThis.fetch.bind(globalThis);
    this.#onError = o.onError;
    if (this.#browser) {
      // A hidden page may never come back; send what is queued while keepalive can still carry it.
      this.#onHidden = () => {
        if (document.visibilityState === 'hidden') void this.#drain();
      };
      document.addEventListener('visibilitychange', this.#onHidden);
    }
  }

  pageView(context?: EventContext): string {
    const page: EventContext = this.#browser ? { url: location.href, referrer: document.referrer } : {};
    return this.#record('page_view', undefined, undefined, { ...page, ...context });
  }

  track(name: string, params?: EventParams, context?: EventContext): string {
    return this.#record(name, params, undefined, context);
  }

  purchase(transactionId: string, value: number, currency: string, items: PurchaseItem[], context?: EventContext): string {
    if (typeof transactionId !== 'string' || transactionId.length === 0) {
      throw new InvalidEventError('eventParams.transaction_id', 'must be a non-empty string');
    }
    if (typeof value !== 'number' || !Number.isFinite(value)) throw new InvalidEventError('eventParams.value', 'must be a finite number');
    if (typeof currency !== 'string' || currency.length === 0) throw new InvalidEventError('eventParams.currency', 'must be a non-empty string (ISO 4217, e.g. EUR)');
    if (!Array.isArray(items)) throw new InvalidEventError('items', 'must be a list');
    items.forEach((item, i) => {
      if (typeof item !== 'object' || item === null) throw new InvalidEventError(`items.${i}`, 'must be an object');
      if (typeof item.item_id !== 'string') throw new InvalidEventError(`items.${i}.item_id`, 'is required');
      if (typeof item.price !== 'number') throw new InvalidEventError(`items.${i}.price`, 'is required');
      if (!Number.isSafeInteger(item.quantity)) throw new InvalidEventError(`items.${i}.quantity`, 'must be an integer');
    });
    const params = { transaction_id: transactionId, value, currency };
    return this.#record('purchase', params, items, context);
  }

  captureException(error: unknown, options?: { fatal?: boolean; context?: EventContext }): string {
    const params = { description: truncate(describeThrown(error), MAX_PARAM_STRING), fatal: options?.fatal === true };
    return this.#record('exception', params, undefined, options?.context);
  }

  flush(): Promise<void> {
    return this.#flushAll();
  }

  async shutdown(): Promise<void> {
    this.#closed = true;
    if (this.#onHidden) document.removeEventListener('visibilitychange', this.#onHidden);
    await this.#flushAll();
  }

  stats(): ClientStats {
    return { ...this.#stats, queued: this.#queue.length };
  }

  #record(event: string, eventParams: EventParams | undefined, items: PurchaseItem[] | undefined, context?: EventContext): string {
    const merged: EventContext = { ...this.#pageContext(), ...this.#defaults, ...context };
    for (const key of RESERVED_CONTEXT) {
      if (key in merged) throw new InvalidEventError(`context.${key}`, 'is set by the method, not by the context');
    }
    const { timestamp, eventId = newEventId(), ...rest } = merged;
    const outgoing: OutgoingEvent = {
      ...rest,
      event,
      projectId: this.#projectId,
      eventId,
      ...(timestamp === undefined ? {} : { timestamp: timestamp instanceof Date ? timestamp.getTime() : timestamp }),
      ...(eventParams === undefined ? {} : { eventParams }),
      ...(items === undefined ? {} : { items }),
    };
    if (this.#closed) {
      this.#lose('closed', 1, 'the client was shut down');
      return eventId;
    }
    const encoded = encodeEvent(outgoing, Date.now()); // throws before anything is queued
    this.#queue.push(encoded);
    if (this.#queue.length > this.#maxQueue) {
      const excess = this.#queue.length - this.#maxQueue;
      this.#queue.splice(0, excess);
      this.#lose('dropped', excess, `queue full (${this.#maxQueue} events): dropped the oldest`);
    }
    if (this.#queue.length >= this.#batchSize) void this.#drain();
    else this.#schedule();
    return eventId;
  }

  #pageContext(): EventContext {
    if (!this.#browser) return {};
    const context: EventContext = { url: location.href, language: navigator.language };
    if (typeof screen !== 'undefined') context.screen = `${screen.width}x${screen.height}`;
    return context;
  }

  #schedule(): void {
    if (this.#timer !== undefined || this.#draining !== undefined || this.#queue.length === 0) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#drain();
    }, this.#flushIntervalMs);
  }

  /** Starts sending (or joins the send in progress); resolves when the queue has run empty. */
  #drain(): Promise<void> {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#draining ??= (async () => {
      try {
        while (this.#queue.length > 0) await this.#deliver(this.#takeBatch());
      } finally {
        this.#draining = undefined;
        this.#schedule(); // events recorded while the last response was settling
      }
    })();
    return this.#draining;
  }

  /**
   * Sends what is queued from the caller's own async context: alongside a send already under way, not behind it,
   * then waits for that send too. Edge runtimes tie I/O to the request that started it, so a worker's
   * `ctx.waitUntil(analytics.flush())` must carry its own request's events rather than wait on another request's
   * send, which the runtime cancels with that request.
   */
  async #flushAll(): Promise<void> {
    for (;;) {
      if (this.#queue.length > 0) await (this.#draining === undefined ? this.#drain() : this.#deliver(this.#takeBatch()));
      else if (this.#draining !== undefined) await this.#draining;
      else return;
    }
  }

  #takeBatch(): EncodedEvent[] {
    let bytes = BATCH_ENVELOPE_BYTES;
    let n = 0;
    while (n < this.#queue.length && n < this.#batchSize) {
      const next = this.#queue[n]!.bytes + 1; // + the comma
      if (n > 0 && bytes + next > MAX_BODY_BYTES) break;
      bytes += next;
      n++;
    }
    return this.#queue.splice(0, n);
  }

  async #deliver(batch: EncodedEvent[]): Promise<void> {
    const json = `{"events":[${batch.map((e) => e.json).join(',')}]}`;
    const { body, encoding } = await encodeBody(json);
    const headers = encoding ? { ...this.#headers, 'Content-Encoding': encoding } : this.#headers;
    const init: RequestInit = { method: 'POST', headers, body, credentials: 'omit' };
    if (this.#browser && (typeof body === 'string' ? body.length * 3 : body.length) <= KEEPALIVE_MAX_BYTES) init.keepalive = true;
    this.#stats.inFlight += batch.length;
    try {
      for (let attempt = 0; ; attempt++) {
        let retryAfterMs: number | undefined;
        let status: number | undefined;
        let code: string | undefined;
        let message: string;
        try {
          this.#stats.requests++;
          const signal = typeof AbortSignal.timeout === 'function' ? AbortSignal.timeout(this.#timeoutMs) : undefined;
          const res = await this.#fetch(this.#endpoint, signal ? { ...init, signal } : init);
          const text = await res.text(); // always read: an unread body pins the connection in Node
          if (res.ok) {
            this.#stats.sent += batch.length;
            return;
          }
          status = res.status;
          ({ code, message } = errorOf(text, status));
          retryAfterMs = parseRetryAfter(res.headers.get('retry-after'), Date.now());
          if (!isRetryableStatus(status)) return this.#lose('rejected', batch.length, message, status, code, true);
        } catch (error) {
          message = `network error: ${describeThrown(error)}`;
        }
        if (attempt >= this.#maxRetries) {
          return this.#lose('retries_exhausted', batch.length, `${message} (after ${attempt + 1} attempts)`, status, code, true);
        }
        if (retryAfterMs !== undefined && retryAfterMs > this.#retryMaxMs) {
          // A quota that resets next month is not worth holding the queue for.
          return this.#lose('rejected', batch.length, `${message} (Retry-After ${retryAfterMs} ms is too far off)`, status, code, true);
        }
        this.#stats.retries++;
        await sleep(retryDelayMs(attempt, this.#retryBaseMs, this.#retryMaxMs, retryAfterMs));
      }
    } finally {
      this.#stats.inFlight -= batch.length;
    }
  }

  #lose(reason: DeliveryFailure, events: number, message: string, status?: number, code?: string, failed = false): void {
    if (failed) this.#stats.failed += events;
    else this.#stats.dropped += events;
    if (!this.#onError) return;
    try {
      this.#onError(new DeliveryError(reason, events, message, status, code));
    } catch {
      // a throwing error handler must not stop delivery of the rest of the queue
    }
  }
}

function errorOf(text: string, status: number): { code: string | undefined; message: string } {
  try {
    const parsed: unknown = JSON.parse(text);
    const error = typeof parsed === 'object' && parsed !== null && 'error' in parsed ? parsed.error : undefined;
    if (typeof error === 'object' && error !== null) {
      const code = 'code' in error && typeof error.code === 'string' ? error.code : undefined;
      const message = 'message' in error && typeof error.message === 'string' ? error.message : `HTTP ${status}`;
      return { code, message: code ? `${code}: ${message}` : message };
    }
  } catch {
    // not JSON: a proxy's HTML error page
  }
  return { code: undefined, message: `HTTP ${status}` };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
