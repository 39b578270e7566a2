import { readFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import type { Config } from './config.ts';
import { Engine } from './engine/engine.ts';
import { startGrpcServer, type RunningGrpc } from './grpc/server.ts';
import { isDashboardPath, serveDashboard } from './dashboard/serve.ts';
import { LmdbBackend } from './engine/lmdb-backend.ts';
import { HttpFace } from './http/server.ts';
import type { McpRequest } from './mcp/http-endpoint.ts';
import type { OperatorMetrics } from './engine/operator-metrics.ts';
import { startMetricsServer } from './http/metrics-server.ts';
import type { StoreFaults } from './store/lmdb/log-store.ts';
import type { ErasureHooks } from './cluster/cluster-erasure.ts';

/**
 * Wiring: one engine, two faces. `startService` is what `npm start` runs and what tests and benches start on
 * port 0 against a temporary data directory.
 */

/**
 * SIGTERM to exit, whatever clients do: idle and silent connections close at once, in-flight requests get
 * FACE_DRAIN_MS to finish (then 503 / UNAVAILABLE), and the rest is the final snapshot and closing LMDB.
 */
export const DRAIN_DEADLINE_MS = 10_000;
/** In-flight HTTP requests and gRPC calls get this long to finish at shutdown; half the deadline leaves the rest for the snapshot. */
const FACE_DRAIN_MS = 5_000;

export const VERSION: string = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

export interface RunningService {
  engine: Engine;
  http: HttpFace;
  grpc: RunningGrpc;
  httpPort: number;
  grpcPort: number;
  url: string;
  grpcAddress: string;
  /** the operator metrics listener's port, when METRICS_PORT is set */
  metricsPort: number | undefined;
  /** graceful: stop accepting, finish in-flight requests, snapshot, close LMDB */
  stop(): Promise<void>;
}

export interface ServiceOptions {
  now?: () => number;
  log?: (line: string) => void;
  /**
   * cluster mode, tests: a suffix for every NATS resource name, so each test has its own stream and buckets; a
   * function that makes the node die as kill -9 would (ClusterBackendOptions.crashable); what the erasure asks at its
   * turns (ErasureHooks)
   */
  cluster?: { tag?: string; crashable?: (crash: () => Promise<void>) => void; erasureHooks?: ErasureHooks };
  /** tests of failing disks: a switch the single node's LMDB log asks before each write (StoreFaults) */
  storeFaults?: StoreFaults;
  /** connection caps and handshake deadline of both ports (tests use small ones); absent = the faces' defaults */
  connections?: { handshakeMs?: number; maxConnections?: number; maxConnectionsPerIp?: number };
}

/**
 * The MCP face and the NATS client load when first needed: together they are about a third of the modules a start
 * reads, and most nodes serve neither an agent nor a cluster.
 */
let mcpFace: Promise<typeof import('./mcp/http-endpoint.ts')> | undefined;
function serveMcpLazily(r: McpRequest): Promise<void> {
  mcpFace ??= import('./mcp/http-endpoint.ts');
  return mcpFace.then((m) => m.serveMcp(r));
}

/**
 * A service process's V8 heap growing factor (`ANALYTICS_HEAP_GROWING_PERCENT`), set once it has started: V8 reads it
 * at each collection, and a start's state build runs faster at V8's own pick. Set in the process, not on node's
 * command line, so every launcher has it (npm start, `analytics serve`, the container, a unit). At V8's pick a
 * 3M-event import held +132 MiB more anonymous memory, half of it garbage and array buffers waiting for a full
 * collection; at 25 %, +61 MiB (docs/history.md). Not called by startService: a process embedding it keeps its own.
 */
export function tuneHeap(config: Readonly<Config>): void {
  setFlagsFromString(`--heap-growing-percent=${config.heapGrowingPercent}`);
}

export async function startService(config: Readonly<Config>, opts: ServiceOptions = {}): Promise<RunningService> {
  const log = opts.log ?? (config.quiet ? () => {} : (line: string) => console.log(line));
  // Loaded only with METRICS_PORT: prom-client and its collectors are ~90 ms of every start otherwise.
  const ops = config.metricsPort === undefined ? undefined : new (await import('./engine/operator-metrics.ts')).OperatorMetrics();
  const engineOpts = {
    config,
    version: VERSION,
    log,
    ops,
    ...(opts.now ? { now: opts.now } : {}),
    // The one place the mode is chosen: a single node on LMDB, or a node of a NATS JetStream cluster.
    openBackend: ({ now, log: say, ops: o }: { now: () => number; log: (line: string) => void; ops: OperatorMetrics | undefined }) =>
      config.cluster !== undefined
        ? import('./cluster/cluster-backend.ts').then(({ ClusterBackend }) =>
            ClusterBackend.open(config, config.cluster!, { now, log: say, version: VERSION, tag: opts.cluster?.tag, crashable: opts.cluster?.crashable, erasureHooks: opts.cluster?.erasureHooks }),
          )
        : LmdbBackend.open(config, now, say, o, opts.storeFaults),
  };
  const engine = await Engine.open(engineOpts);
  const c = opts.connections ?? {};
  const http = new HttpFace(engine, {
    host: config.host,
    port: config.port,
    trustProxy: config.trustProxy,
    ops,
    // the other faces on the HTTP port: the service composes them, so no face imports another
    mcp: serveMcpLazily,
    pages: { owns: isDashboardPath, serve: serveDashboard },
    ...(c.handshakeMs !== undefined ? { headersTimeoutMs: c.handshakeMs } : {}),
    ...(c.maxConnections !== undefined ? { maxConnections: c.maxConnections } : {}),
    ...(c.maxConnectionsPerIp !== undefined ? { maxConnectionsPerIp: c.maxConnectionsPerIp } : {}),
  });
  const httpPort = await http.listen();
  const grpc = await startGrpcServer(engine, { host: config.host, port: config.grpcPort, quiet: config.quiet, ops, ...c });
  const metrics = ops && config.metricsPort !== undefined ? await startMetricsServer(ops, config.host, config.metricsPort) : undefined;
  const hostForUrl = config.host.includes(':') ? `[${config.host}]` : config.host;
  let stopping: Promise<void> | undefined;
  return {
    engine,
    http,
    grpc,
    httpPort,
    grpcPort: grpc.port,
    url: `http://${hostForUrl}:${httpPort}`,
    grpcAddress: `${hostForUrl}:${grpc.port}`,
    metricsPort: metrics?.port,
    stop() {
      stopping ??= (async () => {
        engine.beginShutdown();
        const work = (async () => {
          await Promise.all([http.close(FACE_DRAIN_MS), grpc.close(FACE_DRAIN_MS), metrics?.close()]);
          await engine.close();
        })();
        // The deadline holds whatever happens: past it the process may exit without the snapshot (the log is the
        // truth, and LMDB is crash-safe), never hang.
        let timer: NodeJS.Timeout | undefined;
        const deadline = new Promise<void>((resolve) => {
          timer = setTimeout(() => {
            log(`shutdown: drain deadline of ${DRAIN_DEADLINE_MS} ms passed; stopping without waiting further`);
            resolve();
          }, DRAIN_DEADLINE_MS);
          timer.unref();
        });
        await Promise.race([work, deadline]);
        clearTimeout(timer);
      })();
      return stopping;
    },
  };
}
