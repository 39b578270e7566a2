import { type Command, InvalidArgumentError, Option } from 'commander';
import { stringify } from 'csv-stringify/sync';
import { rawEvents } from '../../engine/maintenance.ts';
import { dataDirOption, onDataDir, resolveDataDir } from '../data-dir.ts';
import { CliError } from '../errors.ts';
import { progress } from '../progress.ts';
import { Remote, remote, type RemoteOptions } from '../remote.ts';

/**
 * `analytics export`: daily aggregates over HTTP (one row per day), or with --raw the stored events read from the data
 * directory (LMDB allows readers beside the running service). CSV via csv-stringify (quoting and escaping done right).
 */

/** CONTRACT: a metrics range is at most 366 days; longer exports are fetched in chunks of this many days. */
const MAX_RANGE_DAYS = 366;
const DAY_MS = 86_400_000;

function date(value: string): string {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(value) || Number.isNaN(Date.parse(`${value}T00:00:00Z`))) throw new InvalidArgumentError('must be a date YYYY-MM-DD');
  return value;
}

const addDays = (d: string, n: number) => new Date(Date.parse(`${d}T00:00:00Z`) + n * DAY_MS).toISOString().slice(0, 10);

const DAILY_COLUMNS = ['date', 'users', 'sessions', 'pageviews', 'bounce_rate'] as const;
const RAW_COLUMNS = ['ts', 'day', 'event', 'url', 'path', 'referrer', 'source', 'sessionId', 'userId', 'country', 'device', 'eventId', 'params'] as const;

function write(line: string): Promise<void> {
  return new Promise((resolve) => (process.stdout.write(line) ? resolve() : process.stdout.once('drain', resolve)));
}

export function registerExport(program: Command): void {
  dataDirOption(
    remote(
      program
        .command('export')
        .description('daily aggregates (date, users, sessions, pageviews, bounce_rate) or, with --raw, the stored events, to stdout')
        .requiredOption('--project <id>', 'project id')
        .requiredOption('--from <date>', 'first day, YYYY-MM-DD', date)
        .option('--to <date>', 'last day, YYYY-MM-DD (default: today, UTC)', date)
        .addOption(new Option('--format <format>', 'output format').choices(['csv', 'ndjson']).default('csv'))
        .option('--raw', 'the stored events, read from --data-dir, instead of daily aggregates'),
    ),
  ).action(async (opts: RemoteOptions & { project: string; from: string; to?: string; format: 'csv' | 'ndjson'; raw?: boolean; dataDir?: string }) => {
    const to = opts.to ?? new Date().toISOString().slice(0, 10);
    if (opts.from > to) throw new CliError(`--from ${opts.from} is after --to ${to}`);
    if (opts.format === 'csv') await write(stringify([opts.raw ? [...RAW_COLUMNS] : [...DAILY_COLUMNS]]));
    if (opts.raw) {
      const dir = resolveDataDir(opts);
      let bar: ReturnType<typeof progress> | undefined;
      await onDataDir(async () => {
        for await (const e of rawEvents(dir, opts.project, opts.from, to, (done, total) => {
          bar ??= progress('export', total);
          bar.update(done);
        })) {
          if (opts.format === 'ndjson') await write(`${JSON.stringify(e)}\n`);
          else {
            await write(stringify([[e.ts, e.day, e.event, e.url, e.path, e.referrer, e.source, e.sessionId, e.userId ?? '', e.country, e.device, e.eventId ?? '', JSON.stringify(e.params)]]));
          }
        }
      }).finally(() => bar?.stop());
      return;
    }
    const api = new Remote(opts);
    // Admin keys name the project; a project key reads its own (naming another is refused by the service).
    const isProjectKey = !api.isAdminKey;
    for (let start = opts.from; start <= to; start = addDays(start, MAX_RANGE_DAYS)) {
      const end = [addDays(start, MAX_RANGE_DAYS - 1), to].sort()[0]!;
      const q = `/metrics?from=${start}&to=${end}${isProjectKey ? '' : `&projectId=${encodeURIComponent(opts.project)}`}`;
      const m: { daily: Array<{ date: string; users: number; sessions: number; pageviews: number; bounceRate: string }> } = await api.call('GET', q);
      for (const d of m.daily) {
        const row = { date: d.date, users: d.users, sessions: d.sessions, pageviews: d.pageviews, bounce_rate: d.bounceRate };
        await write(opts.format === 'ndjson' ? `${JSON.stringify(row)}\n` : stringify([DAILY_COLUMNS.map((c) => row[c])]));
      }
    }
  });
}

