import type { KeyRecord, ProjectRecord } from '../store/records.ts';
import { KEY_PREFIX, keyIdOf } from './keys.ts';
import type { ErrorDetail, KeyType, KeyView } from './types.ts';

/** Small pure helpers of the project and key lifecycle: key listings, key liveness, page cursors. */

export function keyView(hash: string, r: KeyRecord): KeyView {
  return {
    id: keyIdOf(r, hash),
    type: r.kind as KeyType,
    hint: r.hint ?? `${KEY_PREFIX[r.kind]}…`,
    created_at: new Date(r.createdAt).toISOString(),
    expires_at: r.expiresAt === undefined ? null : new Date(r.expiresAt).toISOString(),
  };
}

export function isLive(r: KeyRecord, now: number): boolean {
  return r.expiresAt === undefined || now < r.expiresAt;
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function zodDetails(issues: ReadonlyArray<{ path: PropertyKey[]; message: string }>): ErrorDetail[] {
  return issues.map((i) => ({ path: i.path.map(String).join('.'), message: i.message }));
}

/** Cursor of GET /projects: the last project's creation time and id, base64url so callers treat it as opaque. */
export function encodeCursor(p: ProjectRecord): string {
  return Buffer.from(JSON.stringify([p.createdAt, p.id])).toString('base64url');
}

export function decodeCursor(cursor: string): [number, string] | undefined {
  try {
    const v: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (Array.isArray(v) && v.length === 2 && Number.isSafeInteger(v[0]) && typeof v[1] === 'string') return [v[0] as number, v[1] as string];
  } catch {
    /* not ours */
  }
  return undefined;
}

/** Creation order: time, then id (two projects may share a millisecond). */
export function isAfter(p: ProjectRecord, [createdAt, id]: [number, string]): boolean {
  return p.createdAt > createdAt || (p.createdAt === createdAt && p.id > id);
}
