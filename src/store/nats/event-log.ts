// This file is long because publishing, reading and following one stream share its consumer and retry rules.
import { createHash, randomBytes } from 'node:crypto';
import { DeliverPolicy, jetstream, jetstreamManager, type ConsumerMessages, type JetStreamClient, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import { headers, type NatsConnection } from '@nats-io/transport-node';
import type { FoldRecord, LogRecord } from '../../core/types.ts';
import type { Appended, EventLog, Follower, LogEntry } from '../seams.ts';
import { eventSubject, type ResourceNames } from './resources.ts';

/**
 * The event log on a JetStream stream (CLUSTER.md §4, §5): one message per ingest batch on
 * `analytics.v1.events.<partition>`, body the JSON array of the batch's LogRecords, headers `Nats-Msg-Id` (the
 * batch id: a transport retry under the same id is stored once) and `Analytics-Format: 1`. Readers and followers
 * use ordered consumers (ephemeral, no acks) pulling by bytes; a follower has a watchdog, because ordered consumers
 * of the v3 client do not always recover by themselves after a server loss on nats-server 2.9.10 (§13.9).
 */

/** Header naming the body's encoding: 1 = JSON array of LogRecords. Another encoding would come behind a new value. */
export const FORMAT_HEADER = 'Analytics-Format';
export const FORMAT_JSON = '1';
/**
 * An erase marker (a deleted project, src/cluster/cluster-erasure.ts): `Analytics-Control: erase` and
 * `Analytics-Erase: <projectId>` on a message whose body is an empty batch (`[]`, format 1), so a reader that knows
 * no control messages folds it as an entry without records, and one that does drops the project at its sequence.
 */
export const CONTROL_HEADER = 'Analytics-Control';
export const CONTROL_ERASE = 'erase';
export const ERASE_HEADER = 'Analytics-Erase';

/** How long append keeps retrying one batch (ANALYTICS_PUBLISH_DEADLINE_MS): worst failover seen 19.3 s, below the 2-min msg-id window. */
export const DEFAULT_PUBLISH_DEADLINE_MS = 30_000;
/** First pause between publish retries: a leader election takes seconds, a lost packet milliseconds. */
const RETRY_FIRST_MS = 50;
/** Longest pause between publish retries: keeps the stall after a failover under half a second of extra wait. */
const RETRY_MAX_MS = 500;
/** One publish attempt waits this long for its PubAck before it is retried (same msg-id, so never stored twice). */
const PUBLISH_ATTEMPT_TIMEOUT_MS = 5_000;
/**
 * Bytes per pull: at least the largest message (4 MiB max_msg_size plus headers), since a pull below a message's
 * size never delivers it. Pulling by count overran the server's 64 MB per-connection buffer (§13.8).
 */
export const PULL_MAX_BYTES = 5 * 1024 * 1024;
/**
 * Messages per pull. Pulling by bytes stalled at every change from small (single-event) to large (batch) messages:
 * v3 refills with the bytes its accounting has left, which after a pull completed by count is less than one batch,
 * and on the server's 409 "Message Size Exceeds MaxBytes" waits for heartbeats (test/event-log-pulls.test.ts).
 * 16 × a typical 33 KB batch is 0.5 MB per consumer; the 64 MB buffer is reached only by 16 near-4 MiB bodies on each
 * of several partitions at once, and an ordered consumer that misses messages then is recreated by its gap check.
 */
export const PULL_MAX_MESSAGES = 16;
/**
 * Partitions per follower connection: each pulls up to PULL_MAX_BYTES at once, and 8 × 5 MiB stays well under the
 * server's 64 MB buffer per connection. The engine opens ceil(P / 8) follower connections.
 */
export const PARTITIONS_PER_FOLLOW_CONNECTION = 8;
/** At most this many partitions replay at once (read, or a follower catching up): bounds memory and the server's buffers. */
export const MAX_CONCURRENT_REPLAYS = 4;
/** deleteMessages reports progress every this many messages (an erasure of a big project takes a while). */
const DELETE_PROGRESS_EVERY = 1_000;
/** Entries per chunk of `read`: enough to amortize the consumer's round trips, small enough to yield to requests. */
const READ_CHUNK_ENTRIES = 256;
/** The watchdog looks at each follower this often. */
export const WATCHDOG_INTERVAL_MS = 2_000;
/**
 * A follower behind the stream that delivered nothing for this long gets a fresh consumer (§5): just over a leader
 * failover (~5 s), so an ordered consumer the failover left stalled is replaced before reads give up.
 */
export const WATCHDOG_STALL_MS = 6_000;
/**
 * lastSeq's JetStream API request gives up after this long (normally answered in ms): a request lost in a leader
 * failover is then asked again (read barrier, watchdog) instead of waited on for the client's default 5 s.
 */
const LAST_SEQ_TIMEOUT_MS = 1_000;
/**
 * The resume check's requests (firstSeq, batchIdAt: a partition's start) are asked again, each bounded by
 * LAST_SEQ_TIMEOUT_MS, for this long; past it the check fails and the caller replays the partition. One request
 * waited on for the client's default 5 s in a failover held a partition's start that long.
 */
const START_REQUEST_DEADLINE_MS = 20_000;
/** Pause between two attempts of such a request. */
const START_REQUEST_RETRY_MS = 250;
/** A follower a read waits on that delivered nothing for this long while behind is stalled (a live one delivers in ms). */
const BEHIND_STALL_MS = 2_000;

/** The log refused or could not take a batch in time: the engine answers 503 with Retry-After. */
export class LogUnavailable extends Error {
  constructor(
    readonly reason: 'deadline' | 'full',
    message: string,
    opts?: ErrorOptions,
  ) {
    super(message, opts);
    this.name = 'LogUnavailable';
  }
}

/** A stream message that is not a batch this service wrote (unknown format, not a JSON array). */
export class BadLogMessage extends Error {
  constructor(
    readonly seq: number,
    reason: string,
  ) {
    super(`stream message ${seq} is not a log entry: ${reason}`);
    this.name = 'BadLogMessage';
  }
}

/**
 * The batch id of §4: `e:` + base64url(sha256(projectId ‖ sorted eventIds)) when every record has an eventId (a
 * quick client retry of the same batch is then also deduplicated by JetStream), else `r:` + 128 random bits.
 */
export function batchIdFor(projectId: string, records: readonly LogRecord[]): string {
  const ids: string[] = [];
  for (const r of records) {
    if (r.t !== 'e' || r.eventId === undefined) return `r:${randomBytes(16).toString('base64url')}`;
    ids.push(r.eventId);
  }
  if (ids.length === 0) return `r:${randomBytes(16).toString('base64url')}`;
  ids.sort();
  const h = createHash('sha256').update(projectId);
  for (const id of ids) h.update('\u0000').update(id);
  return `e:${h.digest('base64url')}`;
}

/** Retryable on a publish: no responders (leader gone; v3 throws JetStreamNotEnabled), timeouts, "temporarily unavailable". */
function isTransient(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err.name === 'JetStreamNotEnabled' || err.name === 'TimeoutError' || err.name === 'NoResponders') return true;
  if (err.name === 'RequestError' && /no responders|timeout/i.test(err.message)) return true;
  return /temporarily unavailable|timeout|no responders|disconnect|reconnect/i.test(err.message);
}

