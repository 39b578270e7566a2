// `npm test`'s runner: every test file (or the files named on the command line) through node:test's run(), longest
// first, a few at a time, with test/reporter.mjs on stdout and the spec reporter's whole output in test-results.log
// (`--verbose`: spec on stdout instead). The node --test command line cannot do the order: it sorts the files it is
// given by name, so a long file late in the alphabet kept one slot busy alone at the end of the run.
// Run as `node --import tsx test/run.mjs [--verbose] [files…]`: each test file's process inherits --import tsx.
import { createWriteStream, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { run } from 'node:test';
import { spec } from 'node:test/reporters';
import { fileURLToPath } from 'node:url';
import { DURATIONS_FILE, fileReporter } from './reporter.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/**
 * Files at once on the 2 cores: the cluster, crash and browser files spend much of their time waiting on timers,
 * processes and sockets, so four keep both cores busy where two or three left them idle (docs/development.md).
 */
const CONCURRENCY = 4;
/**
 * A test still running after this long fails (node:test's per-test timeout) instead of holding the run: the longest
 * test takes ~40 s on a loaded machine, and one that waited on a dead socket once held a whole run for 15 minutes.
 */
const TEST_TIMEOUT_MS = 300_000;
/** The spec reporter's output of the whole run (read it after a failure; the console shows one line a file). */
const LOG_FILE = 'test-results.log';

/**
 * The longest files of a whole run on 2 cores, longest first (measured; docs/development.md lists them). Used when no
 * run has been recorded here yet; a stale list only costs a little packing, never a test.
 */
const LONGEST_FIRST = [
  'cardinality',
  'crash-recovery',
  'dashboard',
  'dashboard-questions',
  'cluster-erase',
  'cluster-faults',
  'cluster-ownership',
  'history-import-export',
  'process-signals',
  'reliability-sockets',
  'cluster-nodes',
  'sql-reference',
  'cluster-sealing',
  'growth-bulk-build',
  'mcp',
  'event-log-contract',
  'reliability-full-disk',
  'project-lifecycle',
  'browser',
  'nats-store',
  'client-package',
  'cluster-failover',
  'cli',
];

function recorded() {
  try {
    const seconds = JSON.parse(readFileSync(DURATIONS_FILE, 'utf8'));
    return seconds && typeof seconds === 'object' ? seconds : {};
  } catch {
    return {};
  }
}

/** Every test file, longest first: by the last run's seconds on this machine, else by LONGEST_FIRST, then by name. */
export function testFiles() {
  const files = readdirSync(path.join(ROOT, 'test'))
    .filter((f) => f.endsWith('.test.ts'))
    .sort()
    .map((f) => `test/${f}`);
  const seconds = recorded();
  const rank = (f) => {
    if (typeof seconds[f] === 'number') return -1e6 - seconds[f];
    const i = LONGEST_FIRST.indexOf(path.basename(f, '.test.ts'));
    return i < 0 ? 0 : -LONGEST_FIRST.length + i;
  };
  return files.sort((a, b) => rank(a) - rank(b)); // stable: files of equal rank stay in name order
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const verbose = args.includes('--verbose');
  const named = args.filter((a) => a !== '--verbose');
  const files = named.length > 0 ? named : testFiles();
  const stream = run({ files: files.map((f) => path.resolve(f)), concurrency: CONCURRENCY, timeout: TEST_TIMEOUT_MS });
  stream.on('test:fail', () => {
    process.exitCode = 1;
  });
  if (verbose) {
    stream.compose(spec).pipe(process.stdout);
  } else {
    stream.compose(fileReporter(files.length, named.length === 0)).pipe(process.stdout);
    stream.compose(spec).pipe(createWriteStream(LOG_FILE));
  }
}
