import { StorageType } from '@nats-io/jetstream';
import { Kvm, type KV, type KvWatchEntry } from '@nats-io/kv';
import type { NatsConnection, QueuedIterator } from '@nats-io/transport-node';
import type { CasResult, LeaseStore, MemberInfo, OwnersChange, PartLease, ReadyMark } from '../lease-store.ts';

/**
 * The KV side of partition ownership (CLUSTER.md §6): bucket `analytics_owners_v1` holding `member.<id>`,
 * `part.<n>` and `ready.<n>.<id>`. The lease rules are in `src/cluster/ownership.ts`; this file only reads and writes
 * keys, and watches the bucket.
 *
 * The watch is a JetStream ordered consumer, which nats-server 2.9.10 can leave stalled after a server loss (§13.9). A
 * node's own heartbeat is a probe: once a `member` write has been acknowledged, the watch must deliver that revision
 * soon; if it has not after WATCH_STALL_MS, the watch is recreated (it then redelivers every key's current value).
 */

/** The bucket's name in production; tests pass unique names. */
export const OWNERS_BUCKET = 'analytics_owners_v1';
/** Three replicas: leases survive the loss of any one NATS server. */
const OWNERS_REPLICAS = 3;
/** Only the current value of a key matters (a lease's history is of no use to anyone). */
const OWNERS_HISTORY = 1;
/**
 * A compare-and-set gets this long: below the fence (3.5 s), so one hung request cannot keep a partition's next
 * renewal from being tried before the owner fences itself.
 */
export const KV_REQUEST_TIMEOUT_MS = 1_500;
/** An acknowledged own heartbeat not seen on the watch within this long means the watch stalled: recreate it. */
export const WATCH_STALL_MS = 3_000;

/** JetStream's compare-and-set refusal (`wrong last sequence: N`, §13.11; code 10071). */
const WRONG_LAST_SEQUENCE = 10071;

function isWrongLastSequence(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  return code === WRONG_LAST_SEQUENCE || /wrong last sequence/i.test(err.message);
}

function isAlreadyInUse(err: unknown): boolean {
  return err instanceof Error && /already in use/i.test(err.message);
}

/**
 * Opening gives up after this long: a JetStream API request can time out (5 s) or answer "temporarily unavailable"
 * while the cluster elects a meta leader or several nodes create the same R3 bucket at once (seen at a cold start).
 */
const OPEN_DEADLINE_MS = 30_000;
/** Pause between attempts to open the bucket. */
const OPEN_RETRY_MS = 250;

function isTransient(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  return err.name === 'TimeoutError' || err.name === 'JetStreamNotEnabled' || /timeout|temporarily unavailable|no responders|not enabled/i.test(err.message);
}

/** Opens the owners bucket, creating it (R3, history 1) if no node did yet; transient JetStream errors are retried. */
export async function openOwnersBucket(nc: NatsConnection, bucket = OWNERS_BUCKET, replicas = OWNERS_REPLICAS): Promise<KV> {
  const kvm = new Kvm(nc);
  const deadline = performance.now() + OPEN_DEADLINE_MS;
  for (;;) {
    try {
      try {
        return await kvm.create(bucket, { replicas, history: OWNERS_HISTORY, storage: StorageType.File });
      } catch (err) {
        if (!isAlreadyInUse(err)) throw err;
        return await kvm.open(bucket);
      }
    } catch (err) {
      if (!isTransient(err) || performance.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, OPEN_RETRY_MS));
    }
  }
}

/**
 * The KV client takes a timeout on put only: a get or delete would wait its default 5 s in a leader failover (a
 * SIGTERM's release waits behind deleteMember). This gives up on it after KV_REQUEST_TIMEOUT_MS like a put's; the
 * request itself may still land later, which changes nothing (a deleted key is deleted once).
 */
async function bounded<T>(what: string, request: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(Object.assign(new Error(`${what}: timeout after ${KV_REQUEST_TIMEOUT_MS} ms`), { name: 'TimeoutError' })), KV_REQUEST_TIMEOUT_MS);
  });
  request.catch(() => {}); // a late failure after the timeout is nobody's to handle
  try {
    return await Promise.race([request, late]);
  } finally {
    clearTimeout(timer);
  }
}

function record(v: unknown): Record<string, unknown> | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}

function parseJson(e: { value: Uint8Array; json<T>(): T }): Record<string, unknown> | undefined {
  if (e.value.length === 0) return undefined;
  try {
    return record(e.json<unknown>());
  } catch {
    return undefined;
  }
}

function parseMember(v: Record<string, unknown> | undefined): MemberInfo | undefined {
  if (!v) return undefined;
  const { id, http, grpc, version, incarnation } = v;
  if (typeof id !== 'string' || typeof incarnation !== 'string') return undefined;
  return { id, http: typeof http === 'string' ? http : '', grpc: typeof grpc === 'string' ? grpc : '', version: typeof version === 'string' ? version : '', incarnation };
}

function parseLease(v: Record<string, unknown> | undefined): PartLease | undefined {
  if (!v) return undefined;
  const { owner, epoch } = v;
  if (typeof owner !== 'string' || typeof epoch !== 'number' || !Number.isSafeInteger(epoch)) return undefined;
  return { owner, epoch };
}

function parseReady(v: Record<string, unknown> | undefined): ReadyMark | undefined {
  if (!v || typeof v.incarnation !== 'string') return undefined;
  return { incarnation: v.incarnation };
}

