#!/usr/bin/env node
// Bundles src/ into dist/ (esbuild, a production dependency: a host installed with --omit=dev builds too), so
// `npm start`, the `analytics` command and the processes the tests spawn load a few files of JavaScript instead of
// TypeScript through tsx, or hundreds of modules from dist/ and node_modules (a start read ~380 files; module loading
// was ~0.45 s of a 5,000-site restart). Types are checked by `npm run typecheck`, not here. `--if-stale` does nothing
// when dist/ is current.
// The build is written beside dist/ and swapped in whole: a process starting meanwhile sees the old build or none
// (then it runs the source through tsx), never half of one.
import * as esbuild from 'esbuild';
import { cpSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { DIST, SRC, STAMP, distIsFresh, sourceHash } from './dist.mjs';

if (process.argv.includes('--if-stale') && distIsFresh()) process.exit(0);

/**
 * What dist/ holds:
 * - dist/main.js and dist/cli/main.js, the entries (`node dist/main.js`, bin/analytics.js): each turns source maps on,
 *   then imports its bundle, so a stack trace names src/ files and lines;
 * - dist/bundle/, esbuild's output, flat: one file per entry and per module imported with `import()` (those stay
 *   lazy: the MCP face, operator metrics, the cluster backend, the CLI's commands), and chunks of the code they share;
 * - a copy of src/, file for file, for what the code reads beside its modules at run time: the worker scripts (.mjs),
 *   the TypeScript the service bundles for browsers on request (the tracker, the dashboard), ../package.json. In the
 *   bundle each module's `import.meta.url` is its source's copy there, so `new URL('./x', import.meta.url)` finds
 *   what it finds in src/.
 */
const ENTRIES = { main: 'main.ts', cli: 'cli/main.ts' };
const BUNDLE = 'bundle';

/**
 * Packages loaded from node_modules as they are, not bundled: lmdb loads its native addon by path (and brings
 * msgpackr), esbuild is a native binary the service runs to build the tracker and the dashboard, and gRPC requires
 * @grpc/proto-loader (and protobufjs, ~0.35 MB) only to serve channelz and ORCA, which the service does not. Every other
 * package a start reads (gRPC, zod, protobuf, ...) is bundled: that is most of the files saved.
 */
const EXTERNAL = ['lmdb', 'esbuild', '@grpc/proto-loader'];

const startedAt = Date.now();
const sha256 = sourceHash();
const tmp = `${DIST}.tmp-${process.pid}`;
rmSync(tmp, { recursive: true, force: true });
const toUrlPath = (p) => p.split(path.sep).join('/');

/** `import.meta.url` of each module of src/ as the URL of its source's copy in dist/ (see above). */
const moduleUrlAsInSrc = {
  name: 'module-url-as-in-src',
  setup(build) {
    build.onLoad({ filter: /\.ts$/ }, (args) => {
      if (!args.path.startsWith(SRC + path.sep)) return undefined;
      const text = readFileSync(args.path, 'utf8');
      if (/import\.meta\.(dirname|filename)\b/.test(text)) throw new Error(`${args.path}: resolve files with new URL(..., import.meta.url), which the bundle keeps`);
      if (!text.includes('import.meta.url')) return undefined;
      const copy = `../${toUrlPath(path.relative(SRC, args.path))}`; // from dist/bundle/ to dist/<path in src>
      return { contents: text.replaceAll('import.meta.url', `new URL(${JSON.stringify(copy)}, import.meta.url).href`), loader: 'ts' };
    });
  },
};

let result;
try {
  result = await esbuild.build({
    entryPoints: Object.entries(ENTRIES).map(([out, entry]) => ({ in: path.join(SRC, entry), out })),
    outdir: path.join(tmp, BUNDLE),
    entryNames: '[name]',
    chunkNames: '[name]-[hash]',
    platform: 'node',
    format: 'esm',
    target: 'node20',
    bundle: true,
    splitting: true,
    external: EXTERNAL,
    // The CommonJS packages bundled (gRPC, ...) call require() for Node's own modules, which ESM does not define.
    banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
    sourcemap: true,
    sourcesContent: false,
    metafile: true,
    logLevel: 'warning',
    plugins: [moduleUrlAsInSrc],
  });
} catch (err) {
  rmSync(tmp, { recursive: true, force: true });
  console.error(`build: ${err instanceof Error ? err.message : String(err)}; dist/ left as it was`);
  process.exit(1);
}

// The rewritten `import.meta.url` is relative to dist/bundle/: every output must be there.
for (const out of Object.keys(result.metafile.outputs)) {
  if (path.dirname(path.resolve(out)) !== path.join(tmp, BUNDLE)) {
    rmSync(tmp, { recursive: true, force: true });
    console.error(`build: ${out} is outside dist/${BUNDLE}/, where module URLs are resolved from; dist/ left as it was`);
    process.exit(1);
  }
}

for (const [out, entry] of Object.entries(ENTRIES)) {
  const file = path.join(tmp, entry.replace(/\.ts$/, '.js'));
  mkdirSync(path.dirname(file), { recursive: true });
  const bundled = toUrlPath(path.relative(path.dirname(file), path.join(tmp, BUNDLE, `${out}.js`))).replace(/^(?!\.)/, './');
  writeFileSync(
    file,
    `// ${entry} of src/, bundled (bin/build.mjs). Source maps go on before the bundle loads, so traces name src/ lines.\n` +
      `process.setSourceMapsEnabled(true);\nawait import('${bundled}');\n`,
  );
}

// The copy of src/ (see above).
function copyRest(from, to) {
  for (const entry of readdirSync(from, { withFileTypes: true })) {
    const src = path.join(from, entry.name);
    const dst = path.join(to, entry.name);
    if (entry.isDirectory()) {
      mkdirSync(dst, { recursive: true });
      copyRest(src, dst);
    } else {
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
