import type { Command } from 'commander';
import { loadCliEnv } from '../config.ts';
import { CliError } from './errors.ts';

/** Where the service keeps its data when ANALYTICS_DATA_DIR is unset (config.ts): every data-dir command looks there too. */
export const DEFAULT_DATA_DIR = './storage';

/** --data-dir for commands that work on the data directory; one rule for all of them (resolveDataDir). */
export function dataDirOption(cmd: Command): Command {
  return cmd.option('--data-dir <dir>', `the service's data directory (default: $ANALYTICS_DATA_DIR, else ${DEFAULT_DATA_DIR})`);
}

/** --data-dir, else ANALYTICS_DATA_DIR, else ./storage: the directory the service started in the same place uses. */
export function resolveDataDir(opts: { dataDir?: string }): string {
  return opts.dataDir ?? loadCliEnv().dataDir ?? DEFAULT_DATA_DIR;
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
