import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, openSync, closeSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Damage to LMDB's own pages (a flipped meta page, a file cut short, a garbled page) is not caught by LMDB: the native
 * code crashes the process (SIGSEGV, SIGBUS) or aborts on an assertion at the next write, with no word. So before the
 * service, `rebuild` or `repair` open the environment, a short-lived child process opens it read-only and walks every
 * table (lmdb-walk.mjs): a signal there becomes a message here. `check` runs the same walk.
 */

/** The walk reads every page of a 1 GB file in ~1 s cold; past this something is wrong with the disk itself. */
const WALK_TIMEOUT_MS = 10 * 60_000;
const WALK = fileURLToPath(new URL('./lmdb-walk.mjs', import.meta.url));
const SIGNALS: Record<string, string> = {
  SIGSEGV: 'LMDB crashed reading it (SIGSEGV): its page structure is damaged',
  SIGBUS: 'LMDB crashed reading it (SIGBUS): its pages reach past the end of the file',
  SIGABRT: 'LMDB aborted reading it (SIGABRT): a page failed its own consistency check',
};

export interface WalkResult {
  ok: boolean;
  /** what is wrong, when not ok */
  problem?: string;
  /** records read one by one, and tables only sampled (too big for the budget) */
  records?: number;
  sampled?: number;
  bytes?: number;
  ms: number;
}

/**
 * Records the walk reads one by one (~4 µs each on 2 shared cores, so ~2 s at most added to a start); tables past
 * it are sampled. Past its first 20,000 records or 4 MiB the walk also stops at a time (lmdb-walk.mjs WALK_TIME_MS).
 * Measured in bench/lmdb-walk.ts (docs/reliability.md).
 */
export const WALK_BUDGET_RECORDS = 500_000;

/** Walks `file` in a child process: every record of the smaller tables up to `budget`, a sample of the rest. */
export function walkEnvironment(file: string, opts: WalkOptions = {}): WalkResult {
  const started = performance.now();
  const r = spawnSync(process.execPath, walkArgs(file, opts), { encoding: 'utf8', timeout: WALK_TIMEOUT_MS, stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 1 << 20 });
  return walkOutcome({ error: r.error, signal: r.signal, status: r.status, stdout: r.stdout, stderr: r.stderr }, Math.round(performance.now() - started));
}

/**
 * The same walk without blocking: the service reads its snapshot file meanwhile (the walk runs on another core), and
 * opens LMDB only once the walk has said the file is sound.
 */
export function walkEnvironmentAsync(file: string, opts: WalkOptions = {}): Promise<WalkResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, walkArgs(file, opts), { stdio: ['ignore', 'pipe', 'pipe'], timeout: WALK_TIMEOUT_MS });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout = (stdout + c).slice(-(1 << 20))));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr = (stderr + c).slice(-(1 << 20))));
    let error: Error | undefined;
    child.once('error', (err) => (error = err));
    child.once('close', (status, signal) => resolve(walkOutcome({ error, signal, status, stdout, stderr }, Math.round(performance.now() - started))));
  });
}

/** `budget`: records walked one by one at most; `timeMs`: the walk's time once its floor is read (lmdb-walk.mjs). */
export interface WalkOptions {
  budget?: number;
  timeMs?: number;
}

function walkArgs(file: string, opts: WalkOptions): string[] {
  return [WALK, file, String(opts.budget ?? WALK_BUDGET_RECORDS), ...(opts.timeMs === undefined ? [] : [String(opts.timeMs)])];
}

/** What the walk's exit says: a signal or an error is damage (or a walk that could not run), else its JSON line. */
function walkOutcome(r: { error: Error | undefined; signal: NodeJS.Signals | null; status: number | null; stdout: string | null; stderr: string | null }, ms: number): WalkResult {
  if (r.error) return { ok: false, problem: `the check could not run: ${r.error.message}`, ms };
  if (r.signal) {
    const said = lastLine(r.stderr);
    return { ok: false, problem: `${SIGNALS[r.signal] ?? `LMDB crashed reading it (${r.signal})`}${said ? ` (${said})` : ''}`, ms };
  }
  try {
    const out = JSON.parse(lastLine(r.stdout)) as WalkResult;
    return { ...out, ms };
  } catch {
    return { ok: false, problem: `the check ended with code ${r.status}: ${lastLine(r.stderr) || 'no output'}`, ms };
  }
}

function lastLine(s: string | null): string {
  return (s ?? '').trim().split('\n').at(-1)?.trim() ?? '';
}

