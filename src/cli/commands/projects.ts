import { type Command, InvalidArgumentError } from 'commander';
import { CliError } from '../errors.ts';
import type { ProjectView } from '../../engine/types.ts';
import { print, Remote, remote, table, type RemoteOptions } from '../remote.ts';

/** `analytics projects list|create|update|delete`: the HTTP management calls. */

/** Page size when listing everything: the contract's maximum, so few round trips. */
const LIST_PAGE = 1000;

/** The JSON the HTTP face answers for a project: the engine's view, so the two cannot drift apart. */
type ProjectJson = ProjectView;

const collect = (value: string, previous: string[] = []) => [...previous, value];

export function integer(value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('must be a non-negative integer');
  return Number(value);
}

function describeProject(p: ProjectJson): string {
  return table([
    ['id', p.id],
    ['name', p.name],
    ['origins', p.allowed_origins.join(' ') || '(any)'],
    ['referrers', p.allowed_referrers.join(' ') || '(any)'],
    ['timezone', p.timezone],
    ['monthly quota', p.monthly_quota === 0 ? 'unlimited' : String(p.monthly_quota)],
    ['tracked props', (p.tracked_props ?? []).join(' ') || '(none)'],
    ['created', p.created_at],
  ]);
}

export function registerProjects(program: Command): void {
  const projects = program.command('projects').description('list, create, update and delete projects (over HTTP)');

  remote(projects.command('list').description('list the projects the key may see, in creation order')).action(async (opts: RemoteOptions) => {
    const api = new Remote(opts);
    const all: ProjectJson[] = [];
    let cursor: string | null = null;
    do {
      const page: { projects: ProjectJson[]; next_cursor: string | null } = await api.call(
        'GET',
        `/projects?limit=${LIST_PAGE}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
      );
      all.push(...page.projects);
      cursor = page.next_cursor;
    } while (cursor !== null);
    print(opts.json, { projects: all }, () =>
      all.length === 0 ? 'no projects' : table([['ID', 'NAME', 'TIMEZONE', 'QUOTA', 'CREATED'], ...all.map((p) => [p.id, p.name, p.timezone, String(p.monthly_quota), p.created_at])]),
    );
  });

  remote(
    projects
      .command('create')
      .description('create a project; prints its keys once (they are not shown again)')
      .option('--name <name>', 'display name')
      .option('--origin <origin>', 'allowed origin, e.g. https://shop.example (repeat for more; none = any)', collect, [])
      .option('--referrer <host>', 'allowed referrer host (repeat for more; none = any)', collect, [])
      .option('--timezone <tz>', 'IANA timezone its days are counted in (default UTC)')
      .option('--quota <n>', 'events per calendar month, 0 = unlimited', integer),
  ).action(async (opts: RemoteOptions & { name?: string; origin: string[]; referrer: string[]; timezone?: string; quota?: number }) => {
    const api = new Remote(opts);
    const body: Record<string, unknown> = { allowed_origins: opts.origin, allowed_referrers: opts.referrer };
    if (opts.name !== undefined) body.name = opts.name;
    if (opts.timezone !== undefined) body.timezone = opts.timezone;
    if (opts.quota !== undefined) body.monthly_quota = opts.quota;
    const created: { project: ProjectJson; keys: { secret: string; publishable: string } } = await api.call('POST', '/projects', body);
    print(opts.json, created, () =>
      `${describeProject(created.project)}\n\nsecret key       ${created.keys.secret}\npublishable key  ${created.keys.publishable}\n` +
      'Keep the secret key on servers; the keys are shown only now.',
    );
  });

  remote(
    projects
      .command('update')
      .description('change a project: only the options given (the timezone cannot change)')
      .argument('<id>', 'project id')
      .option('--name <name>', 'display name')
      .option('--origin <origin>', 'allowed origins: replaces the list (repeat for more)', collect)
      .option('--any-origin', 'clear allowed origins (any origin)')
      .option('--referrer <host>', 'allowed referrer hosts: replaces the list (repeat for more)', collect)
      .option('--any-referrer', 'clear allowed referrers')
      .option('--quota <n>', 'events per calendar month, 0 = unlimited', integer)
      .option('--track <key>', 'eventParams keys to count per value: replaces the list (repeat for more)', collect),
  ).action(async (id: string, opts: RemoteOptions & { name?: string; origin?: string[]; anyOrigin?: boolean; referrer?: string[]; anyReferrer?: boolean; quota?: number; track?: string[] }) => {
    const api = new Remote(opts);
    const body: Record<string, unknown> = {};
    if (opts.name !== undefined) body.name = opts.name;
    if (opts.origin !== undefined) body.allowed_origins = opts.origin;
    if (opts.anyOrigin) body.allowed_origins = [];
    if (opts.referrer !== undefined) body.allowed_referrers = opts.referrer;
    if (opts.anyReferrer) body.allowed_referrers = [];
    if (opts.quota !== undefined) body.monthly_quota = opts.quota;
    if (opts.track !== undefined) body.tracked_props = opts.track;
    if (Object.keys(body).length === 0) throw new CliError('nothing to change: give at least one option (see --help)');
    const out: { project: ProjectJson } = await api.call('PATCH', `/projects/${encodeURIComponent(id)}`, body);
    print(opts.json, out, () => describeProject(out.project));
  });

  remote(
    projects
      .command('delete')
      .description('delete a project: its keys stop working and its events are erased from every file')
      .argument('<id>', 'project id')
      .option('--yes', 'confirm: this cannot be undone'),
  ).action(async (id: string, opts: RemoteOptions & { yes?: boolean }) => {
    if (!opts.yes) throw new CliError(`deleting ${id} erases all its events and cannot be undone: add --yes to confirm`);
    const api = new Remote(opts);
    const out = await api.call('DELETE', `/projects/${encodeURIComponent(id)}`);
    print(opts.json, out, () => `deleted ${id}; its events are erased`);
  });
}
