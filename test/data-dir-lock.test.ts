import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { askHolder, DataDirHeld, holdDataDir, HOLDER_FILE, releaseDataDir } from '../src/store/files/data-dir-lock.ts';
import { api, createProject } from './helpers.ts';
import { startServiceProcess } from './service-process.ts';
import { nodeArgsFor } from '../bin/dist.mjs';

/**
 * One process per data directory, with real processes: a second service, `rebuild` and `repair` on a directory a
 * live service holds are refused at once, naming the directory and the holder, and the service keeps serving;
 * `check` and `backup` work beside it; after a `kill -9` the next start takes the directory without any clean-up.
 */

const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const BIN = path.join(ROOT, 'bin', 'analytics.js');
const ADMIN = 'ak_lockTestAdminKey0123456789abcd';
/** A refusal comes before anything is opened or bound; tsx compiling the CLI first takes most of this on a loaded machine. */
const REFUSAL_TIMEOUT_MS = 60_000;

function run(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, args, { cwd: ROOT, env: { ...process.env, ...env }, timeout: REFUSAL_TIMEOUT_MS }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

function exited(child: ReturnType<typeof spawn>): Promise<number | null> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve(child.exitCode);
    else child.once('exit', (code) => resolve(code));
  });
}

test('in one process a hold is shared and counted; the last release lets another holder in', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'analytics-lock-'));
  try {
    const a = holdDataDir(dir);
    const b = holdDataDir(dir);
    assert.equal(a, b);
    const named = JSON.parse(readFileSync(path.join(dir, HOLDER_FILE), 'utf8')) as { pid: number };
    assert.equal(named.pid, process.pid);
    releaseDataDir(a);
    assert.ok(existsSync(path.join(dir, HOLDER_FILE)), 'still held once');
    releaseDataDir(b);
    assert.ok(!existsSync(path.join(dir, HOLDER_FILE)), 'the last release removes the holder file');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a second service, rebuild and repair are refused beside a live service; check and backup work; kill -9 leaves nothing to clean', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'analytics-lock-'));
  const backupDir = mkdtempSync(path.join(tmpdir(), 'analytics-lock-backup-'));
  rmSync(backupDir, { recursive: true });
  const first = await startServiceProcess(dir, ADMIN);
  let third: Awaited<ReturnType<typeof startServiceProcess>> | undefined;
  try {
    const { keys } = await createProject(first.url, ADMIN);
    const sent = await api(first.url, '/analytics', { key: keys.secret, body: { event: 'held', sessionId: 's1' } });
    assert.equal(sent.status, 200);

    // the holder answers who it is on the socket, and names itself in the directory
    const holder = await askHolder(dir);
    assert.equal(holder?.pid, first.proc.pid);
    assert.match(holder!.command, /(src\/main\.ts|dist\/main\.js)$/);

    // a second service: exit 1 at once, naming the directory and the first one's pid
    const second = spawn(process.execPath, nodeArgsFor('main.ts'), {
      cwd: ROOT,
      env: { ...process.env, PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: dir, ANALYTICS_ADMIN_KEY: ADMIN, ANALYTICS_QUIET: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let secondErr = '';
    second.stderr!.on('data', (c: Buffer) => (secondErr += c.toString()));
    let secondOut = '';
    second.stdout!.on('data', (c: Buffer) => (secondOut += c.toString()));
    assert.equal(await exited(second), 1);
    assert.ok(secondErr.includes(dir) || secondErr.includes(path.basename(dir)), secondErr);
    assert.match(secondErr, new RegExp(`pid ${first.proc.pid} \\(.*(src/main\\.ts|dist/main\\.js)`));
    assert.doesNotMatch(secondOut, /HTTP http/, 'it never served');

    // rebuild and repair refused; read-only commands work beside it (all four at once: each starts node and tsx)
    const [rebuild, repair, check, backup] = await Promise.all([
      run([BIN, 'rebuild', '--data-dir', dir]),
      run([BIN, 'repair', '--yes', '--data-dir', dir]),
      run([BIN, 'check', '--data-dir', dir, '--json']),
      run([BIN, 'backup', backupDir, '--data-dir', dir]),
    ]);
    for (const [name, r] of [['rebuild', rebuild], ['repair', repair]] as const) {
      assert.equal(r.code, 1, `${name}: ${r.stderr}`);
      assert.match(r.stderr, new RegExp(`in use by pid ${first.proc.pid}`), `${name}: ${r.stderr}`);
    }
    assert.equal(check.code, 0, check.stderr);
    assert.equal(backup.code, 0, backup.stderr);
    assert.ok(existsSync(path.join(backupDir, 'analytics.lmdb')));

    // the first service is untouched: it still counts
    const again = await api(first.url, '/analytics', { key: keys.secret, body: { event: 'held', sessionId: 's2' } });
    assert.equal(again.status, 200);
    const m = await api(first.url, '/metrics', { key: keys.secret });
    assert.equal(m.status, 200);
    assert.equal(m.body.events.held, 2);

    // kill -9: the kernel releases the hold; the next start takes the directory with nothing cleaned by hand
    first.proc.kill('SIGKILL');
    await exited(first.proc);
    third = await startServiceProcess(dir, ADMIN, { METRICS_PORT: '0' });
    // the startup line names every listener, the operator metrics too when METRICS_PORT is set
    assert.match(third.output(), /operator metrics http:\/\/127\.0\.0\.1:\d+\/metrics/);
    const named = JSON.parse(readFileSync(path.join(dir, HOLDER_FILE), 'utf8')) as { pid: number };
    assert.equal(named.pid, third.proc.pid);
    assert.equal((await askHolder(dir))?.pid, third.proc.pid);
  } finally {
    first.proc.kill('SIGKILL');
    third?.proc.kill('SIGTERM');
    if (third) await exited(third.proc);
    rmSync(dir, { recursive: true, force: true });
    rmSync(backupDir, { recursive: true, force: true });
  }
});

test('DataDirHeld names the directory and the holder', () => {
  const e = new DataDirHeld('/srv/data', { pid: 42, command: 'node src/main.ts', since: '2026-01-01T00:00:00.000Z' });
  assert.match(e.message, /\/srv\/data is in use by pid 42 \(node src\/main\.ts\)/);
});
