import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';

/**
 * Forwarded reads (CLUSTER.md §6) over core NATS request/reply. The owner of partition n subscribes to
 * `<prefix>.<n>` in a queue group while it serves n; any node sends a read there and gets the owner's answer. The
 * transport is generic: a JSON payload in, a JSON answer out; what they hold is the engine's business.
 *
 * On the wire an answer is `{ok: true, answer}` or `{ok: false, error: {code, message, status?}}`. A responder whose
 * `serving()` gate says no (it lost n a moment ago but has not unsubscribed yet) answers `not_serving`, and the
 * requester tries again until its deadline, so a read during a hand-over reaches the new owner.
 */

/** Forwarded reads go here: `<prefix>.<partition>` (tests pass their own prefix). */
export const READ_SUBJECT_PREFIX = 'analytics.v1.read';
/** One queue group: if two nodes both subscribe during a hand-over, each read goes to one of them. */
const READ_QUEUE = 'analytics-read';
/** A forwarded read's whole budget: the owner's read barrier waits ≤ 2 s too, so this is the caller's 503 point. */
export const READ_TIMEOUT_MS = 2_000;
/**
 * One attempt waits at most this long, then the read is sent again (reads are idempotent). A request in flight to a
 * node on another NATS server when that node unsubscribes (it lost the partition) is dropped by that server without
 * a word: seen for 3–4 of ~32 reads during one hand-over before this retry. A read slower than this (a long read
 * barrier) is sent twice; the second shares the owner's barrier.
 */
export const READ_ATTEMPT_MS = 500;
/** Pause before asking again after a `not_serving` or no-responders answer. */
const RETRY_PAUSE_MS = 25;
/**
 * A planned hand-over leaves a partition without a subscriber for one release → claim → subscribe round trip (a few
 * ms); no-responders is retried this long so reads do not see it. Past this, nobody serves the partition (an owner
 * died: its lease has yet to expire) and the caller answers 503 at once rather than after its whole timeout.
 */
export const NO_RESPONDERS_GRACE_MS = 500;

/** No node could answer: nobody serves the partition now, or nobody answered in time. The engine answers 503 + Retry-After: 1. */
export class ReadUnavailableError extends Error {
  override readonly name = 'ReadUnavailableError';
  constructor(
    readonly partition: number,
    readonly reason: 'no_responders' | 'timeout' | 'not_serving',
  ) {
    super(`no node answered the read of partition ${partition} (${reason})`);
  }
}

/** The owner answered with an error: its handler threw. `code` and `status` are the thrown error's, when it had them. */
export class ReadFailedError extends Error {
  override readonly name = 'ReadFailedError';
  constructor(
    readonly partition: number,
    readonly code: string,
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }
}

export type ReadHandler<Q = unknown, A = unknown> = (payload: Q, partition: number) => A | Promise<A>;

type Envelope = { ok: true; answer: unknown } | { ok: false; error: { code: string; message: string; status?: number } };

function errorEnvelope(err: unknown): Envelope {
  const e = err as { code?: unknown; status?: unknown; message?: unknown } | undefined;
  const code = typeof e?.code === 'string' ? e.code : 'internal';
  const message = typeof e?.message === 'string' ? e.message : String(err);
  const status = typeof e?.status === 'number' ? e.status : undefined;
  return { ok: false, error: status === undefined ? { code, message } : { code, message, status } };
}

