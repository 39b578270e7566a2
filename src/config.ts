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
  /** remove raw log events of sealed days older than this many days (aggregates stay); unset: keep everything */
  ANALYTICS_LOG_RETENTION_DAYS: z.coerce.number().int().min(1).optional(),
  /** default per-key token bucket (CONTRACT: 1,000/s, burst 2,000) */
  ANALYTICS_RATE_PER_KEY: z.coerce.number().positive().default(1000),
  ANALYTICS_BURST_PER_KEY: z.coerce.number().positive().default(2000),
  /** default per-client-IP bucket for pk_ keys (CONTRACT: 50/s, burst 100) */
  ANALYTICS_RATE_PER_IP: z.coerce.number().positive().default(50),
  ANALYTICS_BURST_PER_IP: z.coerce.number().positive().default(100),
  /** Prometheus operator metrics on this port (bound to HOST); unset = off, 0 = any free port */
  METRICS_PORT: port.optional(),
  /** lmdb: one node, the default; cluster: NATS JetStream (CLUSTER.md) */
  ANALYTICS_MODE: z.enum(['lmdb', 'cluster']).default('lmdb'),
  /** cluster: this node's name, stable across restarts (membership, leases) */
  ANALYTICS_NODE_ID: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'letters, digits, _ and - (1 to 64)').optional(),
  /** cluster: comma-separated NATS URLs, all servers of the cluster */
  ANALYTICS_NATS: z.string().min(1).optional(),
  /** cluster: partitions of the event stream, read on the cluster's first start only (then from the cluster config) */
  ANALYTICS_PARTITIONS: z.coerce.number().int().min(1).max(1024).default(16),
  /** cluster: owner = each partition folded by its owner (reads forwarded); all = every node folds every partition */
  ANALYTICS_FOLD: z.enum(['owner', 'all']).default('owner'),
  /** cluster: how long an ingest retries a publish (same message id) through a leader failover before a 503 */
  ANALYTICS_PUBLISH_DEADLINE_MS: z.coerce.number().int().min(100).default(30_000),
  /** cluster: the stream's max_age in days; unset = keep every event */
  ANALYTICS_RETENTION_DAYS: z.coerce.number().int().min(1).optional(),
  /** cluster: the stream's max_bytes (discard new: a full stream refuses writes with 503); unset = unlimited */
  ANALYTICS_MAX_STREAM_BYTES: z.coerce.number().int().min(1).optional(),
  /**
   * how far V8's heap may grow past what its last full collection kept before it collects again; 0 = V8's own pick
   * (10–300 %). The default trades ~10 % more CPU for half the memory an import or a busy ingest holds in garbage.
   */
  ANALYTICS_HEAP_GROWING_PERCENT: z.coerce.number().int().min(0).max(400).default(25),
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
  logRetentionDays: number | undefined;
  rate: { perKey: number; burstPerKey: number; perIp: number; burstPerIp: number };
  quiet: boolean;
  /** V8's --heap-growing-percent for the service process (0: V8 chooses) */
  heapGrowingPercent: number;
  metricsPort: number | undefined;
  mode: 'lmdb' | 'cluster';
  /** present when mode is cluster */
  cluster: ClusterConfig | undefined;
  /**
   * Started by npm (`npm start`, `npx analytics serve`): npm forwards a signal only to the shell it spawned, and that
   * shell dies without relaying it, so the service also stops (drains) when its parent process goes away.
   */
  stopWithParent: boolean;
}

/** Who folds what: `owner` (each partition's owner folds it) or `all` (every node folds all; leases elect the snapshot writer). */
export type FoldMode = 'owner' | 'all';

export interface ClusterConfig {
  nodeId: string;
  natsUrls: string[];
  partitions: number;
  fold: FoldMode;
  publishDeadlineMs: number;
  retentionDays: number | undefined;
  maxStreamBytes: number | undefined;
}

export class ConfigError extends Error {}

function clusterConfig(e: z.infer<typeof EnvSchema>): ClusterConfig | undefined {
  if (e.ANALYTICS_MODE !== 'cluster') return undefined;
  const missing: string[] = [];
  // Every node must accept the same admin key from its first start: there is no admin.key file to share.
  if (e.ANALYTICS_ADMIN_KEY === undefined) missing.push('  ANALYTICS_ADMIN_KEY: required in cluster mode (the same on every node)');
  if (e.ANALYTICS_NATS === undefined) missing.push('  ANALYTICS_NATS: required in cluster mode (nats://host:port of every NATS server, comma separated)');
  if (e.ANALYTICS_NODE_ID === undefined) missing.push('  ANALYTICS_NODE_ID: required in cluster mode (a stable name per node)');
  const urls = (e.ANALYTICS_NATS ?? '').split(',').map((u) => u.trim()).filter((u) => u !== '');
  for (const u of urls) if (!/^(nats|tls):\/\/[^\s/]+$/.test(u)) missing.push(`  ANALYTICS_NATS: "${u}" is not nats://host:port`);
  if (missing.length > 0) throw new ConfigError(`invalid configuration:\n${missing.join('\n')}`);
  return Object.freeze({
    nodeId: e.ANALYTICS_NODE_ID!,
    natsUrls: urls,
    partitions: e.ANALYTICS_PARTITIONS,
    fold: e.ANALYTICS_FOLD,
    publishDeadlineMs: e.ANALYTICS_PUBLISH_DEADLINE_MS,
    retentionDays: e.ANALYTICS_RETENTION_DAYS,
    maxStreamBytes: e.ANALYTICS_MAX_STREAM_BYTES,
  });
}

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
    logRetentionDays: e.ANALYTICS_LOG_RETENTION_DAYS,
    rate: Object.freeze({
      perKey: e.ANALYTICS_RATE_PER_KEY,
      burstPerKey: e.ANALYTICS_BURST_PER_KEY,
      perIp: e.ANALYTICS_RATE_PER_IP,
      burstPerIp: e.ANALYTICS_BURST_PER_IP,
    }),
    quiet: e.ANALYTICS_QUIET,
    heapGrowingPercent: e.ANALYTICS_HEAP_GROWING_PERCENT,
    metricsPort: e.METRICS_PORT,
    mode: e.ANALYTICS_MODE,
    cluster: clusterConfig(e),
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
