import { z } from 'zod';

/**
 * Every setting of the service, parsed once from the environment and frozen. This is the only file that reads
 * process.env; everything else receives a Config.
 */

const port = z.coerce.number().int().min(0).max(65535);
const bool = z
  .enum(['1', '0', 'true', 'false', 'yes', 'no', 'on', 'off'])
  .transform((v) => v === '1' || v === 'true' || v === 'yes' || v === 'on');

const EnvSchema = z.object({
  PORT: port.default(8080),
  GRPC_PORT: port.default(50051),
  HOST: z.string().min(1).default('127.0.0.1'),
  ANALYTICS_DATA_DIR: z.string().min(1).default('./storage'),
  ANALYTICS_ADMIN_KEY: z
    .string()
    .regex(/^ak_[A-Za-z0-9_-]{22,}$/, 'must be ak_ followed by at least 22 base62/base64url characters (128 bits)')
    .optional(),
  ANALYTICS_DURABILITY: z.enum(['flush', 'commit']).default('flush'),
  /** take the client IP from X-Forwarded-For (only behind a proxy you run) */
  TRUST_PROXY: bool.default(false),
  /** an IP-to-country .mmdb file; defaults to the CC0 database shipped in node_modules */
  ANALYTICS_GEO_DB: z.string().min(1).optional(),
  /** snapshot at least this often while events arrive */
  ANALYTICS_SNAPSHOT_INTERVAL_MS: z.coerce.number().int().min(1000).default(5 * 60 * 1000),
  /** and after this many events since the last snapshot */
  ANALYTICS_SNAPSHOT_EVERY_EVENTS: z.coerce.number().int().min(1).default(1_000_000),
  /** default per-key token bucket (CONTRACT: 1,000/s, burst 2,000) */
  ANALYTICS_RATE_PER_KEY: z.coerce.number().positive().default(1000),
  ANALYTICS_BURST_PER_KEY: z.coerce.number().positive().default(2000),
  /** default per-client-IP bucket for pk_ keys (CONTRACT: 50/s, burst 100) */
  ANALYTICS_RATE_PER_IP: z.coerce.number().positive().default(50),
  ANALYTICS_BURST_PER_IP: z.coerce.number().positive().default(100),
  /** Prometheus operator metrics on this port (bound to HOST); unset = off, 0 = any free port */
  METRICS_PORT: port.optional(),
  /** quiet startup/shutdown logs (tests) */
  ANALYTICS_QUIET: bool.default(false),
  /** set by npm for `npm start`, `npm exec`/`npx` (npm's own variable, not ours) */
  npm_command: z.string().optional(),
});

export interface Config {
  port: number;
  grpcPort: number;
  host: string;
  dataDir: string;
  adminKey: string | undefined;
  durability: 'flush' | 'commit';
  trustProxy: boolean;
  geoDbPath: string | undefined;
  snapshotIntervalMs: number;
  snapshotEveryEvents: number;
  rate: { perKey: number; burstPerKey: number; perIp: number; burstPerIp: number };
  quiet: boolean;
  metricsPort: number | undefined;
  /**
   * Started by npm (`npm start`, `npx analytics serve`): npm forwards a signal only to the shell it spawned, and that
   * shell dies without relaying it, so the service also stops (drains) when its parent process goes away.
   */
  stopWithParent: boolean;
}

export class ConfigError extends Error {}

export function loadConfig(env: Record<string, string | undefined> = process.env): Readonly<Config> {
  const parsed = EnvSchema.safeParse(env);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
  }
  const e = parsed.data;
  return Object.freeze({
    port: e.PORT,
    grpcPort: e.GRPC_PORT,
    host: e.HOST,
    dataDir: e.ANALYTICS_DATA_DIR,
    adminKey: e.ANALYTICS_ADMIN_KEY,
    durability: e.ANALYTICS_DURABILITY,
    trustProxy: e.TRUST_PROXY,
    geoDbPath: e.ANALYTICS_GEO_DB,
    snapshotIntervalMs: e.ANALYTICS_SNAPSHOT_INTERVAL_MS,
    snapshotEveryEvents: e.ANALYTICS_SNAPSHOT_EVERY_EVENTS,
    rate: Object.freeze({
      perKey: e.ANALYTICS_RATE_PER_KEY,
      burstPerKey: e.ANALYTICS_BURST_PER_KEY,
      perIp: e.ANALYTICS_RATE_PER_IP,
      burstPerIp: e.ANALYTICS_BURST_PER_IP,
    }),
    quiet: e.ANALYTICS_QUIET,
    metricsPort: e.METRICS_PORT,
    stopWithParent: e.npm_command !== undefined && e.npm_command !== '',
  });
}

/** What the `analytics` CLI reads from the environment: defaults for --url, --key and --data-dir. */
export interface CliEnv {
  url: string | undefined;
  key: string | undefined;
  dataDir: string | undefined;
}

export function loadCliEnv(env: Record<string, string | undefined> = process.env): CliEnv {
  const pick = (name: string) => (env[name] === undefined || env[name] === '' ? undefined : env[name]);
  return { url: pick('ANALYTICS_URL'), key: pick('ANALYTICS_KEY'), dataDir: pick('ANALYTICS_DATA_DIR') };
}
