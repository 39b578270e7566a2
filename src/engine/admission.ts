import type { Config } from '../config.ts';
import type { KeyRecord, ProjectRecord } from '../store/records.ts';
import type { Catalog } from '../store/seams.ts';
import { bearerKey, bearerToken, hashKey } from './keys.ts';
import { isLive } from './lifecycle-helpers.ts';
import { clientBucket, RateLimiter } from './rate-limiter.ts';
import { failure as fail, type EngineError, type Failure as Fail, type Gate, type KeyIdentity, type Outcome, type RateInfo, type RequestMeta } from './types.ts';

/**
 * Who may do what: key identification, scopes, origins, rate limits and the RateLimit-* figures every
 * authenticated answer carries, and the one shutting-down guard of every write. Every endpoint of every face passes
 * one of these gates before its own rules, so precedence (401, 429, 403, 404, then the body) is one rule.
 */

/** Cluster: lookups past the catalog mirror for unknown keys, per client IP (a key made elsewhere appears within ms). */
const KEY_REFRESH_RATE = 5;
const KEY_REFRESH_BURST = 10;

/** A Bearer token that names no live key: cut short, mistyped, revoked or never issued (the caller did send one). */
const UNKNOWN_KEY = 'unknown or revoked API key (check it was copied whole; a revoked key stays refused)';

export interface Principal {
  key: KeyRecord;
  keyHash: string;
}

export type Admitted = Outcome<{ project: ProjectRecord; rate: RateInfo }>;
type AdmittedKey = Outcome<{ who: Principal; rate: RateInfo }>;

export interface AdmissionParts {
  config: Readonly<Config>;
  catalog: Catalog;
  /** the project as the engine holds it (deleted projects are gone at once) */
  project(id: string): ProjectRecord | undefined;
  /** cluster: this node's share of every bucket; one node: 1 */
  rateShare(): number;
  now(): number;
  log(line: string): void;
}

export class Admission {
  private readonly limiter = new RateLimiter();
  private closing = false;

  constructor(private readonly parts: AdmissionParts) {}

  /** Stop taking writes; reads still answer. */
  beginShutdown(): void {
    this.closing = true;
  }

  get isClosing(): boolean {
    return this.closing;
  }

  /** The guard of every write: once shutdown begins, a write is refused before its gate (503 + Retry-After). */
  shuttingDown(): Fail | undefined {
    return this.closing ? fail('unavailable', 'the service is shutting down', { retryAfterSeconds: 1 }) : undefined;
  }

  /** The gate of a change to /projects/{id}[/keys|/goals|/history]: the shutting-down guard, then admitProject. */
  admitChange(meta: RequestMeta, projectId: string): Admitted {
    return this.shuttingDown() ?? this.admitProject(meta, projectId);
  }

  /** The gate of POST /analytics, after one lookup of a key the catalog mirror may not hold yet. */
  async admitIngestFresh(meta: RequestMeta): Promise<Admitted> {
    await this.refreshUnknownKey(meta);
    return this.admitIngest(meta);
  }

  /**
   * Plausible's Events API (POST /api/event) sends no key: the site's project, found by its domain, takes the event
   * under the rules of its publishable key (the key's and the client's rate limits, origins, referrers).
   */
  admitIngestForProject(meta: RequestMeta, project: ProjectRecord): Admitted {
    const now = this.parts.now();
    const pk = this.parts.catalog.keys(project.id).find(([, k]) => k.kind === 'publishable' && isLive(k, now));
    if (!pk) return fail('forbidden', `project "${project.id}" has no live publishable key to take events without one`, {}, this.unspentRate());
    const who: Principal = { key: pk[1], keyHash: pk[0] };
    const limited = this.rateLimit(who, meta);
    if (!limited.ok) return limited;
    const scope = this.checkOrigin(project, who.key, meta, limited.value);
    if (scope) return scope;
    return { ok: true, value: { project, rate: limited.value } };
  }

  /** The gate of the reads, after one lookup of a key the catalog mirror may not hold yet. */
  async admitReadFresh(meta: RequestMeta, requested: string | undefined): Promise<Admitted> {
    await this.refreshUnknownKey(meta);
    return this.admitRead(meta, requested);
  }

  /**
   * A request the face refused on the wire (unsupported type, body too large, bad JSON). The caller still passes the
   * endpoint's gate first: a bad key answers 401 before a bad body, and every authenticated answer costs a token and
   * carries RateLimit-* headers, whatever was wrong with the body.
   */
  refuse(meta: RequestMeta, endpoint: Gate, error: EngineError): Fail {
    const closed = this.shuttingDown();
    if (closed) return closed;
    const admitted = endpoint === 'ingest' ? this.admitIngest(meta) : endpoint === 'read' ? this.admitReader(meta) : this.admitManage(meta);
    if (!admitted.ok) return admitted;
    return fail(error.code, error.message, error, admitted.value.rate);
  }

