import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { commitFailure } from './commit-failures.ts';
import type { LmdbEnv } from './log-env.ts';

/** Free space health asks for: more than one append of the biggest batch (500 events, ~250 KB stored). */
const SPACE_PROBE_BYTES = 1024 * 1024;
/** Incompressible, so a compressing filesystem must find the space too. */
const SPACE_PROBE = Buffer.allocUnsafe(SPACE_PROBE_BYTES);
for (let i = 0, x = 2463534242; i < SPACE_PROBE_BYTES; i++) {
  x ^= x << 13;
  x ^= x >>> 17;
  x ^= x << 5;
  SPACE_PROBE[i] = x & 0xff;
}

/** A tiny write that proves the store still accepts writes (health). */
export async function probeWrite(env: LmdbEnv, now: number): Promise<void> {
  if (env.gate) await env.gate;
  try {
    await env.meta.transaction(() => {
      const fault = env.faults?.fault?.('write');
      if (fault) throw fault;
      env.meta.putSync('probe', now);
    });
    await env.root.flushed;
  } catch (err) {
    throw commitFailure(err);
  }
}

/**
 * Writes and removes SPACE_PROBE_BYTES beside the environment; throws (ENOSPC) when the device is full. LMDB reuses
 * pages freed by earlier transactions, so its own small probe write succeeds on a full disk while an append that
 * needs new pages fails: health must ask for space itself.
 */
export function probeSpace(env: LmdbEnv): void {
  const file = path.join(path.dirname(env.file), '.space-check');
  try {
    writeFileSync(file, SPACE_PROBE);
  } finally {
    rmSync(file, { force: true });
  }
}

/**
 * One line for a failed write: LMDB reports a short write on a full disk as `Input/output error`, so the space
 * probe says whether the device is full.
 */
export function describeWriteFailure(env: LmdbEnv, err: unknown): string {
  const said = err instanceof Error ? err.message : String(err);
  try {
    probeSpace(env);
  } catch (space) {
    const code = (space as { code?: string }).code;
    if (code === 'ENOSPC' || code === 'EDQUOT') return `no space left on the device holding ${path.dirname(env.file)} (${code}; LMDB said: ${said})`;
    return `${said} (${env.file}; and ${(space as Error).message})`;
  }
  return `${said} (${env.file})`;
}
