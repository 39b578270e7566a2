#!/usr/bin/env node
// Compiles src/ into dist/, file by file (esbuild, a production dependency: a host installed with --omit=dev builds
// too), so `npm start`, the `analytics` command and the processes the tests spawn run JavaScript instead of loading
// TypeScript through tsx. Types are checked by `npm run typecheck`, not here. `--if-stale` does nothing when dist/ is
// current.
// The build is written beside dist/ and swapped in whole: a process starting meanwhile sees the old build or none
// (then it runs the source through tsx), never half of one.
import * as esbuild from 'esbuild';
import { cpSync, mkdirSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { DIST, SRC, STAMP, distIsFresh, sourceHash } from './dist.mjs';

if (process.argv.includes('--if-stale') && distIsFresh()) process.exit(0);

const startedAt = Date.now();
const sha256 = sourceHash();
const tmp = `${DIST}.tmp-${process.pid}`;
rmSync(tmp, { recursive: true, force: true });
/** Every .ts file of src/ but type declarations: each is its own entry, so dist/ mirrors src/ file for file. */
function sources(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? sources(p) : e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [p] : [];
  });
}
try {
  await esbuild.build({
    entryPoints: sources(SRC),
    outdir: tmp,
    outbase: SRC,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    sourcemap: true,
    logLevel: 'warning',
    // bundle only to rewrite imports: every import stays an import (packages as they are, our files as .js)
    bundle: true,
    packages: 'external',
    plugins: [
      {
        name: 'relative-imports-as-js',
        setup(build) {
          build.onResolve({ filter: /^\.\.?\// }, (args) => (args.kind === 'entry-point' ? undefined : { path: args.path.replace(/\.ts$/, '.js'), external: true }));
        },
      },
    ],
  });
} catch (err) {
  rmSync(tmp, { recursive: true, force: true });
  console.error(`build: ${err instanceof Error ? err.message : String(err)}; dist/ left as it was`);
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
writeFileSync(path.join(tmp, path.basename(STAMP)), JSON.stringify({ startedAt, sha256 }));

const old = `${DIST}.old-${process.pid}`;
try {
  renameSync(DIST, old);
} catch {
  // no previous build
}
renameSync(tmp, DIST);
rmSync(old, { recursive: true, force: true });
