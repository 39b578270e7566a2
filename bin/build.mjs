#!/usr/bin/env node
// Compiles src/ into dist/ (tsconfig.build.json), so `npm start`, the `analytics` command and the processes the tests
// spawn run JavaScript instead of loading TypeScript through tsx. `--if-stale` does nothing when dist/ is current.
// The build is written beside dist/ and swapped in whole: a process starting meanwhile sees the old build or none
// (then it runs the source through tsx), never half of one.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { DIST, ROOT, SRC, STAMP, distIsFresh } from './dist.mjs';

if (process.argv.includes('--if-stale') && distIsFresh()) process.exit(0);

const startedAt = Date.now();
const tmp = `${DIST}.tmp-${process.pid}`;
rmSync(tmp, { recursive: true, force: true });
const tsc = path.join(ROOT, 'node_modules/typescript/bin/tsc');
const run = spawnSync(process.execPath, [tsc, '-p', path.join(ROOT, 'tsconfig.build.json'), '--outDir', tmp], { cwd: ROOT, stdio: 'inherit' });
if (run.status !== 0) {
  rmSync(tmp, { recursive: true, force: true });
  console.error(`build: tsc exited with ${run.status ?? run.signal}; dist/ left as it was`);
  process.exit(1);
}

// What is not compiled is copied as it is: the worker scripts (.mjs), the dashboard's stylesheet, and the TypeScript
// the service bundles for browsers at run time (the tracker and the dashboard: esbuild reads them from beside the
// compiled file that names them).
function copyRest(from, to) {
  for (const entry of readdirSync(from, { withFileTypes: true })) {
    const src = path.join(from, entry.name);
    const dst = path.join(to, entry.name);
    if (entry.isDirectory()) {
      mkdirSync(dst, { recursive: true });
      copyRest(src, dst);
    } else if (!entry.name.endsWith('.js') && !entry.name.endsWith('.js.map')) {
      cpSync(src, dst);
    }
  }
}
copyRest(SRC, tmp);
writeFileSync(path.join(tmp, path.basename(STAMP)), JSON.stringify({ startedAt }));

const old = `${DIST}.old-${process.pid}`;
try {
  renameSync(DIST, old);
} catch {
  // no previous build
}
renameSync(tmp, DIST);
rmSync(old, { recursive: true, force: true });
