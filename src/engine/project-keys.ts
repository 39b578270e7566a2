import type { KeyRecord } from '../store/records.ts';
import type { Catalog } from '../store/seams.ts';
import type { Admission } from './admission.ts';
import { generateId, generateKey, hashKey, keyHint, keyIdOf } from './keys.ts';
import { isLive, keyView, zodDetails } from './lifecycle-helpers.ts';
import { CreateKeySchema, UpdateKeySchema } from './project-input.ts';
import { failure as fail, type CreatedKey, type Failure, type KeyView, type Outcome, type RateInfo, type RequestMeta } from './types.ts';

/**
 * The keys of a project (/projects/{id}/keys): list, create, set an expiry (rotation with an overlap), revoke. A
 * project keeps at least one live secret key, so it can always be managed without the admin key.
 */

export interface KeyParts {
  admission: Admission;
  catalog: Catalog;
  /** a catalog write; a failure is the 503 to answer */
  write(run: () => Promise<unknown>, rate: RateInfo): Promise<Failure | undefined>;
  now(): number;
}

export class ProjectKeys {
  constructor(private readonly parts: KeyParts) {}

  listKeys(meta: RequestMeta, projectId: string): Outcome<{ keys: KeyView[] }> {
    const gate = this.parts.admission.admitProject(meta, projectId);
    if (!gate.ok) return gate;
    const keys = this.parts.catalog
      .keys(projectId)
      .sort(([, a], [, b]) => a.createdAt - b.createdAt)
      .map(([hash, record]) => keyView(hash, record));
    return { ok: true, value: { keys }, rate: gate.value.rate };
  }

  async createKey(meta: RequestMeta, projectId: string, body: unknown): Promise<Outcome<CreatedKey>> {
    const gate = this.parts.admission.admitChange(meta, projectId);
    if (!gate.ok) return gate;
    const { project, rate } = gate.value;
    const parsed = CreateKeySchema.safeParse(body);
    if (!parsed.success) return fail('invalid_request', 'invalid key request', { details: zodDetails(parsed.error.issues) }, rate);
    const now = this.parts.now();
    const record: KeyRecord = { kind: parsed.data.type, projectId: project.id, ownerId: project.ownerId, createdAt: now, id: generateId('key_') };
    if (parsed.data.expires_at !== undefined) {
      const at = Date.parse(parsed.data.expires_at);
      if (at <= now) return inThePast(rate);
      record.expiresAt = at;
    }
    const key = generateKey(parsed.data.type);
    record.hint = keyHint(key);
    const hash = hashKey(key);
    const written = await this.parts.write(() => this.parts.catalog.putKey(hash, record), rate);
    if (written) return written;
    return { ok: true, value: { key, ...keyView(hash, record) }, rate };
  }

  async updateKey(meta: RequestMeta, projectId: string, keyId: string, body: unknown): Promise<Outcome<KeyView>> {
    const gate = this.parts.admission.admitChange(meta, projectId);
    if (!gate.ok) return gate;
    const { rate } = gate.value;
    const parsed = UpdateKeySchema.safeParse(body);
    if (!parsed.success) return fail('invalid_request', 'invalid key update', { details: zodDetails(parsed.error.issues) }, rate);
    const keys = this.parts.catalog.keys(projectId);
    const found = findKey(keys, keyId);
    if (!found) return noKey(keyId, projectId, rate);
    const [hash, record] = found;
    const now = this.parts.now();
    const at = Date.parse(parsed.data.expires_at);
    if (at <= now) return inThePast(rate);
    if (record.kind === 'secret' && !keys.some(([h, r]) => h !== hash && r.kind === 'secret' && (r.expiresAt === undefined || r.expiresAt > at))) {
      return fail('conflict', 'a project keeps at least one secret key: create another one (keys rotate) first', {}, rate);
    }
    const next: KeyRecord = { ...record, expiresAt: at };
    const written = await this.parts.write(() => this.parts.catalog.putKey(hash, next), rate);
    if (written) return written;
    return { ok: true, value: keyView(hash, next), rate };
  }

  async revokeKey(meta: RequestMeta, projectId: string, keyId: string): Promise<Outcome<{ ok: true }>> {
    const gate = this.parts.admission.admitChange(meta, projectId);
    if (!gate.ok) return gate;
    const { rate } = gate.value;
    const keys = this.parts.catalog.keys(projectId);
    const found = findKey(keys, keyId);
    if (!found) return noKey(keyId, projectId, rate);
    const [hash, record] = found;
    const now = this.parts.now();
    if (record.kind === 'secret' && !keys.some(([h, r]) => h !== hash && r.kind === 'secret' && isLive(r, now))) {
      return fail('conflict', 'this is the project\'s last secret key: create another one before revoking it', {}, rate);
    }
    const written = await this.parts.write(() => this.parts.catalog.deleteKey(hash), rate);
    if (written) return written;
    return { ok: true, value: { ok: true }, rate };
  }
}

function findKey(keys: Array<[string, KeyRecord]>, keyId: string): [string, KeyRecord] | undefined {
  return keys.find(([hash, r]) => keyIdOf(r, hash) === keyId);
}

function noKey(keyId: string, projectId: string, rate: RateInfo): Failure {
  return fail('not_found', `no key "${keyId}" in project "${projectId}"`, {}, rate);
}

function inThePast(rate: RateInfo): Failure {
  return fail('invalid_request', 'expires_at must be in the future', { details: [{ path: 'expires_at', message: 'must be in the future' }] }, rate);
}
