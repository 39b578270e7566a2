import { copyFileSync, existsSync, mkdirSync, readdirSync } from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import type { LogDamage } from '../../store/lmdb/log-store.ts';
import { dataDirOption, onDataDir, resolveDataDir } from '../data-dir.ts';
import { print } from '../remote.ts';

/** Only finished snapshots are kept aside with the damaged log; a `.tmp` is a write that never finished. */
const SNAPSHOT_FILE = /^snapshot-\d{16}\.bin$/;

export interface RepairResult {
  /** false: the log verified, nothing was changed */
  repaired: boolean;
  damage?: string;
  /** where the damaged analytics.lmdb and snapshots were copied before anything changed */
  keptAside?: string;
  /** the sequences removed from the log (first bad one to the old end) */
  removedFrom?: number;
  removedTo?: number;
  /** how many of the removed sequences the newest valid snapshot had counted (dropped too: the log is the truth) */
  snapshotCovered?: number;
  snapshotLastSeq?: number;
  forgottenEventIds?: number;
  lastSeq: number;
}

/**
 * `analytics repair --yes` (service stopped): the second way out of a damaged log, when no backup is at hand. It
 * copies the damaged analytics.lmdb and snapshots aside, cuts the log at the first entry that fails verification
 * (that entry and everything after it cannot be trusted), and re-folds sealed days, month rollups and a fresh
 * snapshot from what stays (`rebuild`). A snapshot that counted records past the cut is not used: the log is the
 * truth, and starting from it would count records no log holds (and a resend of them twice). What was lost is printed.
 */
export async function repair(dataDir: string, now = new Date()): Promise<RepairResult> {
  const file = path.join(dataDir, 'analytics.lmdb');
  if (!existsSync(file)) throw new Error(`${dataDir} holds no analytics data (no analytics.lmdb)`);
  // The store and the fold load here, not at the top: every other command starts without them.
  const [{ rebuild }, { assertEnvironmentSound, assertWritable }, { LogDamage, LogStore }, { SnapshotFiles }] = await Promise.all([
    import('../../engine/maintenance.ts'),
    import('../../store/lmdb/lmdb-probe.ts'),
    import('../../store/lmdb/log-store.ts'),
    import('../../store/files/snapshot-files.ts'),
  ]);
  assertWritable(dataDir);
  assertEnvironmentSound(dataDir);
  let store = LogStore.open(dataDir, 'flush');
  let damage: LogDamage | undefined;
  try {
    for (const _ of store.readAfter(0)) void _;
  } catch (err) {
    if (!(err instanceof LogDamage)) throw err;
    damage = err;
  }
  if (!damage) {
    const lastSeq = store.lastSeq();
    await store.close();
    return { repaired: false, lastSeq };
  }
  await store.close();
  // 1. a copy of everything as it was, before anything changes
  const aside = path.join(dataDir, `damaged-${now.toISOString().replace(/[:.]/g, '-')}`);
  mkdirSync(path.join(aside, 'snapshots'), { recursive: true });
  copyFileSync(file, path.join(aside, 'analytics.lmdb'));
  const snapDir = path.join(dataDir, 'snapshots');
  for (const f of existsSync(snapDir) ? readdirSync(snapDir).filter((x) => SNAPSHOT_FILE.test(x)) : []) copyFileSync(path.join(snapDir, f), path.join(aside, 'snapshots', f));
  // the newest snapshot that passes its checksum, wherever it ends
  const files = new SnapshotFiles(dataDir);
  const snapshotLastSeq = files.inspect().filter((s) => s.data).map((s) => s.seq).reduce((a, b) => Math.max(a, b), 0);
  await files.close();
  // 2. cut the log at the first bad entry
  store = LogStore.open(dataDir, 'flush');
  let cut: { from: number; to: number; forgottenIds: number };
  try {
    cut = await store.cutFrom(damage.seq);
  } finally {
    await store.close();
  }
  // 3. everything derived from the log, from what stays
  const rebuilt = await rebuild(dataDir);
  const snapshotCovered = Math.max(0, Math.min(snapshotLastSeq, cut.to) - cut.from + 1);
  return {
    repaired: true,
    damage: damage.message,
    keptAside: aside,
    removedFrom: cut.from,
    removedTo: cut.to,
    snapshotCovered,
    snapshotLastSeq,
    forgottenEventIds: cut.forgottenIds,
    lastSeq: rebuilt.records,
  };
}

export function registerRepair(program: Command): void {
  const cmd = dataDirOption(
    program
      .command('repair')
      .description('(service stopped) cut a damaged log at its first bad entry, keeping a copy aside; loses that entry and everything after it')
      .option('--yes', 'confirm: records from the first bad sequence on are removed from the log')
      .option('--json', 'print machine-readable JSON'),
  );
  cmd.action(async (opts: { dataDir?: string; json?: boolean; yes?: boolean }) => {
    if (!opts.yes) {
      cmd.error('repair removes every record from the first bad sequence on: pass --yes to confirm (or restore a backup instead)', { exitCode: 2, code: 'analytics.repair.unconfirmed' });
    }
    const dir = resolveDataDir(opts);
    const out = await onDataDir(() => repair(dir));
    print(opts.json, out, () => {
      if (!out.repaired) return `ok: the log verified through sequence ${out.lastSeq}; nothing to repair`;
      const removed = out.removedTo! - out.removedFrom! + 1;
      return [
        `${out.damage}`,
        `kept a copy of the damaged analytics.lmdb and snapshots in ${out.keptAside}`,
        `removed sequences ${out.removedFrom}..${out.removedTo} (${removed} record(s)): lost`,
        out.snapshotCovered! > 0
          ? `the newest valid snapshot (through sequence ${out.snapshotLastSeq}) had counted ${out.snapshotCovered} of them; not used, the log is the truth (restore a backup to get them back)`
          : `the newest valid snapshot (through sequence ${out.snapshotLastSeq}) covered none of them`,
        `forgot ${out.forgottenEventIds} eventId(s) of removed records (a resend counts again)`,
        `the log now ends at sequence ${out.lastSeq}; aggregates and the snapshot were rebuilt from it: start the service`,
      ].join('\n');
    });
  });
}
