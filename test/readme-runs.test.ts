import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { nodeArgsFor } from '../bin/dist.mjs';

/**
 * The README's shell blocks fenced as ```sh runnable run in order, as written, with bash on a fresh data directory
 * against a real service: the only changes are `8080` to the service's port, and `npx analytics` to this clone's
 * bin (npx in a directory without this package would look the name up in the registry). Every curl must answer
 * 2xx, or the status its `# → NNN` comment line names.
 */

const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const BIN = path.join(ROOT, 'bin', 'analytics.js');
/** tsx compiling the service on a loaded 2-core machine, then the blocks (each `npx analytics` starts node). */
const RUN_TIMEOUT_MS = 120_000;

interface Block {
  line: number;
  text: string;
}

function runnableBlocks(readme: string): Block[] {
  const blocks: Block[] = [];
  const lines = readme.split('\n');
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]!.trim() !== '```sh runnable') continue;
    const start = i + 1;
    let end = start;
    while (end < lines.length && lines[end]!.trim() !== '```') end++;
    blocks.push({ line: start + 1, text: lines.slice(start, end).join('\n') });
    i = end;
  }
  return blocks;
}

/** The status each curl of the blocks must answer, in order: 2xx, unless the next `# → NNN` comment names one. */
function expectedStatuses(blocks: Block[]): Array<{ want: string; where: string }> {
  const out: Array<{ want: string; where: string }> = [];
  for (const b of blocks) {
    b.text.split('\n').forEach((line, k) => {
      const code = line.replace(/#.*$/, '');
      for (const _ of code.matchAll(/(^|[\s$(|])curl\s/g)) out.push({ want: '2xx', where: `README.md:${b.line + k}: ${line.trim()}` });
      const named = /^\s*# → (\d{3}) /.exec(line);
      if (named && out.length > 0) out[out.length - 1]!.want = named[1]!;
    });
  }
  return out;
}

function startService(dataDir: string): Promise<{ proc: ReturnType<typeof spawn>; port: number; output: () => string }> {
  const env: Record<string, string | undefined> = { ...process.env, PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: dataDir, ANALYTICS_QUIET: '0' };
  delete env.ANALYTICS_ADMIN_KEY; // the quickstart reads the generated storage/admin.key
  const proc = spawn(process.execPath, nodeArgsFor('main.ts'), { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  return new Promise((resolve, reject) => {
    proc.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const m = /HTTP http:\/\/127\.0\.0\.1:(\d+)/.exec(out);
      if (m) resolve({ proc, port: Number(m[1]), output: () => out });
    });
    proc.once('exit', (code) => reject(new Error(`service exited early (${code}): ${out}`)));
  });
}

test('the README blocks marked runnable run as written against a real service', { timeout: RUN_TIMEOUT_MS }, async () => {
  const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const blocks = runnableBlocks(readme);
  assert.ok(blocks.length >= 5, `expected the quickstart, API and CLI blocks to be marked runnable, found ${blocks.length}`);
  const expected = expectedStatuses(blocks);
  const work = mkdtempSync(path.join(tmpdir(), 'analytics-readme-'));
  const service = await startService(path.join(work, 'storage'));
  try {
    const prelude = [
      'set -eu',
      // Every curl reports its status on stderr after the README's own output, whatever -w the README gave.
      `curl() { command curl "$@" -w '%{stderr}HTTP %{http_code}\\n'; }`,
      `npx() { if [ "$1" = analytics ]; then shift; node ${JSON.stringify(BIN)} "$@"; else command npx "$@"; fi; }`,
    ].join('\n');
    const script = `${prelude}\n${blocks.map((b) => `# README.md:${b.line}\n${b.text}`).join('\n')}\n`.replaceAll('8080', String(service.port));
    const result = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const env: Record<string, string | undefined> = { ...process.env };
      for (const name of ['ANALYTICS_URL', 'ANALYTICS_KEY', 'ANALYTICS_DATA_DIR', 'ANALYTICS_ADMIN_KEY']) delete env[name];
      const bash = spawn('bash', ['-c', script], { cwd: work, env, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      bash.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
      bash.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      bash.on('exit', (code) => resolve({ code, stdout, stderr }));
    });
    const context = `\n--- stdout\n${result.stdout.slice(-4000)}\n--- stderr\n${result.stderr.slice(-4000)}`;
    assert.equal(result.code, 0, `the blocks failed${context}`);
    const got = [...result.stderr.matchAll(/^HTTP (\d{3})$/gm)].map((m) => m[1]!);
    assert.equal(got.length, expected.length, `curl calls answered ${got.length}, README has ${expected.length}${context}`);
    expected.forEach((e, i) => {
      const ok = e.want === '2xx' ? /^2\d\d$/.test(got[i]!) : got[i] === e.want;
      assert.ok(ok, `${e.where}\n  answered ${got[i]}, expected ${e.want}${context}`);
    });
    // what the blocks promise beyond statuses
    assert.match(result.stdout, /"accepted":1/);
    assert.match(result.stdout, /"code":"conflict"/);
    assert.match(result.stdout, /admin\.key \(mode 0600\)/);
    const backups = path.join(work, `backup-${new Date().toISOString().slice(0, 10)}`);
    assert.ok(existsSync(path.join(backups, 'analytics.lmdb')));
    assert.equal(statSync(path.join(backups, 'admin.key')).mode & 0o777, 0o600);
    assert.match(result.stdout, /^ok: \d+ log entries in sequence/m);
  } finally {
    service.proc.kill('SIGTERM');
    await new Promise((r) => (service.proc.exitCode !== null ? r(undefined) : service.proc.once('exit', r)));
    rmSync(work, { recursive: true, force: true });
  }
});