/** discard: new + max_bytes: the stream is full and refuses writes until an operator makes room. */
function isFull(err: unknown): boolean {
  return err instanceof Error && /maximum (bytes|messages)|insufficient resources|resource limits exceeded/i.test(err.message);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A counting semaphore: replays wait for a slot. */
class Slots {
  private free: number;
  private readonly waiting: Array<() => void> = [];
  constructor(n: number) {
    this.free = n;
  }
  async acquire(): Promise<() => void> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((r) => this.waiting.push(r));
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    };
  }
}

export interface JetStreamEventLogOptions {
  /** ANALYTICS_PUBLISH_DEADLINE_MS */
  publishDeadlineMs?: number;
  /** operator log lines (watchdog restarts, skipped messages) */
  log?: (line: string) => void;
  /** a message that is not a log entry (never written by this service): reported, then passed over */
  onBadMessage?: (err: BadLogMessage) => void;
  /** prefix of consumer names (shows in `nats consumer ls` and lets tests find a follower's consumer) */
  consumerPrefix?: string;
}

export class JetStreamEventLog implements EventLog {
  readonly partitions: number;
  private readonly js: JetStreamClient;
  private readonly followJs: JetStreamClient[];
  private readonly deadlineMs: number;
  private readonly log: (line: string) => void;
  private readonly onBad: (err: BadLogMessage) => void;
  private readonly consumerPrefix: string;
  private readonly slots = new Slots(MAX_CONCURRENT_REPLAYS);
  private readonly followers = new Set<JsFollower>();
  private closed = false;

