import { MAX_JSON_DEPTH } from './limits.ts';

/** Keys that could reach Object.prototype in careless code downstream; refused anywhere in a body. */
const FORBIDDEN_KEYS = new Set(['__proto__', 'constructor', 'prototype']);

export type GuardResult = { ok: true } | { ok: false; path: string; message: string };

/**
 * Walks a parsed JSON value once: refuses forbidden keys and nesting deeper than MAX_JSON_DEPTH, and makes every
 * string and key well-formed (a lone surrogate becomes U+FFFD) in place, so what the log replays is exactly what
 * was folded live.
 */
export function guardJson(value: unknown): GuardResult {
  if (value === null || typeof value !== 'object') return { ok: true };
  const failed = walk(value, 1);
  if (failed === undefined) return { ok: true };
  return { ok: false, path: failed.path.length > 0 ? `/${failed.path.reverse().join('/')}` : '/', message: failed.message };
}

interface Failure {
  /** keys from the offending value up to the root (built only on failure, while unwinding) */
  path: Array<string | number>;
  message: string;
}

/** undefined when the object (and all below it) is fine; `value` is a non-null object. */
function walk(value: object, depth: number): Failure | undefined {
  if (depth > MAX_JSON_DEPTH) return { path: [], message: `nesting deeper than ${MAX_JSON_DEPTH} levels` };
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const v: unknown = value[i];
      if (typeof v === 'string') {
        if (!v.isWellFormed()) value[i] = v.toWellFormed();
      } else if (v !== null && typeof v === 'object') {
        const r = walk(v, depth + 1);
        if (r) {
          r.path.push(i);
          return r;
        }
      }
    }
    return undefined;
  }
  const obj = value as Record<string, unknown>;
  for (const key of Object.keys(obj)) {
    if (FORBIDDEN_KEYS.has(key)) return { path: [key], message: `key "${key}" is not allowed` };
    let k = key;
    if (!key.isWellFormed()) {
      k = key.toWellFormed();
      obj[k] = obj[key];
      delete obj[key];
    }
    const v = obj[k];
    if (typeof v === 'string') {
      if (!v.isWellFormed()) obj[k] = v.toWellFormed();
    } else if (v !== null && typeof v === 'object') {
      const r = walk(v, depth + 1);
      if (r) {
        r.path.push(k);
        return r;
      }
    }
  }
  return undefined;
}
