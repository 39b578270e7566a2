import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { api, createProject } from './helpers.ts';

/**
 * Stopping the service as a supervisor does (systemd, a container runtime, a process manager): start a command, send
 * SIGTERM to the PID it started and nothing else, and expect the service to drain, snapshot and exit, leaving its
 * ports free.
 */

const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
/** Generous on a loaded 2-core machine: npm's own start-up plus tsx compiling the service. */
const START_TIMEOUT_MS = 60_000;
/** The drain of an idle service takes well under a second; this is the supervisor's patience. */
const STOP_TIMEOUT_MS = 20_000;

interface Started {
  child: ChildProcess;
  dataDir: string;
  url: string;
  grpcPort: number;
  httpPort: number;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  output: () => string;
}

async function startCommand(command: string, args: string[]): Promise<Started> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'analytics-signals-'));
  const env: Record<string, string | undefined> = { ...process.env, PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: dataDir };
  // Not inherited from the test runner: the supervisor's environment has none of these.
  delete env.ANALYTICS_ADMIN_KEY;
  delete env.ANALYTICS_QUIET;
  // Its own process group, so cleanup can reach whatever is left; the signal under test goes to the PID only.
  const child = spawn(command, args, { cwd: ROOT, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr!.on('data', (b: Buffer) => (out += b.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  const deadline = Date.now() + START_TIMEOUT_MS;
  let m: RegExpExecArray | null = null;
  while (!(m = /HTTP (http:\/\/127\.0\.0\.1:(\d+))\s+gRPC 127\.0\.0\.1:(\d+)/.exec(out))) {
    if (Date.now() > deadline || child.exitCode !== null) {
      killGroup(child);
      throw new Error(`the service did not start:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { child, dataDir, url: m[1]!, httpPort: Number(m[2]), grpcPort: Number(m[3]), exited, output: () => out };
}

function groupAlive(child: ChildProcess): boolean {
  try {
    process.kill(-child.pid!, 0);
    return true;
  } catch {
    return false;
  }
}

function killGroup(child: ChildProcess): void {
  try {
    process.kill(-child.pid!, 'SIGKILL');
  } catch {
    /* already gone */
  }
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

async function waitFor(what: string, cond: () => boolean | Promise<boolean>, ms: number, output: () => string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`${what} within ${ms} ms; output:\n${output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Creates a project and ingests one event, so the stop has something to snapshot. */
async function ingestOne(s: Started): Promise<void> {
  const admin = readFileSync(path.join(s.dataDir, 'admin.key'), 'utf8').trim();
  const p = await createProject(s.url, admin);
  const r = await api(s.url, '/analytics', { key: p.keys.secret, body: { event: 'page_view', url: 'https://a.example/', sessionId: 's1' } });
  assert.equal(r.status, 200);
}

async function stopsCleanly(command: string, args: string[], expectExit: (e: { code: number | null; signal: NodeJS.Signals | null }) => void) {
  const s = await startCommand(command, args);
  try {
    await ingestOne(s);
    assert.deepEqual(readdirSync(path.join(s.dataDir, 'snapshots')), []);
    const t0 = Date.now();
    s.child.kill('SIGTERM'); // the PID the supervisor started, nothing else
    const exit = await Promise.race([
      s.exited,
      new Promise<never>((_, rej) => setTimeout(() => rej(new Error(`no exit within ${STOP_TIMEOUT_MS} ms:\n${s.output()}`)), STOP_TIMEOUT_MS)),
    ]);
    expectExit(exit);
    // Every process it started is gone, and both ports can be bound again (the next start will not fail).
    await waitFor('every process of the group exits', () => !groupAlive(s.child), STOP_TIMEOUT_MS - (Date.now() - t0), s.output);
    assert.ok(await portFree(s.httpPort), 'HTTP port free');
    assert.ok(await portFree(s.grpcPort), 'gRPC port free');
    assert.ok(readdirSync(path.join(s.dataDir, 'snapshots')).length > 0, `a snapshot is written:\n${s.output()}`);
    assert.match(s.output(), /SIGTERM|parent process exited/);
  } finally {
    killGroup(s.child);
    rmSync(s.dataDir, { recursive: true, force: true });
  }
}

test('SIGTERM to the npm process of `npm start` drains the service, writes a snapshot, frees both ports and exits 0', async () => {
  await stopsCleanly('npm', ['start'], (e) => assert.deepEqual(e, { code: 0, signal: null }));
});

test('SIGTERM to `analytics serve` (the package bin, as a supervisor runs it) drains, snapshots, frees the ports and exits 0', async () => {
  await stopsCleanly(path.join(ROOT, 'bin/analytics.js'), ['serve'], (e) => assert.deepEqual(e, { code: 0, signal: null }));
});

test('SIGTERM to the npm process of `npx analytics serve` still stops the service with a drain and a snapshot', async () => {
  // npm relays the signal to the shell it spawned, which dies of it without relaying; npm then exits by the same
  // signal at once. The service notices that its parent is gone and stops as it would on SIGTERM.
  await stopsCleanly('npx', ['--offline', 'analytics', 'serve'], (e) => assert.ok(e.code === 0 || e.signal === 'SIGTERM', JSON.stringify(e)));
});