  private constructor(
    private readonly jsm: JetStreamManager,
    /** the same API with LAST_SEQ_TIMEOUT_MS: lastSeq and the resume check's requests */
    private readonly quickJsm: JetStreamManager,
    nc: NatsConnection,
    followNcs: readonly NatsConnection[],
    readonly names: ResourceNames,
    partitions: number,
    opts: JetStreamEventLogOptions,
  ) {
    this.partitions = partitions;
    this.js = jetstream(nc, { timeout: PUBLISH_ATTEMPT_TIMEOUT_MS });
    this.followJs = (followNcs.length > 0 ? followNcs : [nc]).map((c) => jetstream(c));
    this.deadlineMs = opts.publishDeadlineMs ?? DEFAULT_PUBLISH_DEADLINE_MS;
    this.log = opts.log ?? (() => {});
    this.onBad = opts.onBadMessage ?? ((err) => this.log(err.message));
    this.consumerPrefix = opts.consumerPrefix ?? 'analytics';
  }

  /**
   * `nc` carries appends and lastSeq (ingest, read barriers); `followNcs` carry read and follow, partition p on
   * `followNcs[p % n]` (see PARTITIONS_PER_FOLLOW_CONNECTION); none given: everything on `nc`.
   */
  static async open(nc: NatsConnection, followNcs: readonly NatsConnection[], names: ResourceNames, partitions: number, opts: JetStreamEventLogOptions = {}): Promise<JetStreamEventLog> {
    const jsm = await jetstreamManager(nc);
    const quickJsm = await jetstreamManager(nc, { timeout: LAST_SEQ_TIMEOUT_MS, checkAPI: false });
    return new JetStreamEventLog(jsm, quickJsm, nc, followNcs, names, partitions, opts);
  }

  private subject(partition: number): string {
    if (!Number.isInteger(partition) || partition < 0 || partition >= this.partitions) throw new RangeError(`no partition ${partition} (partitions: ${this.partitions})`);
    return eventSubject(this.names, partition);
  }

  async append(partition: number, records: readonly FoldRecord[], batchId: string): Promise<Appended> {
    return this.publish(partition, JSON.stringify(records), batchId);
  }

  /**
   * Publishes an erase marker for a deleted project into its partition (same retries as append; `markerId` is its
   * msg-id, so a retry is stored once). Returns its sequence: the fold drops the project there.
   */
  async appendEraseMarker(partition: number, projectId: string, markerId: string): Promise<Appended> {
    return this.publish(partition, '[]', markerId, { [CONTROL_HEADER]: CONTROL_ERASE, [ERASE_HEADER]: projectId });
  }

  /**
   * Removes messages by sequence, overwriting their bytes on the servers (`erase`, not just unlinking them). A
   * message already gone counts as removed (an erasure finished again after a crash). Returns how many were removed now.
   */
  async deleteMessages(seqs: readonly number[], onProgress?: (done: number) => void): Promise<number> {
    let removed = 0;
    let done = 0;
    for (const seq of seqs) {
      try {
        if (await this.jsm.streams.deleteMessage(this.names.stream, seq, true)) removed++;
      } catch (err) {
        if (!/no message found|not found/i.test(err instanceof Error ? err.message : String(err))) throw err;
      }
      done++;
      if (onProgress && done % DELETE_PROGRESS_EVERY === 0) onProgress(done);
    }
    return removed;
  }

  private async publish(partition: number, body: string, batchId: string, extra: Record<string, string> = {}): Promise<Appended> {
    const subject = this.subject(partition);
    const deadline = Date.now() + this.deadlineMs;
    let pause = RETRY_FIRST_MS;
    for (let attempt = 1; ; attempt++) {
      const h = headers();
      h.set(FORMAT_HEADER, FORMAT_JSON);
      for (const [k, v] of Object.entries(extra)) h.set(k, v);
      try {
        const ack = await this.js.publish(subject, body, { msgID: batchId, headers: h, timeout: Math.max(1, Math.min(PUBLISH_ATTEMPT_TIMEOUT_MS, deadline - Date.now())) });
        return { seq: ack.seq, duplicate: ack.duplicate === true };
      } catch (err) {
        if (isFull(err)) throw new LogUnavailable('full', `the event stream is full: ${(err as Error).message}`, { cause: err });
        if (!isTransient(err)) throw err;
        const left = deadline - Date.now();
        if (this.closed || left <= 0) {
          throw new LogUnavailable('deadline', `the event stream did not acknowledge batch ${batchId} within ${this.deadlineMs} ms (${attempt} attempts): ${(err as Error).message}`, { cause: err });
        }
        await sleep(Math.min(pause, left)); // the last attempt goes out at the deadline
        pause = Math.min(pause * 2, RETRY_MAX_MS);
      }
    }
  }

