// Whether dist/ (src/ compiled by bin/build.mjs) is current, so a launcher can run it instead of loading TypeScript
// through tsx: a service start without tsx's loader saves about 0.3 s of CPU, and every process the tests spawn is one.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const SRC = path.join(ROOT, 'src');
export const DIST = path.join(ROOT, 'dist');
/** Written last by a build: the time it started reading src/ (a file changed after that makes dist/ stale). */
export const STAMP = path.join(DIST, '.built');

/** The newest modification time of any file under `dir`. */
function newest(dir) {
  let max = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    max = Math.max(max, entry.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return max;
}

/** True when dist/ holds a complete build of the src/ there is now (a few ms: one stat per source file). */
export function distIsFresh() {
  let builtFrom;
  try {
    builtFrom = JSON.parse(readFileSync(STAMP, 'utf8')).startedAt;
  } catch {
    return false; // never built, or a build in progress
  }
  return typeof builtFrom === 'number' && newest(SRC) <= builtFrom;
}

/**
 * How to run a file of src/ (e.g. 'main.ts') with node: its compiled copy when dist/ is current, else the source
 * through tsx. Either way the same code runs; only the start-up cost differs.
 */
export function nodeArgsFor(srcFile) {
  return distIsFresh() ? [path.join(DIST, srcFile.replace(/\.ts$/, '.js'))] : ['--import', 'tsx', path.join(SRC, srcFile)];
}
