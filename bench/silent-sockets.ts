import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Agent, request } from 'node:http';
import { nodeArgsFor } from '../bin/dist.mjs';

/**
 * Issue 17's goal: with 5,000 silent sockets open on each port, a healthy client's p99 stays within 20 % of its p99
 * without them. The service runs in its own process (as `npm start`); this process holds the silent sockets (from
 * 127.0.0.2..21, so the per-IP cap does not refuse them) and times sequential GET /health on one keep-alive
 * connection. Run: `npx tsx bench/silent-sockets.ts`.
 */

const SILENT_PER_PORT = 5000;
const SAMPLES = 3000;
const ROUNDS = 3;

const dataDir = mkdtempSync(path.join(tmpdir(), 'analytics-silent-'));
const proc = spawn(process.execPath, nodeArgsFor('main.ts'), {
  cwd: path.resolve(import.meta.dirname, '..'),
  env: { ...process.env, PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: dataDir, ANALYTICS_ADMIN_KEY: `ak_${randomBytes(24).toString('base64url')}`, ANALYTICS_QUIET: '0' },
  stdio: ['ignore', 'pipe', 'inherit'],
});
const { http, grpc } = await new Promise<{ http: number; grpc: number }>((resolve) => {
  let out = '';
  proc.stdout!.on('data', (c: Buffer) => {
    out += c.toString();
    const m = /HTTP http:\/\/[\d.]+:(\d+)\s+gRPC [\d.]+:(\d+)/.exec(out);
    if (m) resolve({ http: Number(m[1]), grpc: Number(m[2]) });
  });
});

const keepAlive = new Agent({ keepAlive: true, maxSockets: 1 });
function get(): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: http, path: '/health', agent: keepAlive }, (res) => {
      res.resume();
      res.on('end', () => resolve());
    });
    req.on('error', reject);
    req.end();
  });
}

async function p99(): Promise<number> {
  const t: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const s = performance.now();
    await get();
    t.push(performance.now() - s);
  }
  t.sort((a, b) => a - b);
  return t[Math.floor(t.length * 0.99)]!;
}

async function openSilent(port: number, n: number): Promise<Socket[]> {
  const out: Socket[] = [];
  for (let i = 0; i < n; i++) {
    const s = connect({ port, host: '127.0.0.1', localAddress: `127.0.0.${2 + (i % 20)}` });
    s.on('error', () => {});
    out.push(s);
    if (i % 200 === 199) await new Promise((r) => setTimeout(r, 20));
  }
  await new Promise((r) => setTimeout(r, 500));
  return out;
}

await p99(); // warm-up
const rows: Array<{ without: number; with: number }> = [];
for (let r = 0; r < ROUNDS; r++) {
  const without = await p99();
  const silent = [...(await openSilent(http, SILENT_PER_PORT)), ...(await openSilent(grpc, SILENT_PER_PORT))];
  const withSilent = await p99();
  const open = silent.filter((s) => !s.destroyed).length;
  rows.push({ without, with: withSilent });
  console.log(`round ${r + 1}: p99 ${without.toFixed(3)} ms without, ${withSilent.toFixed(3)} ms with ${open} silent sockets open`);
  for (const s of silent) s.destroy();
  await new Promise((r2) => setTimeout(r2, 1000));
}
const med = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const a = med(rows.map((r) => r.without));
const b = med(rows.map((r) => r.with));
console.log(`median p99: ${a.toFixed(3)} ms → ${b.toFixed(3)} ms (${(((b - a) / a) * 100).toFixed(1)} %; goal ≤ +20 %)`);
keepAlive.destroy();
proc.kill('SIGTERM');
await new Promise((r) => proc.once('exit', r));
rmSync(dataDir, { recursive: true, force: true });
