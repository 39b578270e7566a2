import { createHash, randomBytes } from 'node:crypto';
import type { KeyKind } from '../store/records.ts';

/**
 * API keys are a prefix plus 192 random bits in base64url. Only SHA-256 hashes are stored; a lookup by hash means
 * no secret is ever compared byte by byte, so timing reveals nothing about stored keys.
 */

/** 24 bytes = 192 bits, above the contract's 128-bit floor. */
const KEY_BYTES = 24;
/** 12 bytes = 96 bits: ids are not secrets, only unique. */
const ID_BYTES = 12;

export const KEY_PREFIX: Record<KeyKind, string> = { admin: 'ak_', secret: 'sk_', publishable: 'pk_', read: 'rk_' };
const KEY_SHAPE = /^(ak|sk|pk|rk)_[A-Za-z0-9_-]{22,128}$/;

export function generateKey(kind: KeyKind): string {
  return KEY_PREFIX[kind] + randomBytes(KEY_BYTES).toString('base64url');
}

/** What logs and listings show instead of a key: its prefix and last 4 characters (`ak_…abcd`). */
export function keyHint(key: string): string {
  return `${key.slice(0, 3)}…${key.slice(-4)}`;
}

export function generateId(prefix: string): string {
  return prefix + randomBytes(ID_BYTES).toString('base64url');
}

export function hashKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/** The key of an `Authorization: Bearer <key>` value, or undefined when missing or malformed. */
export function bearerKey(header: string | undefined): string | undefined {
  const token = bearerToken(header);
  return token !== undefined && KEY_SHAPE.test(token) ? token : undefined;
}

/**
 * The token of an `Authorization: Bearer <token>` value whatever its shape, or undefined when the header is missing
 * or is not a Bearer credential: a token that is no key of ours (cut short, mistyped) is an unknown key, not a
 * missing one.
 */
export function bearerToken(header: string | undefined): string | undefined {
  if (!header) return undefined;
  return /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1];
}

/** The public id of a key; keys stored before ids existed get one derived from their hash (not from the key). */
export function keyIdOf(record: { id?: string }, hash: string): string {
  return record.id ?? `key_${hash.slice(0, 16)}`;
}
