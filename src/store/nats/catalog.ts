import { Bucket, type KV, type KvEntry } from '@nats-io/kv';
import type { KeyRecord, ProjectRecord } from '../records.ts';
import type { Catalog } from '../seams.ts';
import { KvMirror } from './kv-mirror.ts';

/**
 * Projects and key hashes shared by every node (CLUSTER.md §8): the KV bucket `analytics_catalog_v1`, keys
 * `project.<id>` and `key.<sha256hex>` (JSON values), mirrored into memory by a watch so authentication never waits
 * on the network. Changes made here are applied to the mirror as soon as the KV answers (read-your-writes on this
 * node) and reach the other nodes through their watches (typically within milliseconds). A key just created on
 * another node and not yet mirrored (or mirrored before its project) gets one `kv.get` of each (refreshKey) before a 401.
 *
 * The watch is a push consumer; like ordered consumers it may not recover by itself after a server loss (§13.9), so
 * a check compares the bucket's last revision with the mirror's and restarts the watch after the last applied one.
 */

const PROJECT = 'project.';
const KEY = 'key.';
/** KV keys allow `[-/_=.a-zA-Z0-9]`: ids of these characters are used as they are, others base64url after a '='. */
const SAFE_ID = /^[A-Za-z0-9_-]+$/;
const KEY_HASH = /^[0-9a-f]{64}$/;

/** A project id as one KV key token (catalog and sealed rows). */
export function idToken(id: string): string {
  return SAFE_ID.test(id) ? id : `=${Buffer.from(id, 'utf8').toString('base64url')}`;
}

export function idOfToken(token: string): string {
  return token.startsWith('=') ? Buffer.from(token.slice(1), 'base64url').toString('utf8') : token;
}

export function projectKey(id: string): string {
  return PROJECT + idToken(id);
}

function projectIdOf(kvKey: string): string {
  return idOfToken(kvKey.slice(PROJECT.length));
}

export function keyKey(hash: string): string {
  if (!KEY_HASH.test(hash)) throw new Error(`a key hash is 64 lowercase hex digits: ${hash}`);
  return KEY + hash;
}

type ChangeFn = (what: { kind: 'project' | 'key'; id: string }) => void;

export class KvCatalog implements Catalog {
  private readonly projectsById = new Map<string, ProjectRecord>();
  private readonly keysByHash = new Map<string, KeyRecord>();
  /** KV key -> revision of the value (or delete) the mirror holds: an older one arriving late is ignored */
  private readonly revisions = new Map<string, number>();
  private readonly listeners = new Set<ChangeFn>();
  private mirror!: KvMirror;

  private constructor(
    readonly kv: KV,
    private readonly log: (line: string) => void,
    private readonly beforeDelete: ((projectId: string) => Promise<void>) | undefined,
    private readonly onOtherKey: ((e: KvEntry) => void) | undefined,
  ) {}

  /**
   * Starts the mirror; await `ready()` before serving (health answers 503 until then). `beforeDeleteProject`: runs
   * before a project is deleted (cluster: records its pending erasure, so a crash cannot lose it). `onOtherKey`: the
   * bucket's other entries (cluster: erase floors), delivered by the same stall-checked watch.
   */
  static async open(
    kv: KV,
    opts: { log?: (line: string) => void; beforeDeleteProject?: (projectId: string) => Promise<void>; onOtherKey?: (e: KvEntry) => void } = {},
  ): Promise<KvCatalog> {
    // Its gets must see the newest write (a key another node created a moment ago, read by refreshKey before a 401):
    // a direct get may be answered by a replica that has not applied it yet, a get through the stream leader has.
    if (kv instanceof Bucket) kv.direct = false;
    const c = new KvCatalog(kv, opts.log ?? (() => {}), opts.beforeDeleteProject, opts.onOtherKey);
    c.mirror = await KvMirror.open(kv, { name: 'catalog mirror', apply: (e) => (e.key.startsWith(PROJECT) || e.key.startsWith(KEY) ? c.apply(e) : c.onOtherKey?.(e)), log: c.log });
    return c;
  }

  /** Resolves once the values stored when the catalog opened are in the mirror. */
  ready(): Promise<void> {
    return this.mirror.ready();
  }

  get isMirrorReady(): boolean {
    return this.mirror.isMirrorReady;
  }

