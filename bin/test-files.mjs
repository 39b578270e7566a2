// The test files of `npm test`, longest first. The runner starts files in the order it is given, so a long file
// started last keeps one slot busy while the other slots are idle at the end of the run; longest first packs the run.
// The order comes from the seconds each file took in the last run on this machine (written by test/reporter.mjs),
// else from the list below (a clean clone, CI). A file missing from both runs in name order after them.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** Where test/reporter.mjs keeps each file's seconds of the last whole run (git-ignored). */
export const DURATIONS_FILE = path.join(ROOT, 'test-results.durations.json');

/**
 * The longest files of a whole run on 2 cores, longest first (measured; docs/development.md lists them). Used when no
 * run has been recorded here yet; a stale list only costs a little packing, never a test.
 */
const LONGEST_FIRST = [
  'crash-recovery',
  'dashboard',
  'sql-reference',
  'cluster-faults',
  'cluster-ownership',
  'query-columns',
  'reliability-sockets',
  'process-signals',
  'cluster-erase',
  'dashboard-questions',
  'history-import-export',
  'cli',
  'reliability-full-disk',
  'reliability-damaged-log',
  'reliability-damaged-store',
];

function recorded() {
  try {
    const seconds = JSON.parse(readFileSync(DURATIONS_FILE, 'utf8'));
    return seconds && typeof seconds === 'object' ? seconds : {};
  } catch {
    return {};
  }
}

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
  // recorded seconds first (longest first), then the list's order, then name order (the sort is stable)
  return files.sort((a, b) => rank(a) - rank(b));
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.stdout.write(`${testFiles().join('\n')}\n`);
}