const PARTITION = /^\d{1,6}$/;

/** Turns a watched entry into a change; keys of another shape (a later version's) are ignored. */
export function toChange(e: Pick<KvWatchEntry, 'key' | 'operation' | 'revision' | 'value' | 'json'>): OwnersChange | undefined {
  const live = e.operation === 'PUT';
  const parts = e.key.split('.');
  if (parts[0] === 'member' && parts.length === 2 && parts[1]) {
    const info = live ? parseMember(parseJson(e)) : undefined;
    return { kind: 'member', id: parts[1], info: info && info.id === parts[1] ? info : undefined, revision: e.revision };
  }
  if (parts[0] === 'part' && parts.length === 2 && PARTITION.test(parts[1] ?? '')) {
    return { kind: 'part', partition: Number(parts[1]), lease: live ? parseLease(parseJson(e)) : undefined, revision: e.revision };
  }
  if (parts[0] === 'ready' && parts.length === 3 && PARTITION.test(parts[1] ?? '') && parts[2]) {
    return { kind: 'ready', partition: Number(parts[1]), id: parts[2], mark: live ? parseReady(parseJson(e)) : undefined, revision: e.revision };
  }
  return undefined;
}

export class NatsLeaseStore implements LeaseStore {
  #kv: KV;
  #iter: QueuedIterator<KvWatchEntry> | undefined;
  #onChange: ((c: OwnersChange) => void) | undefined;
  #closed = false;
  /** highest revision the watch delivered */
  #seen = 0;
  /** an acknowledged own write the watch has not delivered yet, and when it was acknowledged */
  #probe: { revision: number; at: number } | undefined;
  #restarting = false;
  /** how many times the watch was recreated (diagnostics, tests) */
  watchRestarts = 0;

  /** `kv`: the owners bucket (openOwnersBucket, or the one ensureResources opened) */
  constructor(kv: KV) {
    this.#kv = kv;
  }

  async watch(onChange: (change: OwnersChange) => void): Promise<void> {
    this.#onChange = onChange;
    await this.#startWatch();
  }

  async #startWatch(): Promise<void> {
    const iter = await this.#kv.watch({ key: '>' });
    if (this.#closed) {
      iter.stop();
      return;
    }
    this.#iter = iter;
    void (async () => {
      try {
        for await (const e of iter) {
          if (e.revision > this.#seen) this.#seen = e.revision;
          if (this.#probe && this.#seen >= this.#probe.revision) this.#probe = undefined;
          const c = toChange(e);
          if (c) this.#onChange?.(c);
        }
      } catch {
        /* the watch ended with an error: the stall probe recreates it */
      }
    })();
  }

  /** Recreates the watch if an acknowledged write did not come back through it in time. */
  #checkWatch(): void {
    const p = this.#probe;
    if (!p || this.#restarting || this.#closed || performance.now() - p.at < WATCH_STALL_MS) return;
    this.#restarting = true;
    this.#probe = undefined;
    this.watchRestarts++;
    this.#iter?.stop();
    this.#iter = undefined;
    this.#startWatch()
      .catch(() => {
        /* retried at the next heartbeat */
      })
      .finally(() => {
        this.#restarting = false;
      });
  }

  /** diagnostics: highest revision the watch delivered, the unconfirmed own write it waits for */
  get watchState(): { seen: number; waitingFor: number | undefined } {
    return { seen: this.#seen, waitingFor: this.#probe?.revision };
  }

  async putMember(info: MemberInfo): Promise<number> {
    this.#checkWatch();
    const revision = await this.#kv.put(`member.${info.id}`, JSON.stringify(info), { timeout: KV_REQUEST_TIMEOUT_MS });
    if (revision > this.#seen && !this.#probe) this.#probe = { revision, at: performance.now() };
    return revision;
  }

  async deleteMember(id: string): Promise<void> {
    await bounded(`delete member.${id}`, this.#kv.delete(`member.${id}`));
  }

  async casPart(partition: number, lease: PartLease, revision: number): Promise<CasResult> {
    try {
      // previousSeq 0 is "must not exist" (kv.update refuses 0 synchronously, §13.11)
      const r = await this.#kv.put(`part.${partition}`, JSON.stringify(lease), { previousSeq: revision, timeout: KV_REQUEST_TIMEOUT_MS });
      return { ok: true, revision: r };
    } catch (err) {
      if (isWrongLastSequence(err)) return { ok: false };
      throw err;
    }
  }

  async getPart(partition: number): Promise<{ lease: PartLease | undefined; revision: number } | undefined> {
    const e = await bounded(`get part.${partition}`, this.#kv.get(`part.${partition}`));
    if (!e) return undefined;
    return { lease: e.operation === 'PUT' ? parseLease(parseJson(e)) : undefined, revision: e.revision };
  }

  async putReady(partition: number, id: string, mark: ReadyMark): Promise<void> {
    await this.#kv.put(`ready.${partition}.${id}`, JSON.stringify(mark), { timeout: KV_REQUEST_TIMEOUT_MS });
  }

  async deleteReady(partition: number, id: string): Promise<void> {
    await bounded(`delete ready.${partition}.${id}`, this.#kv.delete(`ready.${partition}.${id}`));
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#onChange = undefined;
    this.#iter?.stop();
    this.#iter = undefined;
  }
}