  identify(meta: RequestMeta): Outcome<KeyIdentity> {
    const who = this.authenticate(meta);
    if (!who.ok) return who;
    return { ok: true, value: { kind: who.value.key.kind, projectId: who.value.key.projectId } };
  }

  /** The gate of GET and POST /projects: an admin or secret key, within its limits, from an allowed origin. */
  admitManage(meta: RequestMeta): AdmittedKey {
    const admitted = this.admit(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    if (key.kind === 'publishable') return fail('forbidden', 'pk_ keys can only ingest', {}, rate);
    if (key.kind === 'read') return fail('forbidden', 'rk_ keys can only read metrics', {}, rate);
    const own = key.projectId === undefined ? undefined : this.parts.project(key.projectId);
    if (own) {
      const scope = this.checkOrigin(own, key, meta, rate);
      if (scope) return scope;
    }
    return admitted;
  }

  /** The gate of /projects/{id}[/keys...]: an admin key, or a secret key of that very project. */
  admitProject(meta: RequestMeta, projectId: string): Admitted {
    const admitted = this.admitManage(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    if (key.kind !== 'admin' && key.projectId !== projectId) return fail('forbidden', 'the key belongs to another project', {}, rate);
    const project = this.parts.project(projectId);
    if (!project) return fail('not_found', `no project "${projectId}"`, {}, rate);
    return { ok: true, value: { project, rate } };
  }

  /** The gate of the reads: an sk_ key for its own project, or an admin key naming one, from an allowed origin. */
  private admitRead(meta: RequestMeta, requested: string | undefined): Admitted {
    const admitted = this.admit(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    if (key.kind === 'publishable') return fail('forbidden', 'pk_ keys can only ingest; read metrics with the sk_ or rk_ key', {}, rate);
    let projectId: string;
    if (key.kind === 'admin') {
      if (!requested) return fail('invalid_request', 'admin keys must name the project: projectId (the ?projectId= parameter, or the field of a POST /query body)', {}, rate);
      projectId = requested;
    } else {
      if (requested !== undefined && requested !== key.projectId) {
        return fail('forbidden', 'the key belongs to another project', {}, rate);
      }
      projectId = key.projectId!;
    }
    const project = this.parts.project(projectId);
    if (!project) return fail('not_found', `no project "${projectId}"`, {}, rate);
    if (key.kind !== 'admin') {
      const scope = this.checkOrigin(project, key, meta, rate);
      if (scope) return scope;
    }
    return { ok: true, value: { project, rate } };
  }

  /** The gate of POST /analytics: a project key, within its limits, from an allowed origin. */
  private admitIngest(meta: RequestMeta): Admitted {
    const admitted = this.admit(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    if (key.kind === 'admin' || key.projectId === undefined) {
      return fail('forbidden', 'admin keys cannot ingest; use the project\'s sk_ or pk_ key', {}, rate);
    }
    if (key.kind === 'read') return fail('forbidden', 'rk_ keys are read-only; ingest with the sk_ or pk_ key', {}, rate);
    const project = this.parts.project(key.projectId);
    if (!project) return fail('unauthorized', 'the key\'s project no longer exists', {}, rate);
    const scope = this.checkOrigin(project, key, meta, rate);
    if (scope) return scope;
    return { ok: true, value: { project, rate } };
  }

  /** The gate of a read whose project is not known yet (a body that did not parse): every key but pk_. */
  private admitReader(meta: RequestMeta): AdmittedKey {
    const admitted = this.admit(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    if (key.kind === 'publishable') return fail('forbidden', 'pk_ keys can only ingest; read with the sk_ or rk_ key', {}, rate);
    return admitted;
  }

  /**
   * Every gate starts here: a known key, within its limits. Limiting comes before judging scope, so a refused
   * request still costs a token and carries the RateLimit-* headers.
   */
  private admit(meta: RequestMeta): AdmittedKey {
    const who = this.authenticate(meta);
    if (!who.ok) return who;
    const limited = this.rateLimit(who.value, meta);
    if (!limited.ok) return limited;
    return { ok: true, value: { who: who.value, rate: limited.value } };
  }

  private authenticate(meta: RequestMeta): Outcome<Principal> {
    const key = bearerKey(meta.authorization);
    if (key === undefined) {
      if (bearerToken(meta.authorization) !== undefined) return fail('unauthorized', UNKNOWN_KEY, {}, this.unspentRate());
      return fail('unauthorized', 'send Authorization: Bearer <API key>', {}, this.unspentRate());
    }
    const keyHash = hashKey(key);
    const record = this.parts.catalog.key(keyHash);
    if (!record) return fail('unauthorized', UNKNOWN_KEY, {}, this.unspentRate());
    if (!isLive(record, this.parts.now())) return fail('unauthorized', 'the API key has expired', {}, this.unspentRate());
    if (record.projectId !== undefined && !this.parts.project(record.projectId)) {
      return fail('unauthorized', 'the key\'s project was deleted', {}, this.unspentRate());
    }
    return { ok: true, value: { key: record, keyHash } };
  }

  /**
   * Cluster: a key the catalog mirror does not hold (or holds without its project) may have been made on another node
   * a moment ago: one lookup past the mirror before the 401, under a per-client-IP bucket so unknown keys cannot turn
   * into a flood of lookups.
   * Single node: the catalog is the store, nothing to refresh.
   */
  private async refreshUnknownKey(meta: RequestMeta): Promise<void> {
    const key = bearerKey(meta.authorization);
    if (key === undefined) return;
    const hash = hashKey(key);
    const catalog = this.parts.catalog;
    const known = catalog.key(hash);
    if (known !== undefined && (known.projectId === undefined || this.parts.project(known.projectId) !== undefined)) return;
    const bucket = this.limiter.take(`refresh:${clientBucket(meta.ip)}`, KEY_REFRESH_RATE, KEY_REFRESH_BURST, this.parts.now());
    if (!bucket.allowed) return;
    try {
      await catalog.refreshKey(hash);
    } catch (err) {
      this.parts.log(`key lookup failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  /**
   * A 401 has no bucket to report (the caller is nobody), but the contract puts RateLimit-* on every response of an
   * authenticated endpoint: report the default per-key policy, untouched.
   */
  private unspentRate(): RateInfo {
    const burst = this.parts.config.rate.burstPerKey;
    return { limit: burst, remaining: burst, resetSeconds: 0 };
  }

  /** Origin and Referer rules of the project (undefined = allowed). */
  private checkOrigin(project: ProjectRecord, key: KeyRecord, meta: RequestMeta, rate: RateInfo): Fail | undefined {
    if (meta.ownPage === true) return undefined;
    if (project.allowedOrigins.length > 0) {
      if (meta.origin === undefined) {
        if (key.kind === 'publishable') return fail('forbidden', 'this project only accepts pk_ requests from its allowed origins', {}, rate);
      } else if (!project.allowedOrigins.includes(safeOrigin(meta.origin))) {
        return fail('forbidden', `origin ${meta.origin} is not allowed for this project`, {}, rate);
      }
    }
    if (project.allowedReferrers.length > 0 && meta.referer !== undefined) {
      const host = safeHost(meta.referer);
      if (host === undefined || !project.allowedReferrers.includes(host)) {
        return fail('forbidden', 'the Referer host is not allowed for this project', {}, rate);
      }
    }
    return undefined;
  }

  /**
   * One token from the key's bucket and, for pk_ keys, from the client IP's bucket in the key's project. The buckets
   * belong to the key, so their sizes are its own project's (admin keys: the service defaults), whatever the
   * request names.
   */
  private rateLimit(who: Principal, meta: RequestMeta): Outcome<RateInfo> {
    const d = this.parts.config.rate;
    const project = who.key.projectId === undefined ? undefined : this.parts.project(who.key.projectId);
    const r = project?.rate;
    const now = this.parts.now();
    // Cluster: each node takes its share of every bucket (CLUSTER.md §8); one node: the whole bucket.
    const share = this.parts.rateShare();
    const take = (key: string, rate: number, burst: number) => this.limiter.take(key, share === 1 ? rate : rate / share, share === 1 ? burst : Math.ceil(burst / share), now);
    const byKey = take(`k:${who.keyHash}`, r?.perKey ?? d.perKey, r?.burstPerKey ?? d.burstPerKey);
    if (!byKey.allowed) {
      return fail('rate_limited', 'too many requests for this key', { retryAfterSeconds: byKey.retryAfterSeconds }, byKey.info);
    }
    if (who.key.kind === 'publishable' && project) {
      const byIp = take(`i:${project.id}:${clientBucket(meta.ip)}`, r?.perIp ?? d.perIp, r?.burstPerIp ?? d.burstPerIp);
      if (!byIp.allowed) {
        return fail('rate_limited', 'too many requests from this client', { retryAfterSeconds: byIp.retryAfterSeconds }, byIp.info);
      }
      return { ok: true, value: byIp.info.remaining < byKey.info.remaining ? byIp.info : byKey.info };
    }
    return { ok: true, value: byKey.info };
  }
}

function safeOrigin(s: string): string {
  try {
    return new URL(s).origin;
  } catch {
    return s;
  }
}

function safeHost(s: string): string | undefined {
  try {
    return new URL(s).hostname.toLowerCase();
  } catch {
    return undefined;
  }
}
