import { ConfigError, loadConfig } from './config.ts';
import { startService } from './service.ts';

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
  const service = await startService(config);
  if (!config.quiet) {
    console.log(`analytics ${service.engine.health().version}: HTTP ${service.url}  gRPC ${service.grpcAddress}  data ${config.dataDir}`);
  }
  let signals = 0;
  const shutdown = (signal: string) => {
    if (++signals > 1) process.exit(1); // a second signal means "now"
    if (!config.quiet) console.log(`${signal}: draining, writing a snapshot, closing storage...`);
    service.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error('shutdown failed:', err);
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

main().catch((err: unknown) => {
  console.error('failed to start:', err);
  process.exit(1);
});
