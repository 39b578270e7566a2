// The reporter of `npm test` (test/run.mjs): one line per finished test file (its place in the run, pass/fail counts,
// seconds), every failure in full, the slowest files, then the summary. The whole spec output goes to
// test-results.log at the same time; `npm run test:verbose` prints it instead.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { inspect } from 'node:util';

/** Where each file's seconds of the last whole run are kept, for the next run's order (git-ignored). */
export const DURATIONS_FILE = fileURLToPath(new URL('../test-results.durations.json', import.meta.url));

/** What a crashed test file printed is shown with its failure, up to this much of its end. */
const MAX_STDERR_CHARS = 4000;
/** The slowest files listed after the run: where a shorter run would come from. */
const SLOWEST_LISTED = 10;

/**
 * The reporter for a run of `totalFiles` files (for "n/total"; 0 when unknown). `wholeRun`: every test file ran, so
 * their seconds replace the recorded ones (a run of a few files would rank them first next time, however short).
 */
export function fileReporter(totalFiles, wholeRun = false) {
  return (source) => report(source, totalFiles, wholeRun);
}

/** As a --test-reporter: the files of the run are those on the command line; nothing is recorded. */
export default function reporter(source) {
  return report(source, process.argv.filter((a) => /\.test\.[cm]?[jt]s$/.test(a)).length, false);
}

async function* report(source, totalFiles, wholeRun) {
  const failures = [];
  const summary = [];
  const stderr = new Map();
  /** per file: tests passed, failed, skipped */
  const counts = new Map();
  const finished = [];
  const done = new Set();
  /** files whose end has come but whose tests may still be reported (see below), with that end's event */
  const pending = new Map();
  /** the file whose tests are being reported now */
  let current;
  const started = performance.now();
  const countFor = (file) => {
    let c = counts.get(file);
    if (!c) counts.set(file, (c = { pass: 0, fail: 0, skip: 0 }));
    return c;
  };
  const finish = (file, type, data) => {
    pending.delete(file);
    if (done.has(file)) return '';
    done.add(file);
    const c = countFor(file);
    const seconds = (data.details?.duration_ms ?? 0) / 1000;
    const failed = type === 'test:fail' || data.details?.passed === false;
    finished.push({ file: rel(file), seconds });
    const place = totalFiles > 0 ? `${String(finished.length).padStart(String(totalFiles).length)}/${totalFiles}` : `${finished.length}`;
    const tally = `${c.pass} passed${c.fail ? `, ${c.fail} failed` : ''}${c.skip ? `, ${c.skip} skipped` : ''}`;
    const elapsed = Math.round((performance.now() - started) / 1000);
    if (failed && c.fail === 0) failures.push(fileFailure(data, stderr));
    return `${place} ${!failed && c.fail === 0 ? 'ok  ' : 'FAIL'} ${rel(file)}  ${tally}  ${seconds.toFixed(1)} s  (run ${elapsed} s)\n`;
  };
  for await (const event of source) {
    const { type, data } = event;
    // A file is the test at nesting 0 named after the file itself (process isolation runs each file as one test).
    const isFile = data?.nesting === 0 && data.file && isSameFile(data.name, data.file);
    if (type === 'test:stderr' && data.file) {
      stderr.set(data.file, ((stderr.get(data.file) ?? '') + data.message).slice(-MAX_STDERR_CHARS));
      continue;
    }
    // Files run in parallel, but their tests are reported one file at a time: a file that ended while another was
    // being reported has its tests reported after its own end (Node 20 marks that end with test:complete only).
    // A file is done once the report moves on to another file, at its test:pass/test:fail (later Node versions),
    // or at the end of the run.
    if (!isFile && data?.file && (type === 'test:start' || type === 'test:complete') && data.file !== current) {
      if (current !== undefined && pending.has(current)) yield finish(current, 'test:complete', pending.get(current));
      current = data.file;
    }
    if (isFile && (type === 'test:pass' || type === 'test:fail')) {
      yield finish(data.file, type, data);
    } else if (isFile && type === 'test:complete') {
      if (!done.has(data.file)) pending.set(data.file, data);
    } else if (type === 'test:complete' && data.details?.type !== 'suite') {
      const c = countFor(data.file ?? '?');
      if (data.skip || data.todo) c.skip++;
      else if (data.details?.passed !== false) c.pass++;
      else if (data.details?.error?.failureType !== 'subtestsFailed') c.fail++;
    } else if (type === 'test:fail') {
      const error = data.details?.error;
      // A suite that failed because a test inside it failed adds nothing to that test's own report.
      if (error?.failureType === 'subtestsFailed') continue;
      const where = data.file ? ` (${rel(data.file)}${data.line ? `:${data.line}` : ''})` : '';
      const cause = error?.cause ?? error;
      failures.push(`✖ ${data.name}${where}\n${indent(inspect(cause, { depth: 4, colors: false }))}`);
    } else if (type === 'test:diagnostic' && data.nesting === 0) {
      summary.push(`# ${data.message}`);
    }
  }
  for (const [file, data] of [...pending]) yield finish(file, 'test:complete', data);
  yield '\n';
  if (failures.length > 0) yield `Failures (${failures.length}):\n\n${failures.join('\n\n')}\n\n`;
  if (wholeRun) recordDurations(finished);
  const slowest = finished.sort((a, b) => b.seconds - a.seconds).slice(0, SLOWEST_LISTED);
  if (slowest.length > 0) yield `Slowest files:\n${slowest.map((f) => `  ${f.seconds.toFixed(1).padStart(6)} s  ${f.file}`).join('\n')}\n\n`;
  yield `${summary.join('\n')}\nFull output: test-results.log\n`;
}

/** Each file's seconds of a whole run, kept for the next run's order (test/run.mjs: longest first). */
function recordDurations(finished) {
  const seconds = {};
  for (const f of finished) seconds[f.file] = Math.round(f.seconds * 10) / 10;
  try {
    writeFileSync(DURATIONS_FILE, `${JSON.stringify(seconds, null, 1)}\n`);
  } catch {
    // a read-only checkout: the next run uses the built-in order
  }
}

/** A whole file failed (it crashed or did not load, or a hook failed): what it wrote to stderr says why. */
function fileFailure(data, stderr) {
  const error = data.details?.error;
  let report = `✖ ${rel(data.file)}\n${indent(inspect(error?.cause ?? error, { depth: 4, colors: false }))}`;
  if (stderr.has(data.file)) report += `\n    stderr:\n${indent(stderr.get(data.file), 6)}`;
  return report;
}

function isSameFile(name, file) {
  return name === file || path.resolve(name) === path.resolve(file);
}

function rel(file) {
  return path.relative(process.cwd(), file) || file;
}

function indent(text, spaces = 4) {
  return text.replace(/^/gm, ' '.repeat(spaces));
}