  /** Applies one KV value or delete to the mirror (unless the mirror holds a newer revision of that key). */
  private apply(e: Pick<KvEntry, 'key' | 'revision' | 'operation'> & { json<T>(): T }): void {
    const known = this.revisions.get(e.key);
    if (known !== undefined && known >= e.revision) return;
    let change: { kind: 'project' | 'key'; id: string } | undefined;
    const gone = e.operation !== 'PUT';
    if (e.key.startsWith(PROJECT)) {
      const id = projectIdOf(e.key);
      if (gone) this.projectsById.delete(id);
      else this.projectsById.set(id, e.json<ProjectRecord>());
      change = { kind: 'project', id };
    } else if (e.key.startsWith(KEY)) {
      const hash = e.key.slice(KEY.length);
      if (gone) this.keysByHash.delete(hash);
      else this.keysByHash.set(hash, e.json<KeyRecord>());
      change = { kind: 'key', id: hash };
    } else {
      return; // salts, cluster.config: not the mirror's
    }
    this.revisions.set(e.key, e.revision);
    for (const fn of this.listeners) {
      try {
        fn(change);
      } catch (err) {
        this.log(`catalog change listener failed: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }

  private applyLocal(key: string, revision: number, value: unknown): void {
    this.apply({ key, revision, operation: value === undefined ? 'DEL' : 'PUT', json: <T>() => value as T });
  }

  project(id: string): ProjectRecord | undefined {
    return this.projectsById.get(id);
  }

  projects(): ProjectRecord[] {
    return [...this.projectsById.values()];
  }

  key(hash: string): KeyRecord | undefined {
    return this.keysByHash.get(hash);
  }

  keys(projectId: string): Array<[string, KeyRecord]> {
    const out: Array<[string, KeyRecord]> = [];
    for (const [h, k] of this.keysByHash) if (k.projectId === projectId) out.push([h, k]);
    return out;
  }

  /** Key hashes first, then the project: a node that sees a key before its project answers 401, never a half project. */
  async putProject(project: ProjectRecord, keyHashes: Array<[string, KeyRecord]>): Promise<void> {
    for (const [hash, rec] of keyHashes) await this.putKey(hash, rec);
    const k = projectKey(project.id);
    const rev = await this.kv.put(k, JSON.stringify(project));
    this.applyLocal(k, rev, project);
  }

  async putKey(hash: string, record: KeyRecord): Promise<void> {
    const k = keyKey(hash);
    const rev = await this.kv.put(k, JSON.stringify(record));
    this.applyLocal(k, rev, record);
  }

  async deleteKey(hash: string): Promise<void> {
    await this.kv.delete(keyKey(hash)); // not purge: see NO_PURGE in kv-mirror.ts
    await this.refresh(keyKey(hash));
  }

  /** The pending erasure (if the store records one), then the project (its keys then answer 401 at once), then its keys. */
  async deleteProject(projectId: string): Promise<void> {
    await this.beforeDelete?.(projectId);
    const keys = this.keys(projectId);
    await this.kv.delete(projectKey(projectId)); // not purge: see NO_PURGE in kv-mirror.ts
    await this.refresh(projectKey(projectId));
    for (const [hash] of keys) await this.deleteKey(hash);
  }

  /**
   * One `kv.get` of a key hash the mirror does not hold yet (created on another node a moment ago), and one of its
   * project when the mirror does not hold that either: the watch may have brought the key (written first) and not
   * yet the project, and a fresh project's key must not answer 401 on a node that is a watch behind.
   */
  async refreshKey(hash: string): Promise<KeyRecord | undefined> {
    if (!KEY_HASH.test(hash)) return undefined;
    await this.refresh(keyKey(hash));
    const rec = this.keysByHash.get(hash);
    if (rec?.projectId !== undefined && !this.projectsById.has(rec.projectId)) await this.refresh(projectKey(rec.projectId));
    return rec;
  }

  private async refresh(k: string): Promise<void> {
    const e = await this.kv.get(k);
    if (e) this.apply(e);
    else if (this.revisions.has(k)) {
      // gone without a marker: forget it (as a delete one revision past what the mirror held)
      this.applyLocal(k, this.revisions.get(k)! + 1, undefined);
      this.revisions.delete(k);
    }
  }

  /**
   * The admin key of ANALYTICS_ADMIN_KEY: `kv.create` of its hash, so the first node to start stores it and every
   * other node (same key, same hash) finds it there. Returns whether this call stored it.
   */
  async ensureAdminKey(hash: string, record: KeyRecord): Promise<boolean> {
    const k = keyKey(hash);
    try {
      const rev = await this.kv.create(k, JSON.stringify(record));
      this.applyLocal(k, rev, record);
      return true;
    } catch (err) {
      const e = await this.kv.get(k);
      if (!e || e.operation !== 'PUT') throw err;
      this.apply(e);
      return false;
    }
  }

  onChange(fn: ChangeFn): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  async close(): Promise<void> {
    await this.mirror.close();
  }
}
