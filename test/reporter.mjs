// The reporter of `npm test`: a dot per passing test, every failure in full, then the summary. The whole spec
// output goes to test-results.log at the same time (see package.json); `npm run test:verbose` prints it instead.
import { inspect } from 'node:util';

/** What a crashed test file printed is shown with its failure, up to this much of its end. */
const MAX_STDERR_CHARS = 4000;

export default async function* reporter(source) {
  const failures = [];
  const summary = [];
  const stderr = new Map();
  let dots = 0;
  for await (const event of source) {
    const { type, data } = event;
    if (type === 'test:stderr' && data.file) {
      stderr.set(data.file, ((stderr.get(data.file) ?? '') + data.message).slice(-MAX_STDERR_CHARS));
    } else if (type === 'test:pass' && data.details?.type !== 'suite') {
      yield data.skip || data.todo ? ',' : '.';
      if (++dots % 100 === 0) yield '\n';
    } else if (type === 'test:fail') {
      const error = data.details?.error;
      // A suite or file that failed because a test inside it failed adds nothing to that test's own report.
      if (error?.failureType === 'subtestsFailed') continue;
      yield 'X';
      const where = data.file ? ` (${data.file}${data.line ? `:${data.line}` : ''})` : '';
      const cause = error?.cause ?? error;
      let report = `✖ ${data.name}${where}\n${indent(inspect(cause, { depth: 4, colors: false }))}`;
      // A whole file failed (it crashed or did not load): what it wrote to stderr says why.
      if (data.name === data.file && stderr.has(data.file)) report += `\n    stderr:\n${indent(stderr.get(data.file), 6)}`;
      failures.push(report);
    } else if (type === 'test:diagnostic' && data.nesting === 0) {
      summary.push(`# ${data.message}`);
    }
  }
  yield '\n';
  if (failures.length > 0) yield `\nFailures (${failures.length}):\n\n${failures.join('\n\n')}\n\n`;
  yield `${summary.join('\n')}\nFull output: test-results.log\n`;
}

function indent(text, spaces = 4) {
  return text.replace(/^/gm, ' '.repeat(spaces));
}
