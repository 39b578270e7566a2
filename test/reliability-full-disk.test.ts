import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { pv, storedEvents } from './contract-helpers.ts';
import type { StoreFaults } from '../src/store/lmdb/log-store.ts';
import { api, createProject, startTestService } from './helpers.ts';
import { startServiceProcess } from './service-process.ts';

/**
 * Issue 17, row 4: on a full disk the first refused batch got 503, then an unhandled lmdb commit rejection ended the
 * process. Now writes get 503 unavailable with Retry-After, /health 503, reads keep working, and writes come back by
 * themselves once space is back; nothing acknowledged is lost and nothing refused is counted. Two ways: a fault
 * injected inside the real LMDB transaction, and a real full disk (a small tmpfs; skipped where mounting is not allowed).
 */

const batch = (tag: string, n: number, pad = 0) =>
  Array.from({ length: n }, (_, i) => pv(`/${tag}${i}`, { sessionId: `${tag}${i}`, eventParams: pad ? { pad: randomBytes(pad / 2).toString('hex') } : {} })); // incompressible: the log compresses repeats

test('an injected store fault: 503 unavailable with Retry-After, health 503, reads work, writes resume by themselves', async () => {
  const store: StoreFaults = { fault: undefined };
  const svc = await startTestService({}, { storeFaults: store });
  try {
    const p = await createProject(svc.url, svc.adminKey);
    const key = p.keys.secret;
    assert.equal((await api(svc.url, '/analytics', { key, body: batch('a', 10) })).status, 200);
    store.fault = () => Object.assign(new Error('MDB_MAP_FULL: injected'), { code: 'ENOSPC' });
    const refused = await api(svc.url, '/analytics', { key, body: batch('b', 7) });
    assert.equal(refused.status, 503);
    assert.equal(refused.body.error.code, 'unavailable');
    assert.ok(Number(refused.headers.get('retry-after')) >= 1);
    assert.equal((await api(svc.url, '/health')).status, 503);
    assert.equal(await storedEvents(svc.url, key), 10, 'reads work and the refused batch is not counted');
    store.fault = undefined;
    assert.equal((await api(svc.url, '/analytics', { key, body: batch('c', 5) })).status, 200, 'writes resume without a restart');
    assert.equal((await api(svc.url, '/health')).status, 200);
    assert.equal(await storedEvents(svc.url, key), 15);
    const again = await svc.restart();
    try {
      assert.equal(await storedEvents(again.url, key), 15, 'after a restart: every acknowledged event, no refused one');
    } finally {
      await again.destroy();
    }
  } catch (err) {
    await svc.destroy().catch(() => {});
    throw err;
  }
});

function tryMount(dir: string, size: string): boolean {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** The service as `npm start` runs it: a full disk must not end the process (in-process, the test runner would count lmdb's stray rejections as failures). */

test('a real full disk (24 MiB tmpfs): the process stays up, refuses writes with 503, and resumes when space is freed', async (t) => {
  const mnt = mkdtempSync(path.join(tmpdir(), 'analytics-fulldisk-'));
  if (!tryMount(mnt, '24m')) {
    rmSync(mnt, { recursive: true, force: true });
    t.skip('mount -t tmpfs is not permitted here (needs root): the injected-fault test above still ran');
    return;
  }
  const dataDir = path.join(mnt, 'data');
  mkdirSync(dataDir);
  const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
  let child = await startServiceProcess(dataDir, adminKey, { ANALYTICS_SNAPSHOT_EVERY_EVENTS: '100000000' });
  let exitCode: number | null | undefined;
  child.proc.once('exit', (code) => (exitCode = code));
  try {
    const p = await createProject(child.url, adminKey);
    const key = p.keys.secret;
    writeFileSync(path.join(mnt, 'filler'), Buffer.alloc(14 * 1024 * 1024));
    let acked = 0;
    let refusedAt = -1;
    for (let i = 0; i < 400 && refusedAt < 0; i++) {
      const res = await api(child.url, '/analytics', { key, body: batch(`f${i}-`, 100, 400) });
      if (res.status === 200) acked += 100;
      else {
        assert.equal(res.status, 503, JSON.stringify(res.body));
        assert.equal(res.body.error.code, 'unavailable');
        assert.ok(res.headers.get('retry-after'));
        refusedAt = i;
      }
    }
    assert.ok(refusedAt > 0, 'the disk filled up');
    // still up: more refused writes, health 503, reads answer every acknowledged event
    for (let i = 0; i < 5; i++) assert.equal((await api(child.url, '/analytics', { key, body: batch(`g${i}-`, 100, 400) })).status, 503);
    assert.equal((await api(child.url, '/health')).status, 503);
    assert.equal(await storedEvents(child.url, key), acked);
    // the idle health probe runs every 10 s: past it, /health still says what a write would get
    await new Promise((r) => setTimeout(r, 11_000));
    assert.equal((await api(child.url, '/health')).status, 503, 'health stays 503 while the disk is full');
    // one line naming ENOSPC and the path, not lmdb's stack per failed commit
    const failures = child.output().split('\n').filter((l) => l.includes('storage write failed'));
    assert.equal(failures.length, 1, child.output().slice(-3000));
    assert.match(failures[0]!, new RegExp(`no space left on the device holding ${dataDir} \\(ENOSPC`));
    assert.doesNotMatch(child.output(), /lmdb[\\/]write\.js|^\s+at /m, 'no stack traces');
    assert.equal(exitCode, undefined, `the process is still up: ${child.output().slice(-500)}`);
    rmSync(path.join(mnt, 'filler'));
    const resumed = await api(child.url, '/analytics', { key, body: batch('h', 10) });
    assert.equal(resumed.status, 200, 'writes resume by themselves once space is back');
    acked += 10;
    assert.equal((await api(child.url, '/health')).status, 200);
    assert.match(child.output(), /storage accepts writes again/);
    assert.equal(await storedEvents(child.url, key), acked);
    const exited = new Promise((r) => child.proc.once('exit', r));
    child.proc.kill('SIGTERM');
    await exited;
    child = await startServiceProcess(dataDir, adminKey, { ANALYTICS_SNAPSHOT_EVERY_EVENTS: '100000000' });
    assert.equal(await storedEvents(child.url, key), acked, 'after a restart: every acknowledged event, no refused one');
  } finally {
    child.proc.kill('SIGKILL');
    await new Promise((r) => setTimeout(r, 200));
    execFileSync('umount', ['-l', mnt]);
    rmSync(mnt, { recursive: true, force: true });
  }
});