/** The service (or a tool) refuses to use a data directory; the message says what is wrong, where, and the way out. */
export class StoreRefused extends Error {
  readonly code = 'store_refused';
}

/** How to get out of damage LMDB cannot read past (docs/reliability.md). */
export function waysOut(dataDir: string): string {
  return (
    'Two ways out: 1. restore the newest backup (`analytics backup DEST` made it): stop, copy DEST/analytics.lmdb and ' +
    `DEST/snapshots/ into ${dataDir}, start again; loses only what came after the backup. 2. \`npx analytics repair --yes ` +
    `--data-dir ${dataDir}\` for damage inside log entries (it keeps the damaged files aside); damage to LMDB's own pages, ` +
    'as here, only a backup undoes.'
  );
}

/** Throws StoreRefused when the environment's pages are damaged; does nothing for a directory without one yet. */
export function assertEnvironmentSound(dataDir: string): WalkResult | undefined {
  const file = path.join(dataDir, 'analytics.lmdb');
  if (!existsSync(file)) return undefined;
  return refuseDamage(dataDir, file, walkEnvironment(file));
}

/** Walks begun before the service's modules were loaded (startWalkEarly), by file; the service's open takes them. */
const begunEarly = new Map<string, Promise<WalkResult>>();

/**
 * Starts the walk of a data directory's environment now, for assertEnvironmentSoundAsync to take later: `npm start`
 * calls it before loading the service's modules (~0.5 s of a start), so the walk's child process runs meanwhile on
 * the other core instead of after them. The walk only reads (a read transaction), so it is safe even when another
 * process holds the directory (the service then refuses to start all the same).
 */
export function startWalkEarly(dataDir: string): void {
  const file = path.join(dataDir, 'analytics.lmdb');
  if (!begunEarly.has(file) && existsSync(file)) begunEarly.set(file, walkEnvironmentAsync(file));
}

/** assertEnvironmentSound without blocking (see walkEnvironmentAsync); takes a walk startWalkEarly began. */
export async function assertEnvironmentSoundAsync(dataDir: string): Promise<WalkResult | undefined> {
  const file = path.join(dataDir, 'analytics.lmdb');
  const begun = begunEarly.get(file);
  begunEarly.delete(file);
  if (begun) return refuseDamage(dataDir, file, await begun);
  if (!existsSync(file)) return undefined;
  return refuseDamage(dataDir, file, await walkEnvironmentAsync(file));
}

function refuseDamage(dataDir: string, file: string, r: WalkResult): WalkResult {
  if (!r.ok) throw new StoreRefused(`${file} is damaged: ${r.problem}. Refusing to open it (a damaged LMDB file crashes the process that opens it, or is damaged further by the next write). ${waysOut(dataDir)}`);
  return r;
}

/**
 * Throws StoreRefused, naming the path and the cause in one line, when the data directory cannot be written: the
 * service writes its log and snapshots there (a read-only mount, a directory without write permission, a file where
 * the directory should be).
 */
export function assertWritable(dataDir: string): void {
  const refuse = (where: string, err: unknown): never => {
    const code = (err as { code?: string }).code ?? 'error';
    const why = code === 'EROFS' ? 'read-only file system' : code === 'EACCES' || code === 'EPERM' ? 'permission denied' : code === 'ENOTDIR' || code === 'EEXIST' ? 'not a directory' : code === 'ENOSPC' ? 'no space left on the device' : (err as Error).message;
    throw new StoreRefused(`cannot write to the data directory: ${where}: ${why} (${code}). The service writes its log and snapshots there: give it a writable directory (ANALYTICS_DATA_DIR).`);
  };
  if (existsSync(dataDir) && !statSync(dataDir).isDirectory()) refuse(dataDir, { code: 'ENOTDIR' });
  try {
    mkdirSync(dataDir, { recursive: true });
  } catch (err) {
    refuse(dataDir, err);
  }
  const probe = path.join(dataDir, `.write-check-${process.pid}`);
  try {
    writeFileSync(probe, '');
    unlinkSync(probe);
  } catch (err) {
    refuse(dataDir, err);
  }
  for (const name of ['analytics.lmdb', 'analytics.lmdb-lock', 'snapshots']) {
    const f = path.join(dataDir, name);
    if (!existsSync(f)) continue;
    try {
      if (statSync(f).isDirectory()) {
        writeFileSync(path.join(f, `.write-check-${process.pid}`), '');
        unlinkSync(path.join(f, `.write-check-${process.pid}`));
      } else closeSync(openSync(f, 'r+'));
    } catch (err) {
      refuse(f, err);
    }
  }
}
