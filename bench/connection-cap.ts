import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BenchChild, REPO_ROOT } from './lib/child.ts';
import { median, newHistogram, summarize } from './lib/latency.ts';
import { SERVICE_ENV, serviceNodeArgs } from '../bin/dist.mjs';

/**
 * The connection cap under attack: 8 addresses × 1,000 silent sockets fill the HTTP port's 8,000-connection cap
 * (each address just under its per-address cap), and the attacker puts back every socket the service closes.
 * A healthy client from another address times sequential GET /health, on one keep-alive connection and on a new
 * connection per request (a new client each time), without and with the attack. Goal: p99 ≤ +20 %, every answer 200.
 * The service runs in its own process (as `npm start`), the attacker in another. Run: `npx tsx bench/connection-cap.ts`.
 */

/** The issue's attack: the defaults' per-address cap (1,000) times 8 fills the default 8,000 cap. */
const ADDRESSES = 8;
const PER_ADDRESS = 1000;
/** Requests per measurement: enough for a p99 of 20 samples, short enough for 3 rounds of 4 runs on shared cores. */
const SAMPLES = 2000;
const ROUNDS = 3;

const dataDir = mkdtempSync(path.join(tmpdir(), 'analytics-cap-'));
const proc = spawn(process.execPath, serviceNodeArgs(), {
  cwd: REPO_ROOT,
  env: { ...process.env, ...SERVICE_ENV, PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: dataDir, ANALYTICS_ADMIN_KEY: `ak_${randomBytes(24).toString('base64url')}`, ANALYTICS_QUIET: '0' },
  stdio: ['ignore', 'pipe', 'inherit'],
});
const port = await new Promise<number>((resolve) => {
  let out = '';
  proc.stdout!.on('data', (c: Buffer) => {
    out += c.toString();
    const m = /HTTP http:\/\/[\d.]+:(\d+)/.exec(out);
    if (m) resolve(Number(m[1]));
  });
});

const keepAlive = new Agent({ keepAlive: true, maxSockets: 1 });
/** One GET /health from 127.0.0.1; resolves with its status. */
function get(agent: Agent | false): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/health', agent, localAddress: '127.0.0.1' }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

async function measure(agent: Agent | false): Promise<{ p99: number; failed: number }> {
  const h = newHistogram();
  let failed = 0;
  for (let i = 0; i < SAMPLES; i++) {
    const t = performance.now();
    const code = await get(agent).catch(() => 0);
    h.recordValue(Math.max(1, Math.round((performance.now() - t) * 1000)));
    if (code !== 200) failed++;
  }
  return { p99: summarize(h).p99, failed };
}

const attacker = new BenchChild(path.join(REPO_ROOT, 'bench/lib/cap-attacker.ts'));
const rows: Array<Record<'kaWithout' | 'kaWith' | 'newWithout' | 'newWith', number>> = [];
try {
  await measure(keepAlive); // warm-up
  for (let r = 0; r < ROUNDS; r++) {
    const kaWithout = await measure(keepAlive);
    const newWithout = await measure(false);
    const { open } = await attacker.call<{ open: number }>('start', { port, addresses: ADDRESSES, perAddress: PER_ADDRESS });
    const kaWith = await measure(keepAlive);
    const newWith = await measure(false);
    const { held, reconnects } = await attacker.call<{ held: number; reconnects: number }>('stop');
    rows.push({ kaWithout: kaWithout.p99, kaWith: kaWith.p99, newWithout: newWithout.p99, newWith: newWith.p99 });
    console.log(
      `round ${r + 1}: ${open} attacker sockets open at start, ${held} at the end, ${reconnects} reconnects; ` +
        `p99 keep-alive ${kaWithout.p99} → ${kaWith.p99} ms, new connection ${newWithout.p99} → ${newWith.p99} ms; ` +
        `not 200: ${kaWithout.failed + newWithout.failed} without, ${kaWith.failed + newWith.failed} with`,
    );
    await new Promise((r2) => setTimeout(r2, 2000));
  }
  const pct = (a: number, b: number) => `${(((b - a) / a) * 100).toFixed(1)} %`;
  const m = (k: keyof (typeof rows)[0]) => median(rows.map((x) => x[k]));
  console.log(`median p99 keep-alive: ${m('kaWithout')} → ${m('kaWith')} ms (${pct(m('kaWithout'), m('kaWith'))}; goal ≤ +20 %)`);
  console.log(`median p99 new connection: ${m('newWithout')} → ${m('newWith')} ms (${pct(m('newWithout'), m('newWith'))}; goal ≤ +20 %)`);
} finally {
  await attacker.stop();
  keepAlive.destroy();
  proc.kill('SIGTERM');
  await new Promise((r) => proc.once('exit', r));
  rmSync(dataDir, { recursive: true, force: true });
}
