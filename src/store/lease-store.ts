/**
 * The shared state behind partition ownership (CLUSTER.md §6), as `src/cluster/ownership.ts` needs it. The cluster
 * implementation is the KV bucket `analytics_owners_v1` (`src/store/nats/owners.ts`); the lease decisions themselves
 * live in the engine and are unit-tested without it.
 *
 * Keys: `member.<nodeId>` (written every second by a live node), `part.<n>` (the lease of partition n, changed only by
 * compare-and-set), `ready.<n>.<nodeId>` (that node has caught up on n as a standby and can take it over).
 */

/** Node ids are KV key tokens and subject-safe: letters, digits, `_` and `-`. */
export const NODE_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

/** `member.<id>`: who a node is and where it answers. */
export interface MemberInfo {
  id: string;
  /** the node's HTTP base URL (diagnostics; reads are forwarded over NATS, not HTTP) */
  http: string;
  /** the node's gRPC address */
  grpc: string;
  /** the service version it runs */
  version: string;
  /**
   * Random per process start. A node restarted under the same id is a new member (it must settle again and its
   * `ready` marks of an earlier life do not count), even if it came back before observers saw it die.
   */
  incarnation: string;
}

/** `part.<n>`: the lease. `owner: ""` is a released lease; `epoch` grows by one with every claim. */
export interface PartLease {
  owner: string;
  epoch: number;
}

/** `ready.<n>.<id>`: written by that node once its standby fold of n caught up; only valid for that incarnation. */
export interface ReadyMark {
  incarnation: string;
}

/** One key's current value as the watch delivered it; `undefined` value: deleted (or unreadable). */
export type OwnersChange =
  | { kind: 'member'; id: string; info: MemberInfo | undefined; revision: number }
  | { kind: 'part'; partition: number; lease: PartLease | undefined; revision: number }
  | { kind: 'ready'; partition: number; id: string; mark: ReadyMark | undefined; revision: number };

/** Outcome of a compare-and-set: `ok: false` when another writer changed the key first (a lost race, not an error). */
export type CasResult = { ok: true; revision: number } | { ok: false };

export interface LeaseStore {
  /**
   * Delivers every key's current value, then every change, each with its revision (revisions only grow). May deliver
   * a value again (after a watch restart); an observer ignores revisions it already saw. Resolves once watching.
   */
  watch(onChange: (change: OwnersChange) => void): Promise<void>;
  /** writes `member.<id>`; resolves with the new revision */
  putMember(info: MemberInfo): Promise<number>;
  deleteMember(id: string): Promise<void>;
  /** creates `part.<n>` if absent (revision 0) or replaces the value at `revision` (compare-and-set) */
  casPart(partition: number, lease: PartLease, revision: number): Promise<CasResult>;
  /** the current lease and revision, read past the watch (after a CAS failed) */
  getPart(partition: number): Promise<{ lease: PartLease | undefined; revision: number } | undefined>;
  putReady(partition: number, id: string, mark: ReadyMark): Promise<void>;
  deleteReady(partition: number, id: string): Promise<void>;
  /** stops the watch (not the connection, which the caller owns) */
  close(): Promise<void>;
}
