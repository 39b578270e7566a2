import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';

/**
 * A real 3-server NATS JetStream cluster for tests: a fresh temp dir, free loopback ports, stopped by PID.
 * `nats-server` is the Debian package (.ci/run installs it). Servers can be killed and restarted by index to fault
 * the cluster.
 */

/** Servers are up when /healthz says JetStream is enabled and a meta leader exists; ~0.6 s on 2 cores. */
const READY_DEADLINE_MS = 30_000;
/** Lines of a server's log quoted when it does not come up. */
const LOG_TAIL_LINES = 20;

export interface NatsServerInfo {
  name: string;
  client: number;
  http: number;
  route: number;
  storeDir: string;
  proc: ChildProcess | undefined;
}

export interface NatsCluster {
  dir: string;
  servers: NatsServerInfo[];
  /** client URLs of all three servers, comma separated (ANALYTICS_NATS) */
  urls: string;
  urlList: string[];
  kill(i: number, signal?: NodeJS.Signals): Promise<void>;
  start(i: number): Promise<void>;
  /** name of the current leader of `stream` (from /jsz), or undefined */
  streamLeader(stream: string): Promise<string | undefined>;
  /** per-server last_seq of `stream` (from /jsz) */
  streamLastSeqs(stream: string): Promise<Array<number | undefined>>;
  stop(): Promise<void>;
}

/**
 * Ports for the servers come from below the kernel's ephemeral range (32768–60999 by default): a server killed in a
 * test must get its port back on restart, and a port from the ephemeral range can meanwhile be taken by any outgoing
 * connection or any `listen(0)` of a parallel test file (a restart then exits at once with "address already in use").
 */
const PORT_LOW = 20_000;
const PORT_HIGH = 32_000;

async function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

async function freePort(): Promise<number> {
  for (;;) {
    const port = PORT_LOW + Math.floor(Math.random() * (PORT_HIGH - PORT_LOW));
    if (await canBind(port)) return port;
  }
}

async function httpJson(port: number, pathAndQuery: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`http://127.0.0.1:${port}${pathAndQuery}`, { signal: AbortSignal.timeout(2_000) });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* plain text */
  }
  return { status: res.status, body };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Attempts at starting a cluster: a port picked free can be taken by a parallel test file before nats-server binds it. */
const START_ATTEMPTS = 3;

export async function startNatsCluster(): Promise<NatsCluster> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startNatsClusterOnce();
    } catch (err) {
      if (attempt >= START_ATTEMPTS) throw err;
    }
  }
}

