import type { Command } from 'commander';
import { dataDirOption, onDataDir, resolveDataDir } from '../data-dir.ts';
import { CliError } from '../errors.ts';
import { progress, type Progress } from '../progress.ts';
import { print } from '../remote.ts';

/** `analytics rebuild` and `analytics check`: work on a data directory, with progress on stderr. */

function phases(quiet: boolean): { onProgress: (done: number, total: number, phase: string) => void; stop(): void } {
  let current: { phase: string; bar: Progress } | undefined;
  return {
    onProgress(done, total, phase) {
      if (current?.phase !== phase) {
        current?.bar.stop();
        current = { phase, bar: progress(phase, total, quiet) };
      }
      current.bar.update(done);
    },
    stop: () => current?.bar.stop(),
  };
}

export function registerRebuild(program: Command): void {
  dataDirOption(
    program
      .command('rebuild')
      .description('(service stopped) re-fold every aggregate from the log into sealed days, month rollups and a fresh snapshot')
      .option('--json', 'print machine-readable JSON'),
  ).action(async (opts: { dataDir?: string; json?: boolean }) => {
    const dir = resolveDataDir(opts);
    const p = phases(false);
    const { rebuild } = await import('../../engine/maintenance.ts');
    const out = await onDataDir(() => rebuild(dir, p.onProgress)).finally(() => p.stop());
    print(opts.json, out, () => `rebuilt ${out.projects} projects from ${out.records} log entries in ${out.ms} ms; ${out.sealedDays} sealed day(s); ${out.columnEvents} events in the column store; snapshot ${out.snapshot}`);
  });
}

export function registerCheck(program: Command): void {
  dataDirOption(
    program
      .command('check')
      .description('verify log continuity, snapshot checksums, sealed days and month rollups, and that they agree with the log; exit 1 on problems')
      .option('--json', 'print machine-readable JSON'),
  ).action(async (opts: { dataDir?: string; json?: boolean }) => {
    const dir = resolveDataDir(opts);
    const p = phases(false);
    const { check } = await import('../../engine/maintenance.ts');
    const out = await onDataDir(() => check(dir, p.onProgress)).finally(() => p.stop());
    print(opts.json, out, () =>
      out.ok
        ? `ok: ${out.logEntries} log entries in sequence, ${out.snapshots} snapshot(s) verified, ${out.sealedDays} sealed day(s) and ${out.sealedMonths} month rollup(s) consistent, ${out.columnSegments} column segment(s) verified`
        : `${out.problems.length} problem(s):\n${out.problems.map((x) => `  - ${x}`).join('\n')}`,
    );
    if (!out.ok) throw new CliError(`check found ${out.problems.length} problem(s) in ${dir}`);
  });
}
