import { randomBytes } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { generateKey, hashKey } from '../../src/engine/keys.ts';
import type { LogStore } from '../../src/store/lmdb/log-store.ts';

/** What both growth builds share: their arguments and result, the projects they create, the directory's size. */

/** Records per append: one LMDB entry group of a few MB (the replay build's batch, the bulk build's too, so both logs match). */
export const APPEND_BATCH = 20_000;
/** Reads and loads are measured back to back: the default per-key bucket would answer 429. */
const UNLIMITED = { perKey: 1e9, burstPerKey: 1e9, perIp: 1e9, burstPerIp: 1e9 };

export interface BuildArgs {
  dir: string;
  projects: number;
  events: number;
  days: number;
  /** the last day of traffic (UTC, YYYY-MM-DD) */
  lastDay: string;
  /**
   * `bulk` (default): the log, sealed days and columns written in large transactions (build-bulk.ts); `replay`: every
   * batch through the reducer with the real Sealer and column projection, as the service would (build-replay.ts).
   */
  mode?: 'bulk' | 'replay';
  /** records per appended batch, which is also when sealing runs (APPEND_BATCH; a test takes smaller ones for more batch ends) */
  appendBatch?: number;
  /** given keys (a test builds two directories with the same keys); fresh ones otherwise */
  secretKey?: string;
  adminKey?: string;
}

export interface BuildResult {
  seconds: number;
  events: number;
  projects: number;
  liveDays: number;
  sealedDays: number;
  logBytesPerEvent: number;
  dataBytes: number;
  snapshotBytes: number;
  /** the busiest project (Zipf rank 1), for reads */
  projectId: string;
  secretKey: string;
  adminKey: string;
  mode: 'bulk' | 'replay';
  /** bulk: seconds of the log writer, the state child and the columns child, which run side by side */
  parts?: { logSeconds: number; stateSeconds: number; columnsSeconds: number };
}

export function projectIds(n: number): string[] {
  return Array.from({ length: n }, (_, i) => `p_g${i.toString().padStart(6, '0')}`);
}

/** Creates the projects (the busiest one holds the secret key); returns the keys. */
export async function putProjects(store: LogStore, a: BuildArgs, ids: string[]): Promise<{ adminKey: string; secretKey: string }> {
  const adminKey = a.adminKey ?? `ak_${randomBytes(24).toString('base64url')}`;
  const secretKey = a.secretKey ?? generateKey('secret');
  const now = Date.now();
  // All at once: lmdb-js commits the writes of one turn together, so 10,000 projects cost one flush, not 10,000.
  await Promise.all(
    ids.map((id, i) =>
      store.putProject(
        { id, name: `growth ${i}`, ownerId: 'o_bench', allowedOrigins: [], allowedReferrers: [], timezone: 'UTC', monthlyQuota: 0, createdAt: now, rate: UNLIMITED },
        i === 0 ? [[hashKey(secretKey), { kind: 'secret', projectId: id, ownerId: 'o_bench', createdAt: now }]] : [],
      ),
    ),
  );
  return { adminKey, secretKey };
}

export function dirBytes(dir: string): number {
  let n = 0;
  for (const f of readdirSync(dir, { recursive: true, withFileTypes: true })) if (f.isFile()) n += statSync(path.join(f.parentPath ?? (f as { path: string }).path, f.name)).size;
  return n;
}
