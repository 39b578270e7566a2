import { type Command, InvalidArgumentError, Option } from 'commander';
import { stringify } from 'csv-stringify/sync';
import { print, Remote, remote, table, type RemoteOptions } from '../remote.ts';

/**
 * `analytics query`: POST /query from the command line, printed as a table, CSV or the answer's JSON; and
 * `analytics goals list|create|delete`: a project's goals. Over HTTP; the service judges every field.
 */

interface QueryAnswer {
  metrics: string[];
  dimensions: string[];
  results: Array<{ dimensions: string[]; metrics: number[] }>;
  totals: number[];
  totalRows: number;
  from: string;
  to: string;
}

interface GoalJson {
  id: string;
  name: string;
  event?: string;
  page?: string;
  created_at: string;
}

const names = (value: string): string[] => value.split(',').map((s) => s.trim()).filter((s) => s !== '');

/**
 * `op:dimension:value`: the dimension is one segment, or two for `prop:<key>`; the value is the rest (it may hold
 * colons). Several values of one filter (any of them matches) are separated by `|`.
 */
export function filterArg(value: string, previous: unknown[][] = []): unknown[][] {
  const first = value.indexOf(':');
  if (first <= 0) throw new InvalidArgumentError('a filter is op:dimension:value, e.g. is:country:DE or contains:page:/blog');
  const op = value.slice(0, first);
  let rest = value.slice(first + 1);

  const prefix = rest.startsWith('prop:') ? 'prop:' : '';
  rest = rest.slice(prefix.length);
  const second = rest.indexOf(':');
  if (second <= 0) throw new InvalidArgumentError('a filter is op:dimension:value, e.g. is:country:DE or is:prop:plan:pro');
  const dimension = prefix + rest.slice(0, second);
  const values = rest.slice(second + 1).split('|');
  return [...previous, [op, dimension, values]];
}

function orderArg(value: string, previous: string[][] = []): string[][] {
  const at = value.lastIndexOf(':');
  const [name, direction] = at > 0 && /^(asc|desc)$/.test(value.slice(at + 1)) ? [value.slice(0, at), value.slice(at + 1)] : [value, 'desc'];
  return [...previous, [name, direction]];
}

function count(value: string): number {
  if (!/^\d{1,9}$/.test(value)) throw new InvalidArgumentError('must be a whole number');
  return Number(value);
}

function rows(a: QueryAnswer): string[][] {
  return [[...a.dimensions, ...a.metrics], ...a.results.map((r) => [...r.dimensions, ...r.metrics.map(String)])];
}

export function registerQuery(program: Command): void {
  remote(
    program
      .command('query')
      .description('ask a question (POST /query): metrics by up to three dimensions, with filters, over a range of days')
      .option('--project <id>', 'project id (required with an admin key)')
      .option('--date <date>', 'one day, YYYY-MM-DD')
      .option('--from <date>', 'first day, YYYY-MM-DD')
      .option('--to <date>', 'last day, YYYY-MM-DD (default: today)')
      .requiredOption('--metrics <names>', 'comma-separated: visitors, visits, pageviews, events, bounceRate, viewsPerVisit, visitDuration, conversionRate', names)
      .option('--dimensions <names>', 'comma-separated, up to 3: page, source, country, device, browser, os, entryPage, exitPage, event, goal, utmMedium, utmCampaign, prop:<key>, time:hour|day|week|month', names)
      .option('--filter <op:dimension:value>', 'repeatable, all must hold; op is is, isNot, contains or notContains; several values: a|b', filterArg)
      .option('--order <name[:asc|desc]>', 'repeatable; default: time ascending, else the first metric descending', orderArg)
      .option('--limit <n>', 'rows, 1 to 10000 (default 100)', count)
      .option('--offset <n>', 'rows to skip', count)
      .addOption(new Option('--format <format>', 'output format').choices(['table', 'csv', 'json']).default('table')),
  ).action(
    async (
      opts: RemoteOptions & {
        project?: string; date?: string; from?: string; to?: string; metrics: string[]; dimensions?: string[];
        filter?: unknown[][]; order?: string[][]; limit?: number; offset?: number; format: 'table' | 'csv' | 'json';
      },
    ) => {
      const body: Record<string, unknown> = { metrics: opts.metrics };
      if (opts.project !== undefined) body.projectId = opts.project;
      for (const k of ['date', 'from', 'to', 'dimensions', 'limit', 'offset'] as const) if (opts[k] !== undefined) body[k] = opts[k];
      if (opts.filter) body.filters = opts.filter;
      if (opts.order) body.orderBy = opts.order;
      const answer: QueryAnswer = await new Remote(opts).call('POST', '/query', body);
      if (opts.json || opts.format === 'json') return print(true, answer, () => '');
      if (opts.format === 'csv') {
        process.stdout.write(stringify(rows(answer)));
        return;
      }
      const totals = answer.dimensions.length > 0 ? `\n${answer.totalRows} rows (${answer.from} … ${answer.to}); totals: ${answer.metrics.map((m, i) => `${m} ${answer.totals[i]}`).join(', ')}` : '';
      process.stdout.write(`${table(rows(answer))}${totals}\n`);
    },
  );

  const goals = program.command('goals').description("list, create and delete a project's goals (over HTTP)");
  const base = (project: string) => `/projects/${encodeURIComponent(project)}/goals`;

  remote(goals.command('list').description("a project's goals").argument('<project>', 'project id')).action(async (project: string, opts: RemoteOptions) => {
    const out: { goals: GoalJson[] } = await new Remote(opts).call('GET', base(project));
    print(opts.json, out, () => table([['ID', 'NAME', 'MATCHES', 'CREATED'], ...out.goals.map((g) => [g.id, g.name, g.event !== undefined ? `event ${g.event}` : `page ${g.page}`, g.created_at])]));
  });

  remote(
    goals
      .command('create')
      .description('create a goal: an event name, or a page path pattern (* matches any run of characters)')
      .argument('<project>', 'project id')
      .requiredOption('--name <name>', 'unique in the project, 1 to 64 characters')
      .addOption(new Option('--event <event>', 'completed by an event of this name').conflicts('page'))
      .addOption(new Option('--page <pattern>', 'completed by a page view whose path matches, e.g. /thanks or /docs/*').conflicts('event')),
  ).action(async (project: string, opts: RemoteOptions & { name: string; event?: string; page?: string }) => {
    const body: Record<string, unknown> = { name: opts.name };
    if (opts.event !== undefined) body.event = opts.event;
    if (opts.page !== undefined) body.page = opts.page;
    const out: { goal: GoalJson } = await new Remote(opts).call('POST', base(project), body);
    print(opts.json, out, () => `created goal ${out.goal.id} (${out.goal.name})`);
  });

  remote(goals.command('delete').description('delete a goal').argument('<project>', 'project id').argument('<goalId>', 'goal id (goals list)')).action(
    async (project: string, goalId: string, opts: RemoteOptions) => {
      const out = await new Remote(opts).call('DELETE', `${base(project)}/${encodeURIComponent(goalId)}`);
      print(opts.json, out, () => `deleted goal ${goalId}`);
    },
  );
}
