import { Readable } from 'node:stream';
import { createInterface } from 'node:readline';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { stringify } from 'csv-stringify/sync';
import { MAX_EXPORT_DAYS } from '../../core/limits.ts';
import { loadCliEnv } from '../../config.ts';
import { dataDirOption, onDataDir, resolveDataDir } from '../data-dir.ts';
import { CliError } from '../errors.ts';
import { progress } from '../progress.ts';
import { Remote, remote, type RemoteOptions } from '../remote.ts';

/**
 * `analytics export`: daily aggregates over HTTP (one row per day), or with --raw the stored events, exactly as
 * `analytics import` reads them back: remotely through GET /projects/{id}/export (--url/--key), or from the data
 * directory with --data-dir (LMDB allows readers beside the running service). CSV via csv-stringify.
 */

/** CONTRACT: a metrics range is at most 366 days; longer exports are fetched in chunks of this many days. */
const MAX_RANGE_DAYS = 366;
const DAY_MS = 86_400_000;
/** Rows are written to stdout in pieces of about this size: one write (and one wait for drain) per line is slow. */
const WRITE_BYTES = 64 * 1024;

function date(value: string): string {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(value) || Number.isNaN(Date.parse(`${value}T00:00:00Z`))) throw new InvalidArgumentError('must be a date YYYY-MM-DD');
  return value;
}

const addDays = (d: string, n: number) => new Date(Date.parse(`${d}T00:00:00Z`) + n * DAY_MS).toISOString().slice(0, 10);

const DAILY_COLUMNS = ['date', 'users', 'sessions', 'pageviews', 'bounce_rate'] as const;
/** Raw CSV: the columns `import` reads (eventParams and items as JSON); page context is left out of CSV. */
const RAW_COLUMNS = ['timestamp', 'event', 'url', 'referrer', 'source', 'sessionId', 'userId', 'fingerprint', 'country', 'device', 'browser', 'os', 'eventId', 'eventParams', 'items'] as const;

function write(line: string): Promise<void> {
  return new Promise((resolve) => (process.stdout.write(line) ? resolve() : process.stdout.once('drain', resolve)));
}

function rawCsvRow(e: Record<string, unknown>): string {
  return stringify([RAW_COLUMNS.map((c) => {
    const v = e[c];
    if (v === undefined) return '';
    return typeof v === 'object' ? JSON.stringify(v) : String(v);
  })]);
}

type Opts = RemoteOptions & { project: string; from: string; to: string; format: 'csv' | 'ndjson'; raw?: boolean; dataDir?: string };

/** --raw remotely: the export endpoint's NDJSON, passed through line by line (CSV: converted). */
async function remoteRaw(opts: Opts): Promise<void> {
  const api = new Remote(opts);
  for (let start = opts.from; start <= opts.to; start = addDays(start, MAX_EXPORT_DAYS)) {
    const end = [addDays(start, MAX_EXPORT_DAYS - 1), opts.to].sort()[0]!;
    const res = await api.stream(`/projects/${encodeURIComponent(opts.project)}/export?from=${start}&to=${end}`);
    if (!res.body) continue;
    const body = Readable.fromWeb(res.body as import('node:stream/web').ReadableStream);
    if (opts.format === 'ndjson') {
      // already the lines import reads: passed through as they come, at the pace stdout takes them
      for await (const chunk of body) if (!process.stdout.write(chunk as Buffer)) await new Promise<void>((resolve) => process.stdout.once('drain', () => resolve()));
      continue;
    }
    let out = '';
    for await (const line of createInterface({ input: body, crlfDelay: Infinity })) {
      if (line === '') continue;
      out += rawCsvRow(JSON.parse(line) as Record<string, unknown>);
      if (out.length >= WRITE_BYTES) {
        await write(out);
        out = '';
      }
    }
    if (out !== '') await write(out);
  }
}

export function registerExport(program: Command): void {
  dataDirOption(
    remote(
      program
        .command('export')
        .description('daily aggregates (date, users, sessions, pageviews, bounce_rate) or, with --raw, the stored events (what import reads), to stdout')
        .requiredOption('--project <id>', 'project id')
        .requiredOption('--from <date>', 'first day, YYYY-MM-DD', date)
        .option('--to <date>', 'last day, YYYY-MM-DD (default: today, UTC)', date)
        .addOption(new Option('--format <format>', 'output format').choices(['csv', 'ndjson']).default('csv'))
        .option('--raw', 'the stored events instead of daily aggregates: through the service (--url/--key), or from --data-dir'),
    ),
  ).action(async (opts: Omit<Opts, 'to'> & { to?: string }) => {
    const to = opts.to ?? new Date().toISOString().slice(0, 10);
    if (opts.from > to) throw new CliError(`--from ${opts.from} is after --to ${to}`);
    if (opts.format === 'csv') await write(stringify([opts.raw ? [...RAW_COLUMNS] : [...DAILY_COLUMNS]]));
    if (opts.raw) {
      // --data-dir reads the directory; otherwise a service URL (--url or $ANALYTICS_URL) goes through the endpoint.
      if (opts.dataDir === undefined && (opts.url !== undefined || loadCliEnv().url !== undefined)) return remoteRaw({ ...opts, to });
      const dir = resolveDataDir(opts);
      // The store and the fold load here, not at the top: every other command starts without them.
      const [{ rawEvents }, { exportLine }] = await Promise.all([import('../../engine/maintenance.ts'), import('../../core/history-line.ts')]);
      let bar: ReturnType<typeof progress> | undefined;
      let out = '';
      await onDataDir(async () => {
        for await (const e of rawEvents(dir, opts.project, opts.from, to, (done, total) => {
          bar ??= progress('export', total);
          bar.update(done);
        })) {
          const line = exportLine(e);
          out += opts.format === 'ndjson' ? `${JSON.stringify(line)}\n` : rawCsvRow(line);
          if (out.length >= WRITE_BYTES) {
            await write(out);
            out = '';
          }
        }
        if (out !== '') await write(out);
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