  async lastSeq(partition: number): Promise<number> {
    const m = await this.quickJsm.streams.getMessage(this.names.stream, { last_by_subj: this.subject(partition) });
    return m ? m.seq : 0;
  }

  /**
   * The batch id (`Nats-Msg-Id`) of the message at `seq`, or undefined when there is none (removed, or beyond the
   * end). A snapshot names the last batch it folded; resuming checks that the stream still has that id there, since
   * nats-server 2.9.10 can number replicas differently after a leader stall (CLUSTER.md §5, §13.14).
   */
  async batchIdAt(seq: number): Promise<string | undefined> {
    const m = await this.startRequest(() => this.quickJsm.streams.getMessage(this.names.stream, { seq }));
    return m?.header?.get('Nats-Msg-Id') || undefined;
  }

  /**
   * The stream's first sequence (1 when nothing was ever removed): a snapshot older than `firstSeq − 1` lacks events
   * that retention (max_age) removed from the stream since, so it cannot be resumed from.
   */
  async firstSeq(): Promise<number> {
    const info = await this.startRequest(() => this.quickJsm.streams.info(this.names.stream));
    return info.state.first_seq;
  }

  /** A request of a partition's start: transient failures asked again until START_REQUEST_DEADLINE_MS. */
  private async startRequest<T>(attempt: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + START_REQUEST_DEADLINE_MS;
    for (;;) {
      try {
        return await attempt();
      } catch (err) {
        if (this.closed || !isTransient(err) || Date.now() + START_REQUEST_RETRY_MS >= deadline) throw err;
        await sleep(START_REQUEST_RETRY_MS);
      }
    }
  }

