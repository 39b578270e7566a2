import { ConfigError, loadConfig } from './config.ts';
import { DataDirHeld } from './store/files/data-dir-lock.ts';
import { StoreRefused, startWalkEarly } from './store/lmdb/lmdb-probe.ts';

/** How often a service started by npm checks that its parent is still there: a stop is noticed within this long. */
const PARENT_CHECK_MS = 250;
/** A signal this soon after the first is the same stop relayed twice (Ctrl-C reaches npm and node, npm relays it). */
const SAME_STOP_MS = 1_000;

/** `npm start`: serve HTTP and gRPC on the embedded LMDB store until SIGTERM/SIGINT. */
async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(2);
    }
    throw err;
  }
  // The storage check's child process starts first and runs on the other core while the service's modules load
  // (~0.5 s): the two were the longest steps of a restart, one after the other.
  if (config.mode === 'lmdb') startWalkEarly(config.dataDir);
  const { startService, tuneHeap } = await import('./service.ts');
  const service = await startService(config);
  tuneHeap(config);
  if (!config.quiet) {
    const metricsUrl = new URL('/metrics', service.url);
    metricsUrl.port = String(service.metricsPort);
    const metrics = service.metricsPort === undefined ? '' : `  operator metrics ${metricsUrl.href}`;
    console.log(`analytics ${service.engine.health().version}: HTTP ${service.url}  gRPC ${service.grpcAddress}  data ${config.dataDir}${metrics}`);
  }
  let firstSignalAt: number | undefined;
  const shutdown = (signal: string) => {
    if (firstSignalAt !== undefined) {
      if (performance.now() - firstSignalAt >= SAME_STOP_MS) process.exit(1); // a second signal means "now"
      return;
    }
    firstSignalAt = performance.now();
    if (!config.quiet) console.log(`${signal}: draining, writing a snapshot, closing storage...`);
    service.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error(`shutdown failed: ${err instanceof Error ? err.message : String(err)}`);
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  if (config.stopWithParent) {
    // npm relays SIGTERM to the shell it spawned, not to us; the shell dies and we are re-parented. Treat that as
    // the stop it is. (`npm start` execs node, so there npm is the parent and relays the signal itself.)
    const parent = process.ppid;
    const watch = setInterval(() => {
      if (process.ppid === parent) return;
      clearInterval(watch);
      shutdown('parent process exited');
    }, PARENT_CHECK_MS);
    watch.unref();
  }
}

main().catch((err: unknown) => {
  // A refusal says what is wrong, where, and the way out: the message is the whole answer, a stack would bury it.
  if (err instanceof StoreRefused || err instanceof DataDirHeld) {
    console.error(`failed to start: ${err.message}`);
    process.exit(1);
  }
  console.error('failed to start:', err);
  process.exit(1);
});