function isEnvelope(v: unknown): v is Envelope {
  if (typeof v !== 'object' || v === null) return false;
  const o = v as { ok?: unknown; error?: { code?: unknown; message?: unknown } };
  return o.ok === true || (o.ok === false && typeof o.error?.code === 'string' && typeof o.error.message === 'string');
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface ReadRpcOptions {
  /** default READ_SUBJECT_PREFIX */
  subjectPrefix?: string;
  /** a handler or a reply failed in a way nobody else will see (diagnostics) */
  onError?: (err: unknown) => void;
}

export class ReadRpc {
  #nc: NatsConnection;
  #prefix: string;
  #onError: (err: unknown) => void;
  #subs = new Map<number, Subscription>();

  /** `nc`: the caller's connection (ingest/reads); it stays open after close() */
  constructor(nc: NatsConnection, opts: ReadRpcOptions = {}) {
    this.#nc = nc;
    this.#prefix = opts.subjectPrefix ?? READ_SUBJECT_PREFIX;
    this.#onError = opts.onError ?? (() => {});
  }

  subject(partition: number): string {
    return `${this.#prefix}.${partition}`;
  }

  /**
   * Answers reads of `partition` with `handler` until unserve(partition) (call it on lose). `serving` is asked per
   * read: false answers `not_serving` (the fence expired before the lose was handled). Replaces an earlier handler.
   */
  serve<Q = unknown, A = unknown>(partition: number, handler: ReadHandler<Q, A>, serving: () => boolean = () => true): void {
    this.unserve(partition);
    const sub = this.#nc.subscribe(this.subject(partition), {
      queue: READ_QUEUE,
      callback: (err, msg) => {
        if (err) {
          this.#onError(err);
          return;
        }
        void this.#answer(partition, msg, handler as ReadHandler, serving);
      },
    });
    this.#subs.set(partition, sub);
  }

  async #answer(partition: number, msg: Msg, handler: ReadHandler, serving: () => boolean): Promise<void> {
    let env: Envelope;
    if (!serving()) {
      env = { ok: false, error: { code: 'not_serving', message: `this node does not serve partition ${partition} now` } };
    } else {
      try {
        const payload: unknown = msg.data.length === 0 ? undefined : msg.json();
        env = { ok: true, answer: await handler(payload, partition) };
      } catch (err) {
        env = errorEnvelope(err);
      }
    }
    try {
      msg.respond(JSON.stringify(env));
    } catch (err) {
      // e.g. an answer over max_payload: tell the requester rather than let it time out
      this.#onError(err);
      try {
        msg.respond(JSON.stringify(errorEnvelope(err)));
      } catch (again) {
        this.#onError(again);
      }
    }
  }

  /**
   * Stops answering reads of `partition`. Drains rather than unsubscribes: a read the server routed here before it
   * saw the unsubscribe is still answered (by the gate: `not_serving`, so the requester asks again and reaches the
   * new owner) instead of being dropped and waited for until its timeout.
   */
  unserve(partition: number): void {
    const sub = this.#subs.get(partition);
    if (!sub) return;
    this.#subs.delete(partition);
    sub.drain().catch((err: unknown) => this.#onError(err));
  }

  /** Partitions with a handler here. */
  served(): number[] {
    return [...this.#subs.keys()].sort((a, b) => a - b);
  }

  /**
   * Sends a read to whichever node serves `partition`. Resolves with its answer; throws ReadUnavailableError (nobody
   * serves it for NO_RESPONDERS_GRACE_MS, or no answer within `timeoutMs`) or ReadFailedError (the owner's handler
   * threw).
   */
  async request<A = unknown, Q = unknown>(partition: number, payload: Q, timeoutMs = READ_TIMEOUT_MS): Promise<A> {
    const start = performance.now();
    const deadline = start + timeoutMs;
    const body = JSON.stringify(payload ?? null);
    for (;;) {
      const left = Math.round(deadline - performance.now());
      if (left <= 0) throw new ReadUnavailableError(partition, 'timeout');
      let reply: Msg;
      try {
        reply = await this.#nc.request(this.subject(partition), body, { timeout: Math.min(left, READ_ATTEMPT_MS) });
      } catch (err) {
        const e = err as { isNoResponders?: () => boolean; name?: string };
        if (typeof e?.isNoResponders === 'function' && e.isNoResponders()) {
          const now = performance.now();
          if (now - start + RETRY_PAUSE_MS >= NO_RESPONDERS_GRACE_MS || deadline - now <= RETRY_PAUSE_MS) throw new ReadUnavailableError(partition, 'no_responders');
          await sleep(RETRY_PAUSE_MS);
          continue;
        }
        if (e?.name === 'TimeoutError') {
          if (deadline - performance.now() <= RETRY_PAUSE_MS) throw new ReadUnavailableError(partition, 'timeout');
          continue;
        }
        throw err;
      }
      let env: unknown;
      try {
        env = reply.json();
      } catch {
        env = undefined;
      }
      if (!isEnvelope(env)) throw new ReadFailedError(partition, 'bad_reply', 'the owner answered something that is not a read reply');
      if (env.ok) return env.answer as A;
      if (env.error.code === 'not_serving') {
        if (deadline - performance.now() <= RETRY_PAUSE_MS) throw new ReadUnavailableError(partition, 'not_serving');
        await sleep(RETRY_PAUSE_MS);
        continue;
      }
      throw new ReadFailedError(partition, env.error.code, env.error.message, env.error.status);
    }
  }

  /** Unsubscribes every partition (the connection stays open: the caller owns it). */
  close(): void {
    for (const n of [...this.#subs.keys()]) this.unserve(n);
  }
}