async function startNatsClusterOnce(): Promise<NatsCluster> {
  const dir = mkdtempSync(path.join(tmpdir(), 'nats-cluster-'));
  const servers: NatsServerInfo[] = [];
  for (let i = 1; i <= 3; i++) {
    servers.push({ name: `n${i}`, client: await freePort(), http: await freePort(), route: await freePort(), storeDir: path.join(dir, `n${i}`), proc: undefined });
  }
  const routes = servers.map((s) => `    nats-route://127.0.0.1:${s.route}`).join('\n');
  servers.forEach((s) => {
    const conf = [
      `server_name: ${s.name}`,
      `listen: 127.0.0.1:${s.client}`,
      `http: 127.0.0.1:${s.http}`,
      'max_payload: 4MB',
      'jetstream {',
      `  store_dir: "${s.storeDir}"`,
      '  max_memory_store: 256MB',
      '  max_file_store: 4GB',
      '}',
      'cluster {',
      '  name: analytics-test',
      `  listen: 127.0.0.1:${s.route}`,
      '  routes: [',
      routes,
      '  ]',
      '}',
      '',
    ].join('\n');
    writeFileSync(path.join(dir, `${s.name}.conf`), conf);
  });

  const start = async (i: number) => {
    const s = servers[i]!;
    const proc = spawn('nats-server', ['-c', path.join(dir, `${s.name}.conf`), '-l', path.join(dir, `${s.name}.log`)], { stdio: 'ignore' });
    s.proc = proc;
    proc.once('exit', () => {
      if (s.proc === proc) s.proc = undefined;
    });
  };
  const logTail = (s: NatsServerInfo) => {
    try {
      return readFileSync(path.join(dir, `${s.name}.log`), 'utf8').split('\n').slice(-LOG_TAIL_LINES).join('\n');
    } catch {
      return '(no log)';
    }
  };
  const waitReady = async (i: number) => {
    const s = servers[i]!;
    const proc = s.proc; // this start's process: s.proc is cleared when it exits
    const deadline = Date.now() + READY_DEADLINE_MS;
    for (;;) {
      try {
        const h = await httpJson(s.http, '/healthz?js-enabled-only=true');
        const j = await httpJson(s.http, '/jsz');
        const meta = (j.body as { meta_cluster?: { leader?: string } }).meta_cluster;
        if (h.status === 200 && meta?.leader) return;
      } catch {
        /* not up yet */
      }
      if (proc && proc.exitCode !== null) throw new Error(`nats-server ${s.name} exited (${proc.exitCode}); its log ends:\n${logTail(s)}`);
      if (Date.now() > deadline) throw new Error(`nats-server ${s.name} not ready within ${READY_DEADLINE_MS} ms; its log ends:\n${logTail(s)}`);
      await sleep(50);
    }
  };

  for (let i = 0; i < 3; i++) await start(i);
  try {
    await Promise.all(servers.map((_, i) => waitReady(i)));
  } catch (err) {
    for (const sv of servers) if (sv.proc && sv.proc.exitCode === null) sv.proc.kill('SIGKILL');
    throw err;
  }

  const urlList = servers.map((s) => `nats://127.0.0.1:${s.client}`);
  const cluster: NatsCluster = {
    dir,
    servers,
    urls: urlList.join(','),
    urlList,
    async kill(i, signal = 'SIGKILL') {
      const p = servers[i]!.proc;
      if (!p || p.exitCode !== null) return;
      const gone = new Promise<void>((r) => p.once('exit', () => r()));
      p.kill(signal);
      await gone;
    },
    async start(i) {
      await start(i);
      await waitReady(i);
    },
    async streamLeader(stream) {
      for (const s of servers) {
        if (!s.proc) continue;
        try {
          const j = await httpJson(s.http, '/jsz?streams=true');
          const accounts = (j.body as { account_details?: Array<{ stream_detail?: Array<{ name: string; cluster?: { leader?: string } }> }> }).account_details ?? [];
          for (const a of accounts) for (const st of a.stream_detail ?? []) if (st.name === stream && st.cluster?.leader) return st.cluster.leader;
        } catch {
          /* try the next server */
        }
      }
      return undefined;
    },
    async streamLastSeqs(stream) {
      return Promise.all(
        servers.map(async (s) => {
          if (!s.proc) return undefined;
          try {
            const j = await httpJson(s.http, '/jsz?streams=true');
            const accounts = (j.body as { account_details?: Array<{ stream_detail?: Array<{ name: string; state?: { last_seq?: number } }> }> }).account_details ?? [];
            for (const a of accounts) for (const st of a.stream_detail ?? []) if (st.name === stream) return st.state?.last_seq;
          } catch {
            /* down */
          }
          return undefined;
        }),
      );
    },
    async stop() {
      await Promise.all(servers.map(async (_, i) => cluster.kill(i, 'SIGTERM')));
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return cluster;
}

/** Partitions of a test cluster: few projects per test, and every node may fold all of them. */
export const TEST_PARTITIONS = 4;
/** Streams are tiny in tests: each reserves max_bytes of the servers' file store (4 GB here). */
export const TEST_STREAM_BYTES = 16 * 1024 * 1024;

/** The environment of one cluster-mode service node on free ports, for `loadConfig` or a child process. */
export function clusterNodeEnv(opts: {
  id: string;
  urls: string;
  dataDir: string;
  adminKey: string;
  fold?: 'owner' | 'all';
  streamBytes?: number;
}): Record<string, string> {
  return {
    PORT: '0',
    GRPC_PORT: '0',
    HOST: '127.0.0.1',
    ANALYTICS_DATA_DIR: opts.dataDir,
    ANALYTICS_ADMIN_KEY: opts.adminKey,
    ANALYTICS_MODE: 'cluster',
    ANALYTICS_NODE_ID: opts.id,
    ANALYTICS_NATS: opts.urls,
    ANALYTICS_PARTITIONS: String(TEST_PARTITIONS),
    ANALYTICS_MAX_STREAM_BYTES: String(opts.streamBytes ?? TEST_STREAM_BYTES),
    ...(opts.fold ? { ANALYTICS_FOLD: opts.fold } : {}),
  };
}

/** Polls `fn` every 50 ms until it gives a value; fails naming `what` after `ms`. */
export async function waitForValue<T>(what: string, fn: () => Promise<T | undefined> | T | undefined, ms: number): Promise<T> {
  const started = Date.now();
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() - started > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A metrics answer without what names the project (two services give the same events different project ids). */
export function comparable(body: Record<string, unknown>): unknown {
  const { projectId: _p, ...rest } = body;
  return rest;
}
