import type { Command } from 'commander';
import { loadCliEnv } from '../config.ts';
import { CliError } from './errors.ts';

/** --data-dir (default $ANALYTICS_DATA_DIR) for commands that read the data directory. */
export function dataDirOption(cmd: Command): Command {
  return cmd.option('--data-dir <dir>', 'the service\'s data directory (default: $ANALYTICS_DATA_DIR)');
}

export function resolveDataDir(opts: { dataDir?: string }): string {
  const dir = opts.dataDir ?? loadCliEnv().dataDir;
  if (!dir) throw new CliError('no data directory: pass --data-dir or set ANALYTICS_DATA_DIR');
  return dir;
}

/** Runs maintenance work, turning its errors (no such directory, locked files) into CliError (exit 1). */
export async function onDataDir<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (err instanceof CliError) throw err;
    throw new CliError(err instanceof Error ? err.message : String(err));
  }
}
