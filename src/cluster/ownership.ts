// This file is long because the lease protocol (heartbeat, claim, renew, hand over, fence) is one state machine whose
// steps must be read together to see that it is safe.
import { randomBytes } from 'node:crypto';
import type { FoldMode } from '../config.ts';
import { preferredOwner } from '../core/hrw.ts';
import { NODE_ID_PATTERN, type LeaseStore, type MemberInfo, type OwnersChange, type PartLease, type ReadyMark } from '../store/lease-store.ts';

/**
 * Partition leases (CLUSTER.md §6). Every node runs one `Ownership`: it heartbeats `member.<id>`, watches the owners
 * bucket, and every EVAL_MS decides, with `decide()` (pure, unit-tested with an injected clock), what to renew, claim,
 * hand over or release. The engine learns the outcome through `onGain` / `onLose` / `onStandby` and asks `serves(n)`
 * before answering each read.
 *
 * Safety does not rest on clocks agreeing: liveness is "this key's revision has not changed for LEASE_MS on my own
 * monotonic clock", every change of a lease is a compare-and-set at the revision the writer saw, and an owner serves
 * only while `now − (send time of its last successful renewal) < FENCE_MS`. A rival claims at the earliest LEASE_MS
 * after it *received* that renewal, which is after it was sent: the owner has stopped FENCE_MS after sending, 1.5 s
 * before anyone may claim.
 */

/** A member or lease whose revision has not changed for this long, on the observer's clock, is dead. */
export const LEASE_MS = 5_000;
/** An owner serves a partition only this long after sending its last successful renewal: 1.5 s inside LEASE_MS. */
export const FENCE_MS = 3_500;
/**
 * A new (or returning) member must be seen this long before it is preferred: its heartbeats must be steady first.
 * It must also have been seen to heartbeat at all (a second revision of its key): see MemberView.confirmed.
 */
export const SETTLE_MS = 2_000;
/** Heartbeat and renewal period: two renewals may fail before the fence, four before the lease is dead. */
export const RENEW_MS = 1_000;
/** How often the rules run: a released or expired lease is claimed within about this long. */
export const EVAL_MS = 250;
/**
 * Every node (this one included) heartbeats each RENEW_MS, so the watch is never silent this long unless the bucket
 * or this node's link to it is down. Then nobody's revision could change: a silence longer than this does not count
 * towards any key's age (a stream leader failover stalls writes 4–7 s, §10; without this rule every lease would look
 * dead to every node when it ends). Ages run on an "active clock": the observer's clock minus such silences.
 */
export const WATCH_GAP_MS = 2_500;

export interface MemberView {
  info: MemberInfo | undefined;
  revision: number;
  /** active clock (see WATCH_GAP_MS) when this revision arrived */
  changedAt: number;
  /** observer clock since when the member is continuously alive with this incarnation */
  liveSince: number;
  /**
   * A later revision of this incarnation arrived while it was alive: it heartbeats. A key seen only once may be the
   * last heartbeat of a node that died before this observer started watching; it looks alive for LEASE_MS on this
   * clock, and preferring it kept a joining node from claiming the partitions of a node stopped by SIGTERM for up to
   * that long (the survivor waited ~2 s in test/cluster-failover.test.ts). A live member heartbeats every
   * RENEW_MS, well inside SETTLE_MS, so this delays no live member.
   */
  confirmed: boolean;
}

export interface PartView {
  lease: PartLease | undefined;
  revision: number;
  /** active clock when this revision arrived */
  changedAt: number;
}

/** What the observer knows: every key with the local time its current revision arrived. */
export interface Observed {
  members: Map<string, MemberView>;
  parts: Map<number, PartView>;
  /** `${n}.${id}` → mark */
  ready: Map<string, { mark: ReadyMark | undefined; revision: number }>;
  /** observer clock of the watch's latest delivery */
  lastDelivery: number;
  /** total length of the watch's silences longer than WATCH_GAP_MS so far (they do not age anything) */
  blindMs: number;
}

export function emptyObserved(): Observed {
  return { members: new Map(), parts: new Map(), ready: new Map(), lastDelivery: -Infinity, blindMs: 0 };
}

