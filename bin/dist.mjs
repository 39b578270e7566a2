// Whether dist/ (src/ compiled by bin/build.mjs) is current, so a launcher can run it instead of loading TypeScript
// through tsx: a service start without tsx's loader saves about 0.3 s of CPU, and every process the tests spawn is one.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const SRC = path.join(ROOT, 'src');
export const DIST = path.join(ROOT, 'dist');
/**
 * Written last by a build: when it started reading src/ and a hash of what it read. A source file changed after that
 * time makes dist/ stale unless the hash still matches (a copy of the tree, e.g. a container's COPY, has new times).
 */
export const STAMP = path.join(DIST, '.built');

/**
 * The environment every launcher gives the service (npm start, the container, the systemd unit): glibc returns a freed
 * block of 1 MiB or more to the system at once instead of raising its threshold and keeping it (live days' tables
 * grow and go to sleep; a month's ingest left 130–220 MiB of freed blocks in the process). 1 MiB, not 128 KiB: below
 * it are request bodies and the log's buffers, which an import allocates per batch (mapping each cost ~40 % more CPU).
 */
export const SERVICE_ENV = { MALLOC_MMAP_THRESHOLD_: '1048576' };

/**
 * The node flags every launcher gives the service (npm start, the container, the systemd unit, the benches), since V8
 * sizes its young generation when the process starts: semi-spaces of 8 MiB, not V8's 16. Garbage is then collected
 * sooner, so a 10M-event history import held +83–84 MiB of anonymous memory instead of +102–106, at a few per cent
 * more service CPU an event (docs/history.md).
 */
export const SERVICE_NODE_ARGS = ['--max-semi-space-size=8'];

/** How to start the service with node: its flags, then its entry (nodeArgsFor). */
export function serviceNodeArgs() {
  return [...SERVICE_NODE_ARGS, ...nodeArgsFor('main.ts')];
}

/** The files under `dir`, sorted by path. */
function files(dir) {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile())
    .map((e) => path.join(e.parentPath ?? e.path, e.name))
    .sort();
}

/** A hash of every path and byte under src/ (a few ms for its ~1.5 MB). */
export function sourceHash() {
  const h = createHash('sha256');
  for (const f of files(SRC)) h.update(path.relative(SRC, f)).update('\0').update(readFileSync(f)).update('\0');
  return h.digest('hex');
}

/** True when dist/ holds a complete build of the src/ there is now: one stat per source file, and a hash if times moved. */
export function distIsFresh() {
  let stamp;
  try {
    stamp = JSON.parse(readFileSync(STAMP, 'utf8'));
  } catch {
    return false; // never built, or a build in progress
  }
  if (typeof stamp.startedAt !== 'number') return false;
  return files(SRC).every((f) => statSync(f).mtimeMs <= stamp.startedAt) || stamp.sha256 === sourceHash();
}

/**
 * How to run an entry of src/ ('main.ts' or 'cli/main.ts') with node: its bundle when dist/ is current, else the
 * source through tsx. Either way the same code runs; only the start-up cost differs.
 */
export function nodeArgsFor(srcFile) {
  return distIsFresh() ? [path.join(DIST, srcFile.replace(/\.ts$/, '.js'))] : ['--import', 'tsx', path.join(SRC, srcFile)];
}
