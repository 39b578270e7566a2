import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

/**
 * Builds the browser tracking script (tracker.ts) into the minified code served at GET /script.js.
 * The first call bundles with esbuild (≈ 20 ms); every later call returns the same promise, so concurrent first
 * requests share one build and the hash stays stable for the life of the process.
 */

export interface TrackerBuild {
  /** minified IIFE, ES2019 (every browser still in use) */
  code: string;
  /** short sha256 of `code`, for the cache-busting /script.<hash>.js address and ETag */
  hash: string;
  /** size after gzip -9, what a browser actually downloads */
  gzipBytes: number;
  /** `code` gzipped once, to serve with Content-Encoding: gzip when the request accepts it */
  gzip: Buffer;
}

/** 16 hex chars = 64 bits: collisions between two tracker versions are out of the question. */
const HASH_CHARS = 16;
const TRACKER_SOURCE = fileURLToPath(new URL('./tracker.ts', import.meta.url));

let cached: Promise<TrackerBuild> | undefined;

export function buildTracker(): Promise<TrackerBuild> {
  cached ??= bundle().catch((error: unknown) => {
    cached = undefined; // a failed build must not be remembered; the next request tries again
    throw error;
  });
  return cached;
}

async function bundle(): Promise<TrackerBuild> {
  // esbuild is loaded only when the script is first requested: the rest of the service never needs it.
  const esbuild = await import('esbuild');
  const result = await esbuild.build({
    entryPoints: [TRACKER_SOURCE],
    bundle: true,
    write: false,
    minify: true,
    format: 'iife',
    platform: 'browser',
    target: 'es2019',
    legalComments: 'none',
    charset: 'utf8',
    logLevel: 'silent',
  });
  const output = result.outputFiles[0];
  if (!output) throw new Error('esbuild produced no output for the tracker');
  const code = output.text;
  const gzip = gzipSync(code, { level: 9 });
  return { code, hash: createHash('sha256').update(code).digest('hex').slice(0, HASH_CHARS), gzipBytes: gzip.length, gzip };
}
