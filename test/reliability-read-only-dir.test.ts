import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { pv } from './contract-helpers.ts';
import { api, createProject } from './helpers.ts';
import { startServiceProcess } from './service-process.ts';
import { nodeArgsFor } from '../bin/dist.mjs';

/**
 * A data directory the service cannot write is named in one line (the path and the cause), exit 1, no stack; a final
 * snapshot that cannot be written makes the process exit non-zero with a message. Running as root, chmod does not
 * stop writes, so a read-only bind mount stands in for a read-only directory (skipped where mount is not allowed),
 * and a file where the directory should be for a path that cannot be used.
 */

const adminKey = `ak_${randomBytes(24).toString('base64url')}`;

function run(dataDir: string): Promise<{ code: number | null; output: string }> {
  const proc = spawn(process.execPath, nodeArgsFor('main.ts'), {
    env: { ...process.env, PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: dataDir, ANALYTICS_ADMIN_KEY: adminKey, ANALYTICS_QUIET: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const on = (c: Buffer) => {
    out += c.toString();
    if (/HTTP http:\/\//.test(out)) proc.kill('SIGKILL');
  };
  proc.stdout!.on('data', on);
  proc.stderr!.on('data', on);
  return new Promise((resolve) => proc.once('close', (code) => resolve({ code, output: out })));
}

function tryMount(args: string[]): boolean {
  try {
    execFileSync('mount', args, { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

test('a file where the data directory should be: one line naming the path, exit 1', async () => {
  const work = mkdtempSync(path.join(tmpdir(), 'analytics-rodir-'));
  try {
    const notDir = path.join(work, 'data');
    writeFileSync(notDir, 'not a directory');
    const r = await run(notDir);
    assert.equal(r.code, 1, r.output);
    assert.match(r.output, new RegExp(`cannot write to the data directory: ${notDir}: not a directory \\(ENOTDIR\\)`));
    assert.doesNotMatch(r.output, /\n\s+at /, 'no stack');
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test('a read-only data directory (read-only bind mount): refused naming the path and EROFS; a final snapshot that cannot be written exits non-zero with a message', async (t) => {
  const work = mkdtempSync(path.join(tmpdir(), 'analytics-rodir-'));
  const real = path.join(work, 'real');
  const mnt = path.join(work, 'mnt');
  mkdirSync(real);
  mkdirSync(mnt);
  if (!tryMount(['--bind', real, mnt])) {
    rmSync(work, { recursive: true, force: true });
    t.skip('mount --bind is not permitted here (needs root)');
    return;
  }
  try {
    const dataDir = path.join(mnt, 'data');
    const child = await startServiceProcess(dataDir, adminKey, { ANALYTICS_SNAPSHOT_EVERY_EVENTS: '100000000' });
    const p = await createProject(child.url, adminKey);
    assert.equal((await api(child.url, '/analytics', { key: p.keys.secret, body: [pv('/a'), pv('/b')] })).status, 200);
    // the snapshots directory turns read-only under the running service: the snapshot at shutdown cannot be written
    // (LMDB holds its files open for writing, so the data directory itself cannot be remounted while it runs)
    const snaps = path.join(dataDir, 'snapshots');
    mkdirSync(snaps, { recursive: true });
    execFileSync('mount', ['--bind', snaps, snaps]);
    execFileSync('mount', ['-o', 'remount,bind,ro', snaps]);
    const exited = new Promise<number | null>((resolve) => child.proc.once('exit', (code) => resolve(code)));
    child.proc.kill('SIGTERM');
    assert.equal(await exited, 1, child.output());
    assert.match(child.output(), /shutdown failed: the final snapshot could not be written in \S+snapshots: EROFS/);
    execFileSync('umount', [snaps]);
    // and a start on a read-only data directory is refused in one line naming the path
    execFileSync('mount', ['-o', 'remount,bind,ro', mnt]);
    const r = await run(dataDir);
    assert.equal(r.code, 1, r.output);
    assert.match(r.output, new RegExp(`cannot write to the data directory: ${dataDir}: read-only file system \\(EROFS\\)`));
    assert.doesNotMatch(r.output, /\n\s+at /, 'no stack');
  } finally {
    execFileSync('umount', ['-l', mnt]);
    rmSync(work, { recursive: true, force: true });
  }
});
