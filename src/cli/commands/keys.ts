import { type Command, InvalidArgumentError, Option } from 'commander';
import { CliError } from '../errors.ts';
import { print, Remote, remote, table, type RemoteOptions } from '../remote.ts';

/** `analytics keys list|create|revoke|rotate`: a project's API keys (over HTTP). */

interface KeyJson {
  id: string;
  type: 'secret' | 'publishable' | 'read';
  hint: string;
  created_at: string;
  expires_at: string | null;
}

const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `90s`, `30m`, `24h`, `7d` or `0` → milliseconds. */
export function duration(value: string): number {
  if (value === '0') return 0;
  const m = /^(\d+)(s|m|h|d)$/.exec(value);
  if (!m) throw new InvalidArgumentError('must be a duration like 30m, 24h or 7d (or 0)');
  return Number(m[1]) * UNIT_MS[m[2]!]!;
}

function isoInFuture(value: string): string {
  const t = Date.parse(value);
  if (Number.isNaN(t) || !/^\d{4}-\d\d-\d\dT/.test(value)) throw new InvalidArgumentError('must be an ISO-8601 time like 2027-01-01T00:00:00Z');
  return new Date(t).toISOString();
}

const typeOption = () => new Option('--type <type>', 'secret (sk_), publishable (pk_) or read (rk_)').choices(['secret', 'publishable', 'read']).makeOptionMandatory();

function keyRows(keys: KeyJson[]): string {
  return table([['ID', 'TYPE', 'HINT', 'CREATED', 'EXPIRES'], ...keys.map((k) => [k.id, k.type, k.hint, k.created_at, k.expires_at ?? 'never'])]);
}

export function registerKeys(program: Command): void {
  const keys = program.command('keys').description("list, create, revoke and rotate a project's API keys (over HTTP)");

  remote(keys.command('list').description("a project's keys (never the keys themselves)").argument('<project>', 'project id')).action(
    async (project: string, opts: RemoteOptions) => {
      const out: { keys: KeyJson[] } = await new Remote(opts).call('GET', `/projects/${encodeURIComponent(project)}/keys`);
      print(opts.json, out, () => keyRows(out.keys));
    },
  );

  remote(
    keys
      .command('create')
      .description('create a key; prints it once')
      .argument('<project>', 'project id')
      .addOption(typeOption())
      .option('--expires <iso>', 'stop working at this time (ISO-8601)', isoInFuture),
  ).action(async (project: string, opts: RemoteOptions & { type: string; expires?: string }) => {
    const body: Record<string, unknown> = { type: opts.type };
    if (opts.expires !== undefined) body.expires_at = opts.expires;
    const out: KeyJson & { key: string } = await new Remote(opts).call('POST', `/projects/${encodeURIComponent(project)}/keys`, body);
    print(opts.json, out, () => `${out.key}\n(id ${out.id}, ${out.type}${out.expires_at ? `, expires ${out.expires_at}` : ''}; shown only now)`);
  });

  remote(keys.command('revoke').description('revoke a key: refused at once and after restarts').argument('<project>', 'project id').argument('<keyId>', 'key id (keys list)')).action(
    async (project: string, keyId: string, opts: RemoteOptions) => {
      const out = await new Remote(opts).call('DELETE', `/projects/${encodeURIComponent(project)}/keys/${encodeURIComponent(keyId)}`);
      print(opts.json, out, () => `revoked ${keyId}`);
    },
  );

  remote(
    keys
      .command('rotate')
      .description('create a key of the same type and retire the old one after the overlap (default: at once)')
      .argument('<project>', 'project id')
      .argument('<keyId>', 'the key to replace (keys list)')
      .option('--overlap <duration>', 'keep the old key working this long, e.g. 24h or 7d', duration, 0),
  ).action(async (project: string, keyId: string, opts: RemoteOptions & { overlap: number }) => {
    const api = new Remote(opts);
    const base = `/projects/${encodeURIComponent(project)}/keys`;
    const { keys: all }: { keys: KeyJson[] } = await api.call('GET', base);
    const old = all.find((k) => k.id === keyId);
    if (!old) throw new CliError(`no key ${keyId} in project ${project}`);
    const created: KeyJson & { key: string } = await api.call('POST', base, { type: old.type });
    let retired: KeyJson | { ok: true };
    if (opts.overlap === 0) retired = await api.call('DELETE', `${base}/${encodeURIComponent(keyId)}`);
    else retired = await api.call('PATCH', `${base}/${encodeURIComponent(keyId)}`, { expires_at: new Date(Date.now() + opts.overlap).toISOString() });
    print(opts.json, { key: created, old: { id: keyId, ...('expires_at' in retired ? { expires_at: retired.expires_at } : { revoked: true }) } }, () =>
      `${created.key}\n(new ${created.type} key ${created.id}; shown only now)\n` +
      ('expires_at' in retired ? `old key ${keyId} keeps working until ${retired.expires_at}` : `old key ${keyId} is revoked`),
    );
  });
}