/** The observer's clock minus the watch's long silences (including one going on now). */
export function activeClock(o: Observed, now: number): number {
  const silent = now - o.lastDelivery;
  return now - o.blindMs - (silent > WATCH_GAP_MS ? silent : 0);
}

/** How long a key has been unchanged as far as this observer could see. */
export function ageOf(o: Observed, changedAt: number, now: number): number {
  return activeClock(o, now) - changedAt;
}

/** Records a watched change at observer time `now` (pure apart from mutating `o`); stale revisions are ignored. */
export function observe(o: Observed, c: OwnersChange, now: number): boolean {
  if (now - o.lastDelivery > WATCH_GAP_MS && o.lastDelivery !== -Infinity) o.blindMs += now - o.lastDelivery;
  o.lastDelivery = now;
  const at = activeClock(o, now);
  if (c.kind === 'member') {
    const prev = o.members.get(c.id);
    if (prev && c.revision <= prev.revision) return false;
    const wasAlive = prev !== undefined && isAlive(o, prev, now) && prev.info!.incarnation === c.info?.incarnation;
    o.members.set(c.id, { info: c.info, revision: c.revision, changedAt: at, liveSince: wasAlive ? prev.liveSince : now, confirmed: wasAlive });
    return true;
  }
  if (c.kind === 'part') {
    const prev = o.parts.get(c.partition);
    if (prev && c.revision <= prev.revision) return false;
    o.parts.set(c.partition, { lease: c.lease, revision: c.revision, changedAt: at });
    return true;
  }
  const key = `${c.partition}.${c.id}`;
  const prev = o.ready.get(key);
  if (prev && c.revision <= prev.revision) return false;
  o.ready.set(key, { mark: c.mark, revision: c.revision });
  return true;
}

export function isAlive(o: Observed, m: MemberView | undefined, now: number): boolean {
  return m !== undefined && m.info !== undefined && ageOf(o, m.changedAt, now) < LEASE_MS;
}

/** Live members seen heartbeating, for at least SETTLE_MS: the candidates of rendezvous hashing. */
export function eligibleMembers(o: Observed, now: number): string[] {
  const out: string[] = [];
  for (const [id, m] of o.members) if (isAlive(o, m, now) && m.confirmed && now - m.liveSince >= SETTLE_MS) out.push(id);
  return out;
}

/** A lease this node holds. */
export interface Held {
  epoch: number;
  revision: number;
  /** send time of the last renewal (or the claim) that succeeded */
  lastRenewSent: number;
}

export type Action =
  /** compare-and-set our own lease at its revision, same epoch */
  | { type: 'renew'; partition: number; revision: number; epoch: number }
  /** take the lease: create (revision 0) or replace at the observed revision, epoch + 1 */
  | { type: 'claim'; partition: number; revision: number; epoch: number }
  /** write `owner: ""` at `revision`: handing a held lease to its preferred owner, or clearing one of an earlier life */
  | { type: 'release'; partition: number; revision: number; epoch: number; held: boolean }
  /** the fence expired: stop serving and forget the lease (it is claimed again through the rules if still ours) */
  | { type: 'fenced'; partition: number };

export interface DecideInput {
  me: string;
  partitions: number;
  now: number;
  observed: Observed;
  held: ReadonlyMap<number, Held>;
  /** partitions with a request in flight: nothing new is decided for them */
  busy: ReadonlySet<number>;
  fold: FoldMode;
}

export interface Decision {
  actions: Action[];
  /** preferred owner per partition (undefined while no member is eligible) */
  preferred: Array<string | undefined>;
  /** partitions this node should fold without owning them (about to take them; `all`: every partition) */
  standby: Set<number>;
}

export function readyFor(o: Observed, partition: number, id: string): boolean {
  const mark = o.ready.get(`${partition}.${id}`)?.mark;
  const info = o.members.get(id)?.info;
  return mark !== undefined && info !== undefined && mark.incarnation === info.incarnation;
}