  /** The message's entry, or a BadLogMessage. */
  decode(m: JsMsg): LogEntry | BadLogMessage {
    const format = m.headers?.get(FORMAT_HEADER);
    if (format !== FORMAT_JSON) return new BadLogMessage(m.seq, `unknown ${FORMAT_HEADER} ${JSON.stringify(format ?? null)}`);
    let records: unknown;
    try {
      records = m.json();
    } catch (err) {
      return new BadLogMessage(m.seq, `body is not JSON: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (!Array.isArray(records)) return new BadLogMessage(m.seq, 'body is not an array of records');
    const batchId = m.headers?.get('Nats-Msg-Id');
    const e: LogEntry = batchId ? { seq: m.seq, records: records as FoldRecord[], batchId } : { seq: m.seq, records: records as FoldRecord[] };
    if (m.headers?.get(CONTROL_HEADER) === CONTROL_ERASE) {
      const projectId = m.headers.get(ERASE_HEADER);
      if (!projectId || records.length > 0) return new BadLogMessage(m.seq, `an erase marker names no project or carries records`);
      e.erase = projectId;
    }
    return e;
  }

  /** An ordered consumer of one partition from `fromSeq` on, pulling by bytes. */
  async openConsumer(partition: number, fromSeq: number, role: 'read' | 'fold'): Promise<ConsumerMessages> {
    const js = this.followJs[partition % this.followJs.length]!;
    const c = await js.consumers.get(this.names.stream, {
      name_prefix: `${this.consumerPrefix}_${role}_p${partition}_${randomBytes(4).toString('hex')}`,
      filter_subjects: this.subject(partition), // a string: 2.9 takes filter_subject, refuses filter_subjects (§13.4)
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: Math.max(1, fromSeq),
    });
    return c.consume({ max_messages: PULL_MAX_MESSAGES });
  }

  /**
   * Entries after `afterSeq` up to the partition's end as of the call. A consumer that delivers nothing for
   * WATCHDOG_STALL_MS (the stall followers are guarded against) is replaced by a fresh one from the last entry read.
   */
  async *read(partition: number, afterSeq: number): AsyncIterable<LogEntry[]> {
    this.subject(partition);
    const release = await this.slots.acquire();
    try {
      let end = await this.lastSeq(partition);
      let last = afterSeq;
      let chunk: LogEntry[] = [];
      while (last < end) {
        const messages = await this.openConsumer(partition, last + 1, 'read');
        let progress = Date.now();
        let stalled = false;
        const watch = setInterval(() => {
          if (Date.now() - progress < WATCHDOG_STALL_MS) return;
          stalled = true;
          void messages.close().catch(() => {});
        }, WATCHDOG_INTERVAL_MS);
        watch.unref();
        try {
          for await (const m of messages) {
            progress = Date.now();
            if (m.seq <= last) continue;
            if (m.seq > end) break; // the message at `end` was removed meanwhile (max_age): a newer one ends the read
            last = m.seq;
            const e = this.decode(m);
            if (e instanceof BadLogMessage) this.onBad(e);
            else chunk.push(e);
            if (last >= end) break;
            if (chunk.length >= READ_CHUNK_ENTRIES) {
              const out = chunk;
              chunk = [];
              yield out;
              progress = Date.now(); // the caller's time is not the consumer's stall
            }
          }
        } finally {
          clearInterval(watch);
          await messages.close().catch(() => {});
        }
        if (last >= end) break;
        if (stalled) this.log(`partition ${partition}: replay stalled at ${last} (end ${end}) for ${WATCHDOG_STALL_MS} ms: new consumer`);
        // a consumer that stalled or ended early: the end may also have gone (retention), so look again
        const now = await this.lastSeq(partition);
        if (now <= last) break;
        end = Math.min(end, now);
      }
      if (chunk.length > 0) yield chunk;
    } finally {
      release();
    }
  }

  follow(partition: number, afterSeq: number, onEntry: (e: LogEntry) => void): Follower & { readonly restarts: number } {
    this.subject(partition);
    const f = new JsFollower(this, partition, afterSeq, onEntry, () => this.followers.delete(f));
    this.followers.add(f);
    if (this.closed) void f.stop(); // a follower asked for after close would poll forever
    else f.start();
    return f;
  }

  /** @internal the replay slots (followers catching up take one) */
  acquireReplaySlot(): Promise<() => void> {
    return this.slots.acquire();
  }

  /** @internal */
  report(line: string): void {
    this.log(line);
  }

  /** @internal */
  reportBad(err: BadLogMessage): void {
    this.onBad(err);
  }

  /** Stops every follower; the connections belong to the caller. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.followers].map((f) => f.stop()));
  }
}

/**
 * A live tail of one partition: an ordered consumer from the last delivered sequence + 1, and a watchdog that
 * replaces it when it stalls. Entries reach onEntry in order, each once (anything at or below the last delivered
 * sequence is dropped, so a replaced consumer's overlap never repeats an entry).
 */
class JsFollower implements Follower {
  lastSeq: number;
  /** fresh consumers the watchdog started (tests, operator metrics) */
  restarts = 0;
  private generation = 0;
  private messages: ConsumerMessages | undefined;
  private creating = false;
  private started = false;
  private stopped = false;
  private lastProgress = Date.now();
  private checking = false;
  private readonly timer: NodeJS.Timeout;
  /** held while catching up to the stream's end as of the start (a replay slot) */
  private releaseSlot: (() => void) | undefined;
  private catchUpTo = 0;

  constructor(
    private readonly log: JetStreamEventLog,
    private readonly partition: number,
    afterSeq: number,
    private readonly onEntry: (e: LogEntry) => void,
    private readonly onStopped: () => void,
  ) {
    this.lastSeq = afterSeq;
    this.timer = setInterval(() => void this.watch(), WATCHDOG_INTERVAL_MS);
    this.timer.unref();
  }

  start(): void {
    void (async () => {
      const release = await this.log.acquireReplaySlot();
      if (this.stopped) return release();
      this.releaseSlot = release;
      try {
        this.catchUpTo = await this.log.lastSeq(this.partition);
      } catch {
        this.catchUpTo = Number.MAX_SAFE_INTEGER; // unknown: the watchdog releases the slot once it sees us caught up
      }
      this.maybeCaughtUp();
      this.started = true;
      this.lastProgress = Date.now();
      this.consume();
    })();
  }

  private maybeCaughtUp(): void {
    if (this.releaseSlot && this.lastSeq >= this.catchUpTo) {
      this.releaseSlot();
      this.releaseSlot = undefined;
    }
  }

  /** Starts a fresh consumer from lastSeq + 1 (dropping the old one); a failed create is retried by the watchdog. */
  private consume(): void {
    const gen = ++this.generation;
    const old = this.messages;
    this.messages = undefined;
    if (old) void old.close().catch(() => {});
    this.creating = true;
    void (async () => {
      let messages: ConsumerMessages;
      try {
        messages = await this.log.openConsumer(this.partition, this.lastSeq + 1, 'fold');
      } catch (err) {
        if (gen === this.generation) this.creating = false;
        this.log.report(`partition ${this.partition}: follower consumer not created (retried in ${WATCHDOG_INTERVAL_MS} ms): ${err instanceof Error ? err.message : String(err)}`);
        return;
      }
      if (gen !== this.generation || this.stopped) {
        await messages.close().catch(() => {});
        return;
      }
      this.creating = false;
      this.messages = messages;
      try {
        for await (const m of messages) {
          if (gen !== this.generation) break;
          if (m.seq <= this.lastSeq) continue;
          const e = this.log.decode(m);
          this.lastSeq = m.seq;
          this.lastProgress = Date.now();
          if (e instanceof BadLogMessage) this.log.reportBad(e);
          else {
            try {
              this.onEntry(e);
            } catch (err) {
              // the caller's fault, not the log's: reported, and the tail goes on in order (never re-delivered)
              this.log.report(`partition ${this.partition}: onEntry failed at ${e.seq}: ${err instanceof Error ? err.message : String(err)}`);
            }
          }
          this.maybeCaughtUp();
        }
      } catch (err) {
        if (gen === this.generation && !this.stopped) this.log.report(`partition ${this.partition}: follower consumer failed: ${err instanceof Error ? err.message : String(err)}`);
      }
      if (gen === this.generation && !this.stopped) this.messages = undefined; // ended: the watchdog starts another
    })();
  }

  /**
   * A read barrier saw the stream end at `seq`: behind it and silent for BEHIND_STALL_MS, the consumer is replaced
   * now instead of at the watchdog's WATCHDOG_STALL_MS (reads wait on this fold). Also while the watchdog's own
   * lastSeq is in flight (it often is right after a failover, when that request is the one timing out): the watchdog
   * then sees the fresh progress mark and leaves the new consumer alone.
   */
  behind(seq: number): void {
    if (!this.started || this.stopped || this.creating || !this.messages) return;
    if (seq <= this.lastSeq || Date.now() - this.lastProgress < BEHIND_STALL_MS) return;
    this.log.report(`partition ${this.partition}: follower silent at ${this.lastSeq} for ${BEHIND_STALL_MS} ms while a read waits for ${seq}: new consumer`);
    this.restarts++;
    this.lastProgress = Date.now();
    this.consume();
  }

  /** Every WATCHDOG_INTERVAL_MS: no consumer (create failed, or it ended) → retry; behind and silent for WATCHDOG_STALL_MS → replace. */
  private async watch(): Promise<void> {
    if (!this.started || this.stopped || this.checking || this.creating) return;
    this.checking = true;
    try {
      if (!this.messages) {
        this.restarts++;
        this.consume();
        return;
      }
      if (Date.now() - this.lastProgress < WATCHDOG_STALL_MS && !this.releaseSlot) return;
      let last: number;
      try {
        last = await this.log.lastSeq(this.partition);
      } catch {
        return; // cannot tell now; next round
      }
      if (this.stopped) return;
      if (last <= this.lastSeq) {
        this.lastProgress = Date.now(); // caught up: idle is not a stall
        this.catchUpTo = Math.min(this.catchUpTo, last);
        this.maybeCaughtUp();
        return;
      }
      if (Date.now() - this.lastProgress < WATCHDOG_STALL_MS) return;
      this.log.report(`partition ${this.partition}: follower stalled at ${this.lastSeq} (stream at ${last}) for ${WATCHDOG_STALL_MS} ms: new consumer`);
      this.restarts++;
      this.lastProgress = Date.now();
      this.consume();
    } finally {
      this.checking = false;
    }
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.generation++;
    clearInterval(this.timer);
    this.releaseSlot?.();
    this.releaseSlot = undefined;
    const m = this.messages;
    this.messages = undefined;
    this.onStopped();
    if (m) await m.close().catch(() => {});
  }
}
