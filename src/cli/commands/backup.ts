import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { dataDirOption, resolveDataDir } from '../data-dir.ts';
import { EXIT_FAILED } from '../exit-codes.ts';

/** The admin key the service generated on its first start: a restore without it locks the operator out. */
const ADMIN_KEY_FILE = 'admin.key';
/** The admin key is a secret: only its owner reads it, as the service writes it. */
const ADMIN_KEY_MODE = 0o600;
/** Only finished snapshots are copied; a `.tmp` is a write in progress. */
const SNAPSHOT_FILE = /^snapshot-\d{16}\.bin$/;

/**
 * `analytics backup DEST`: a consistent copy of the data directory while the service runs. The snapshots are copied
 * first, then LMDB's own copy with compaction runs in a read transaction of this process (LMDB lets several
 * processes open one environment; writers are not blocked), so every snapshot in DEST covers at most what DEST's log
 * holds. Done from a second process rather than through the service: it needs no key, no port, and works the same
 * when the service is stopped. `admin.key` is copied too (mode 0600). Restore: stop the service, copy
 * DEST/analytics.lmdb, DEST/snapshots/ and DEST/admin.key into the data directory, start it.
 */
export function registerBackup(program: Command): void {
  dataDirOption(
    program
      .command('backup')
      .description('copy the data directory consistently (online: the service may keep running) into DEST: the log, the snapshots and admin.key (mode 0600)')
      .argument('<dest>', 'an empty or new directory')
      .option('--json', 'machine-readable output'),
  ).action(async (dest: string, opts: { dataDir?: string; json?: boolean }) => {
    const dataDir = resolveDataDir(opts);
    const source = path.join(dataDir, 'analytics.lmdb');
    if (!existsSync(source)) {
      console.error(`no data directory at ${dataDir} (no analytics.lmdb)`);
      process.exit(EXIT_FAILED);
    }
    const target = path.join(dest, 'analytics.lmdb');
    if (existsSync(target)) {
      console.error(`${target} exists: back up into a new directory`);
      process.exit(EXIT_FAILED);
    }
    mkdirSync(path.join(dest, 'snapshots'), { recursive: true });
    const snapDir = path.join(dataDir, 'snapshots');
    const snapshots = existsSync(snapDir) ? readdirSync(snapDir).filter((f) => SNAPSHOT_FILE.test(f)) : [];
    for (const f of snapshots) copyFileSync(path.join(snapDir, f), path.join(dest, 'snapshots', f));
    // The store loads here, not at the top: every other command starts without it.
    const { LogStore } = await import('../../store/lmdb/log-store.ts');
    const store = LogStore.open(dataDir, 'flush', { readOnly: true });
    const lastSeq = store.lastSeq();
    try {
      await store.backup(target);
    } finally {
      await store.close();
    }
    const keyFile = path.join(dataDir, ADMIN_KEY_FILE);
    const adminKey = existsSync(keyFile);
    if (adminKey) {
      copyFileSync(keyFile, path.join(dest, ADMIN_KEY_FILE));
      chmodSync(path.join(dest, ADMIN_KEY_FILE), ADMIN_KEY_MODE);
    }
    const out = { dest, lastSeq, snapshots: snapshots.length, adminKey };
    const key = adminKey ? ` and ${ADMIN_KEY_FILE} (mode 0600)` : ` (no ${ADMIN_KEY_FILE} in ${dataDir}: the admin key comes from ANALYTICS_ADMIN_KEY)`;
    console.log(opts.json ? JSON.stringify(out) : `backed up the log through sequence ${lastSeq}, ${snapshots.length} snapshot(s)${key} to ${dest}`);
  });
}
