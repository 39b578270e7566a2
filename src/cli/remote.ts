import type { Command } from 'commander';
import { loadCliEnv } from '../config.ts';
import { CliError } from './errors.ts';

/** The HTTP side of the remote commands: one JSON call, errors become CliError with the service's code and message. */

export interface RemoteOptions {
  url?: string;
  key?: string;
  json?: boolean;
}

/** --url, --key and --json on a remote command (defaults from ANALYTICS_URL / ANALYTICS_KEY). */
export function remote(cmd: Command, keyHelp = 'API key: ak_ admin or the project\'s sk_'): Command {
  return cmd
    .option('--url <url>', 'service base URL, e.g. http://127.0.0.1:8080 (default: $ANALYTICS_URL)')
    .option('--key <key>', `${keyHelp} (default: $ANALYTICS_KEY)`)
    .option('--json', 'print machine-readable JSON');
}

export class Remote {
  readonly base: string;
  private readonly key: string;

  constructor(opts: RemoteOptions) {
    const env = loadCliEnv();
    const url = opts.url ?? env.url;
    const key = opts.key ?? env.key;
    if (!url) throw new CliError('no service URL: pass --url or set ANALYTICS_URL');
    if (!key) throw new CliError('no API key: pass --key or set ANALYTICS_KEY');
    if (!URL.canParse(url)) throw new CliError(`--url ${url} is not a URL`);
    this.base = url.replace(/\/+$/, '');
    this.key = key;
  }

  get isAdminKey(): boolean {
    return this.key.startsWith('ak_');
  }

  /** One call; resolves with the JSON body of a 2xx, throws CliError otherwise. */
  async call<T = unknown>(method: string, route: string, body?: unknown): Promise<T> {
    const res = await this.send(method, route, body);
    if (res.ok) return res.body as T;
    throw new CliError(describe(res.status, res.body));
  }

  /** A GET whose body the caller streams (an export); a refusal becomes CliError. */
  async stream(route: string): Promise<Response> {
    let res: Response;
    try {
      res = await fetch(this.base + route, { headers: { authorization: `Bearer ${this.key}` } });
    } catch (err) {
      const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : '';
      throw new CliError(`cannot reach ${this.base}${cause}`);
    }
    if (res.ok) return res;
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* not JSON: keep the text */
    }
    throw new CliError(describe(res.status, parsed));
  }

  /** The raw answer (for callers that handle 429 themselves). */
  async send(method: string, route: string, body?: unknown, json?: string): Promise<{ ok: boolean; status: number; body: unknown; retryAfter: number | undefined }> {
    let res: Response;
    // `json`: the body already serialized (import joins the lines it has encoded once)
    const sent = json ?? (body === undefined ? undefined : JSON.stringify(body));
    try {
      res = await fetch(this.base + route, {
        method,
        headers: { authorization: `Bearer ${this.key}`, ...(sent === undefined ? {} : { 'content-type': 'application/json' }) },
        body: sent,
      });
    } catch (err) {
      const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : '';
      throw new CliError(`cannot reach ${this.base}${cause}`);
    }
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text === '' ? undefined : JSON.parse(text);
    } catch {
      /* not JSON: keep the text */
    }
    const retry = Number(res.headers.get('retry-after'));
    return { ok: res.ok, status: res.status, body: parsed, retryAfter: Number.isFinite(retry) && retry > 0 ? retry : undefined };
  }
}

/** The error body every face answers (docs/http-api.md, "Errors"), as far as a message needs it. */
interface ErrorBody {
  error?: { code?: unknown; message?: unknown; details?: Array<{ index?: number; path?: string; message?: string }> };
}

/** The error code of an answer's body, if it is the service's error shape. */
export function errorCode(body: unknown): string | undefined {
  const code = typeof body === 'object' && body !== null ? (body as ErrorBody).error?.code : undefined;
  return typeof code === 'string' ? code : undefined;
}

export function describe(status: number, body: unknown): string {
  const e = typeof body === 'object' && body !== null ? (body as ErrorBody).error : undefined;
  if (e && typeof e.code === 'string') {
    const details = Array.isArray(e.details) ? e.details.map((d) => `\n  ${d.index !== undefined ? `event ${d.index} ` : ''}${d.path}: ${d.message}`).join('') : '';
    return `${status} ${e.code}: ${String(e.message)}${details}`;
  }
  return `${status}: ${typeof body === 'string' ? body.slice(0, 200) : JSON.stringify(body)}`;
}

/** Prints a value: JSON with --json, else the text rendering. */
export function print(json: boolean | undefined, value: unknown, text: () => string): void {
  process.stdout.write(json ? `${JSON.stringify(value, null, 2)}\n` : `${text()}\n`);
}

/** Fixed-width columns for terminal tables. */
export function table(rows: string[][]): string {
  if (rows.length === 0) return '';
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ')).join('\n');
}
