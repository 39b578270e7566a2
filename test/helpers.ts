import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/config.ts';
import { startService, type RunningService, type ServiceOptions } from '../src/service.ts';
import { conformanceProblem } from './openapi-conformance.ts';

/** A real service on port 0 over a real LMDB in a temporary directory. */
export interface TestService {
  url: string;
  grpcAddress: string;
  adminKey: string;
  dataDir: string;
  service: RunningService;
  /** graceful stop; the data directory stays */
  stop(): Promise<void>;
  /** stop, then start again on the same data directory and admin key */
  restart(env?: Record<string, string>): Promise<TestService>;
  /** stop and delete the data directory */
  destroy(): Promise<void>;
}

export interface TestServiceOptions {
  now?: () => number;
  dataDir?: string;
  adminKey?: string;
  connections?: ServiceOptions['connections'];
  storeFaults?: ServiceOptions['storeFaults'];
}

export async function startTestService(env: Record<string, string> = {}, opts: TestServiceOptions = {}): Promise<TestService> {
  const dataDir = opts.dataDir ?? mkdtempSync(path.join(tmpdir(), 'analytics-test-'));
  const adminKey = opts.adminKey ?? `ak_${randomBytes(24).toString('base64url')}`;
  const config = loadConfig({
    PORT: '0',
    GRPC_PORT: '0',
    HOST: '127.0.0.1',
    ANALYTICS_DATA_DIR: dataDir,
    ANALYTICS_ADMIN_KEY: adminKey,
    ANALYTICS_QUIET: '1',
    ...env,
  });
  const service = await startService(config, {
    ...(opts.now ? { now: opts.now } : {}),
    ...(opts.connections ? { connections: opts.connections } : {}),
    ...(opts.storeFaults ? { storeFaults: opts.storeFaults } : {}),
  });
  const handle: TestService = {
    url: service.url,
    grpcAddress: service.grpcAddress,
    adminKey,
    dataDir,
    service,
    stop: () => service.stop(),
    async restart(nextEnv = env) {
      await service.stop();
      return startTestService(nextEnv, { ...opts, dataDir, adminKey });
    },
    async destroy() {
      await service.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return handle;
}

export interface ApiResponse<T = any> {
  status: number;
  headers: Headers;
  body: T;
}

export interface ApiOptions {
  method?: string;
  key?: string;
  body?: unknown;
  /** a raw body string (sent as is) */
  raw?: string;
  headers?: Record<string, string>;
}

/** One HTTP call with JSON in and out. */
export async function api<T = any>(base: string, route: string, opts: ApiOptions = {}): Promise<ApiResponse<T>> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.key !== undefined) headers.authorization = `Bearer ${opts.key}`;
  let body: string | undefined;
  if (opts.raw !== undefined) body = opts.raw;
  else if (opts.body !== undefined) body = JSON.stringify(opts.body);
  if (body !== undefined && !Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) {
    headers['content-type'] = 'application/json';
  }
  const method = opts.method ?? (body !== undefined ? 'POST' : 'GET');
  let res: Response;
  try {
    res = await fetch(base + route, { method, headers, body });
  } catch (err) {
    // A service restarted on port 0 can get its old port back; fetch may then send a GET on a kept-alive socket the
    // stopped service closed ("other side closed"). A GET changes nothing, so it is sent once more on a new socket.
    const cause = (err as { cause?: { message?: string } }).cause;
    if (method !== 'GET' || cause?.message !== 'other side closed') throw err;
    res = await fetch(base + route, { method, headers, body });
  }
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text === '' ? undefined : JSON.parse(text);
  } catch {
    /* not JSON: keep the text */
  }
  const problem = conformanceProblem(opts.method ?? (body !== undefined ? 'POST' : 'GET'), route, res.status, res.headers.get('content-type'), parsed);
  if (problem) throw new Error(`answer does not conform to /openapi.json: ${problem}`);
  return { status: res.status, headers: res.headers, body: parsed as T };
}

export interface CreatedProject {
  project: { id: string; name: string; timezone: string; monthly_quota: number; allowed_origins: string[]; allowed_referrers: string[] };
  keys: { secret: string; publishable: string };
}

export async function createProject(url: string, adminKey: string, body: object = {}): Promise<CreatedProject> {
  const res = await api<CreatedProject>(url, '/projects', {
    key: adminKey,
    body: { allowed_origins: [], allowed_referrers: [], ...body },
  });
  if (res.status !== 200) throw new Error(`createProject: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** Today's date in UTC, YYYY-MM-DD. */
export function todayUtc(now = Date.now()): string {
  return new Date(now).toISOString().slice(0, 10);
}
