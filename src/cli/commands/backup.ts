import { copyFileSync, existsSync, mkdirSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { Option, type Command } from 'commander';
import { LogStore } from '../../store/log-store.ts';
import { EXIT_FAILED } from '../exit-codes.ts';

/** Only finished snapshots are copied; a `.tmp` is a write in progress. */
const SNAPSHOT_FILE = /^snapshot-\d{16}\.bin$/;

/**
 * `analytics backup DEST`: a consistent copy of the data directory while the service runs. The snapshots are copied
 * first, then LMDB's own copy with compaction runs in a read transaction of this process (LMDB lets several
 * processes open one environment; writers are not blocked), so every snapshot in DEST covers at most what DEST's log
 * holds. Done from a second process rather than through the service: it needs no key, no port, and works the same
 * when the service is stopped. Restore: stop the service, copy DEST/analytics.lmdb and DEST/snapshots/ into the data
 * directory, start it.
 */
export function registerBackup(program: Command): void {
  program
    .command('backup')
    .description('copy the data directory consistently (online: the service may keep running) into DEST')
    .argument('<dest>', 'an empty or new directory')
    .addOption(new Option('--data-dir <dir>', 'the data directory').env('ANALYTICS_DATA_DIR').default('./storage'))
    .option('--json', 'machine-readable output')
    .action(async (dest: string, opts: { dataDir: string; json?: boolean }) => {
      const source = path.join(opts.dataDir, 'analytics.lmdb');
      if (!existsSync(source)) {
        console.error(`no data directory at ${opts.dataDir} (no analytics.lmdb)`);
        process.exit(EXIT_FAILED);
      }
      const target = path.join(dest, 'analytics.lmdb');
      if (existsSync(target)) {
        console.error(`${target} exists: back up into a new directory`);
        process.exit(EXIT_FAILED);
      }
      mkdirSync(path.join(dest, 'snapshots'), { recursive: true });
      const snapDir = path.join(opts.dataDir, 'snapshots');
      const snapshots = existsSync(snapDir) ? readdirSync(snapDir).filter((f) => SNAPSHOT_FILE.test(f)) : [];
      for (const f of snapshots) copyFileSync(path.join(snapDir, f), path.join(dest, 'snapshots', f));
      const store = LogStore.open(opts.dataDir, 'flush', { readOnly: true });
      const lastSeq = store.lastSeq();
      try {
        await store.backup(target);
      } finally {
        await store.close();
      }
      const out = { dest, lastSeq, snapshots: snapshots.length };
      console.log(opts.json ? JSON.stringify(out) : `backed up the log through sequence ${lastSeq} and ${snapshots.length} snapshot(s) to ${dest}`);
    });
}