/** The rules of §6 for one evaluation: pure, so every branch is tested with made-up times. */
export function decide(input: DecideInput): Decision {
  const { me, partitions, now, observed: o, held, busy, fold } = input;
  const eligible = eligibleMembers(o, now);
  const actions: Action[] = [];
  const preferred: Array<string | undefined> = [];
  const standby = new Set<number>();
  for (let n = 0; n < partitions; n++) {
    const pref = preferredOwner(n, eligible);
    preferred.push(pref);
    const h = held.get(n);
    if (fold === 'all' || (pref === me && !h)) standby.add(n);
    if (busy.has(n)) continue;
    if (h) {
      if (now - h.lastRenewSent >= FENCE_MS) {
        actions.push({ type: 'fenced', partition: n });
      } else if (pref !== undefined && pref !== me && readyFor(o, n, pref)) {
        actions.push({ type: 'release', partition: n, revision: h.revision, epoch: h.epoch, held: true });
      } else if (now - h.lastRenewSent >= RENEW_MS) {
        actions.push({ type: 'renew', partition: n, revision: h.revision, epoch: h.epoch });
      }
      continue;
    }
    const p = o.parts.get(n);
    const mine = p?.lease?.owner === me;
    const free = p === undefined || p.lease === undefined || p.lease.owner === '' || mine || ageOf(o, p.changedAt, now) >= LEASE_MS;
    if (pref === me && free) {
      actions.push({ type: 'claim', partition: n, revision: p?.revision ?? 0, epoch: (p?.lease?.epoch ?? 0) + 1 });
    } else if (mine && p) {
      // ours from an earlier life (or a renewal that landed after we fenced): hand it back so the preferred claims now
      actions.push({ type: 'release', partition: n, revision: p.revision, epoch: p.lease!.epoch, held: false });
    }
  }
  return { actions, preferred, standby };
}

/** What the engine hears. Calls are synchronous and never overlap; keep them quick (start work, do not await it). */
export interface OwnershipListener {
  /** this node now owns n (serves its reads; `all`: writes its snapshots) */
  onGain?(partition: number): void;
  /** this node no longer owns n: stop answering its reads (already refused by serves()) */
  onLose?(partition: number): void;
  /**
   * fold n ahead of owning it (true), or no need to any more (false); `all`: true for every partition at start. The
   * engine folds n while it owns n or wants it as a standby: a gain is followed at once by `onStandby(n, false)`.
   */
  onStandby?(partition: number, wanted: boolean): void;
  /** a request to the owners bucket failed (diagnostics; the rules retry by themselves) */
  onError?(err: unknown): void;
}

export interface OwnershipOptions {
  nodeId: string;
  partitions: number;
  /** what `member.<id>` advertises */
  member: { http: string; grpc: string; version: string };
  fold?: FoldMode;
  listener?: OwnershipListener;
  /** monotonic milliseconds (tests inject one); default performance.now */
  now?: () => number;
  /** default: 16 random bytes, hex */
  incarnation?: string;
}

export class Ownership {
  readonly nodeId: string;
  readonly partitions: number;
  readonly fold: FoldMode;
  readonly incarnation: string;
  #store: LeaseStore;
  #info: MemberInfo;
  #listener: OwnershipListener;
  #now: () => number;
  #observed = emptyObserved();
  #held = new Map<number, Held>();
  #busy = new Set<number>();
  #standby = new Set<number>();
  #preferred: Array<string | undefined> = [];
  #ready = new Set<number>();
  #timer: NodeJS.Timeout | undefined;
  #kick: NodeJS.Immediate | undefined;
  #heartbeatSent = -Infinity;
  #heartbeatBusy = false;
  #inflight = new Set<Promise<void>>();
  #running = false;
  /** stopped without release (a simulated crash): late answers change nothing */
  #frozen = false;

  constructor(store: LeaseStore, opts: OwnershipOptions) {
    if (!NODE_ID_PATTERN.test(opts.nodeId)) throw new Error(`node id must match ${NODE_ID_PATTERN}: ${JSON.stringify(opts.nodeId)}`);
    if (!Number.isInteger(opts.partitions) || opts.partitions < 1) throw new Error(`partitions must be a positive integer: ${opts.partitions}`);
    this.#store = store;
    this.nodeId = opts.nodeId;
    this.partitions = opts.partitions;
    this.fold = opts.fold ?? 'owner';
    this.incarnation = opts.incarnation ?? randomBytes(16).toString('hex');
    this.#info = { id: opts.nodeId, ...opts.member, incarnation: this.incarnation };
    this.#listener = opts.listener ?? {};
    this.#now = opts.now ?? (() => performance.now());
  }

