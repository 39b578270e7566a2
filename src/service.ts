import { readFileSync } from 'node:fs';
import type { Config } from './config.ts';
import { Engine } from './engine/engine.ts';
import { startGrpcServer } from './grpc/server.ts';
import { HttpFace } from './http/server.ts';
import { OperatorMetrics } from './engine/operator-metrics.ts';
import { startMetricsServer } from './http/metrics-server.ts';

/**
 * Wiring: one engine, two faces. `startService` is what `npm start` runs and what tests and benches start on
 * port 0 against a temporary data directory.
 */

/** In-flight gRPC calls get this long to finish at shutdown before they are cancelled. */
const GRPC_DRAIN_MS = 5_000;

export const VERSION: string = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

export interface RunningService {
  engine: Engine;
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
}

export async function startService(config: Readonly<Config>, opts: ServiceOptions = {}): Promise<RunningService> {
  const log = opts.log ?? (config.quiet ? () => {} : (line: string) => console.log(line));
  const ops = config.metricsPort === undefined ? undefined : new OperatorMetrics();
  const engineOpts = opts.now ? { config, version: VERSION, log, now: opts.now, ops } : { config, version: VERSION, log, ops };
  const engine = await Engine.open(engineOpts);
  const http = new HttpFace(engine, { host: config.host, port: config.port, trustProxy: config.trustProxy, ops });
  const httpPort = await http.listen();
  const grpc = await startGrpcServer(engine, { host: config.host, port: config.grpcPort, quiet: config.quiet, ops });
  const metrics = ops && config.metricsPort !== undefined ? await startMetricsServer(ops, config.host, config.metricsPort) : undefined;
  const hostForUrl = config.host.includes(':') ? `[${config.host}]` : config.host;
  let stopping: Promise<void> | undefined;
  return {
    engine,
    httpPort,
    grpcPort: grpc.port,
    url: `http://${hostForUrl}:${httpPort}`,
    grpcAddress: `${hostForUrl}:${grpc.port}`,
    metricsPort: metrics?.port,
    stop() {
      stopping ??= (async () => {
        engine.beginShutdown();
        await Promise.all([http.close(), grpc.close(GRPC_DRAIN_MS), metrics?.close()]);
        await engine.close();
      })();
      return stopping;
    },
  };
}