  /** Joins: watches the bucket, heartbeats at once, then evaluates every EVAL_MS. */
  async start(): Promise<void> {
    if (this.#running || this.#frozen) return;
    await this.#store.watch((c) => {
      if (this.#frozen || !observe(this.#observed, c, this.#now())) return;
      // a released lease or a member gone: act now rather than at the next tick
      if ((c.kind === 'part' && (c.lease === undefined || c.lease.owner === '')) || (c.kind === 'member' && c.info === undefined) || c.kind === 'ready') this.#kickSoon();
    });
    this.#running = true;
    this.#heartbeat();
    this.#evaluate();
    this.#timer = setInterval(() => {
      this.#heartbeat();
      this.#evaluate();
    }, EVAL_MS);
    this.#timer.unref?.();
  }

  /** True only while this node holds n and its fence has not expired: check before answering each read. */
  serves(partition: number): boolean {
    const h = this.#held.get(partition);
    return h !== undefined && this.#now() - h.lastRenewSent < FENCE_MS;
  }

  /** Partitions this node serves right now. */
  owned(): number[] {
    const out: number[] = [];
    for (let n = 0; n < this.partitions; n++) if (this.serves(n)) out.push(n);
    return out;
  }

  /** Whether the engine should fold n without owning it (see onStandby). */
  wantsStandby(partition: number): boolean {
    return this.#standby.has(partition);
  }

  /** The preferred owner of n as of the last evaluation (undefined while no member has settled). */
  preferred(partition: number): string | undefined {
    return this.#preferred[partition];
  }

  /** The owner the lease names, if the lease is alive as this node sees it (diagnostics; reads go by subject). */
  ownerOf(partition: number): string | undefined {
    const p = this.#observed.parts.get(partition);
    if (!p?.lease || p.lease.owner === '' || ageOf(this.#observed, p.changedAt, this.#now()) >= LEASE_MS) return undefined;
    return p.lease.owner;
  }

  /**
   * Whether this node's view of the bucket is current (the watch delivered within WATCH_GAP_MS). False while the
   * bucket is unavailable or this node is cut off: /health can report it; leases do not age meanwhile.
   */
  seesBucket(): boolean {
    return this.#now() - this.#observed.lastDelivery <= WATCH_GAP_MS;
  }

  /** Live members including this one (rate limits divide by their count, §8). */
  liveMembers(): MemberInfo[] {
    const now = this.#now();
    const out: MemberInfo[] = [];
    for (const m of this.#observed.members.values()) if (isAlive(this.#observed, m, now)) out.push(m.info!);
    return out;
  }

  /** The engine's standby fold of n caught up: the current owner may now hand n over. */
  async markReady(partition: number): Promise<void> {
    this.#ready.add(partition);
    await this.#store.putReady(partition, this.nodeId, { incarnation: this.incarnation });
  }

  /** This node stopped folding n (no longer a valid hand-over target). */
  async clearReady(partition: number): Promise<void> {
    this.#ready.delete(partition);
    await this.#store.deleteReady(partition, this.nodeId);
  }

  /**
   * Leaves. `release: true` (SIGTERM): stop serving, delete `member.<id>` (so every observer stops preferring this
   * node at once), release every lease by compare-and-set and withdraw the ready marks; successors claim within
   * about EVAL_MS. `release: false` only stops the timers and the watch (a crash, for tests): the leases then expire.
   */
  async stop(opts: { release?: boolean } = {}): Promise<void> {
    if (!this.#running) return;
    this.#running = false;
    clearInterval(this.#timer);
    if (this.#kick) clearImmediate(this.#kick);
    if (opts.release === false) {
      this.#frozen = true;
      await this.#store.close();
      return;
    }
    // let claims and renewals in flight land first, so every lease this node got is released below
    await Promise.all([...this.#inflight]);
    const held = [...this.#held];
    this.#held.clear();
    for (const [n] of held) this.#emit('onLose', n);
    const errors: unknown[] = [];
    const attempt = async (p: Promise<unknown>) => p.catch((err: unknown) => errors.push(err));
    await attempt(this.#store.deleteMember(this.nodeId));
    await Promise.all(held.map(([n, h]) => attempt(this.#store.casPart(n, { owner: '', epoch: h.epoch }, h.revision))));
    await Promise.all([...this.#ready].map((n) => attempt(this.#store.deleteReady(n, this.nodeId))));
    this.#ready.clear();
    await this.#store.close();
    for (const err of errors) this.#listener.onError?.(err);
  }

  #emit(event: 'onGain' | 'onLose', partition: number): void {
    try {
      this.#listener[event]?.(partition);
    } catch (err) {
      this.#listener.onError?.(err);
    }
  }

  #kickSoon(): void {
    if (this.#kick || !this.#running) return;
    this.#kick = setImmediate(() => {
      this.#kick = undefined;
      this.#evaluate();
    });
  }

  #heartbeat(): void {
    const now = this.#now();
    if (this.#heartbeatBusy || now - this.#heartbeatSent < RENEW_MS) return;
    this.#heartbeatBusy = true;
    this.#heartbeatSent = now;
    this.#store
      .putMember(this.#info)
      .catch((err: unknown) => this.#listener.onError?.(err))
      .finally(() => {
        this.#heartbeatBusy = false;
      });
  }

  #evaluate(): void {
    if (!this.#running) return;
    const now = this.#now();
    const d = decide({ me: this.nodeId, partitions: this.partitions, now, observed: this.#observed, held: this.#held, busy: this.#busy, fold: this.fold });
    this.#preferred = d.preferred;
    for (let n = 0; n < this.partitions; n++) this.#setStandby(n, d.standby.has(n));
    for (const a of d.actions) this.#act(a, now);
  }

  #setStandby(n: number, want: boolean): void {
    if (want === this.#standby.has(n)) return;
    if (want) this.#standby.add(n);
    else this.#standby.delete(n);
    try {
      this.#listener.onStandby?.(n, want);
    } catch (err) {
      this.#listener.onError?.(err);
    }
  }

  #act(a: Action, sentAt: number): void {
    const n = a.partition;
    if (a.type === 'fenced') {
      this.#held.delete(n);
      // Still its preferred owner (typically the owners bucket is in a leader failover and renewals fail): the fold
      // goes on as a standby's, so the claim once the bucket answers serves at once, without restoring the
      // partition (snapshot, replay) in the middle of the failover. Serving stops now all the same.
      if (this.fold === 'owner' && this.#preferred[n] === this.nodeId) this.#setStandby(n, true);
      this.#emit('onLose', n);
      return;
    }
    this.#busy.add(n);
    let request: Promise<void>;
    if (a.type === 'renew' || a.type === 'claim') {
      const held = this.#held.get(n);
      request = this.#store.casPart(n, { owner: this.nodeId, epoch: a.epoch }, a.revision).then(async (r) => {
        if (this.#frozen) return;
        if (a.type === 'renew') {
          if (this.#held.get(n) !== held) return; // fenced meanwhile: the rules see the lease as ours and sort it out
          if (r.ok) {
            held!.revision = r.revision;
            held!.lastRenewSent = sentAt;
            return;
          }
          // a renewal of ours may have landed though its answer was lost: then the lease is still ours
          const cur = await this.#store.getPart(n);
          if (this.#held.get(n) !== held) return;
          if (cur?.lease?.owner === this.nodeId && cur.lease.epoch === held!.epoch) {
            held!.revision = cur.revision;
            return;
          }
          this.#held.delete(n);
          this.#emit('onLose', n);
          return;
        }
        if (r.ok && !this.#held.has(n)) {
          this.#held.set(n, { epoch: a.epoch, revision: r.revision, lastRenewSent: sentAt });
          this.#emit('onGain', n);
          if (this.fold === 'owner') this.#setStandby(n, false); // owned now: the fold goes on as the owner's
        }
      });
    } else {
      if (a.held) {
        // hand-over: stop serving before the lease says so
        this.#held.delete(n);
        this.#emit('onLose', n);
      }
      request = this.#store.casPart(n, { owner: '', epoch: a.epoch }, a.revision).then(() => undefined);
    }
    const done = request
      .catch((err: unknown) => this.#listener.onError?.(err))
      .finally(() => {
        this.#busy.delete(n);
        this.#inflight.delete(done);
      });
    this.#inflight.add(done);
  }
}
