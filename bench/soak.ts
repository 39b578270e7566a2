import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { nodeArgsFor } from '../bin/dist.mjs';

/**
 * `npm run soak`: SIGKILL-and-restart cycles of the real service (`src/main.ts`) under concurrent writers, half of
 * them sending eventIds and half not. After every restart: acknowledged ⊆ counted ⊆ sent, per kind. At the end every
 * unacknowledged id'd event is resent with its eventId and each must be counted exactly once. Snapshots are taken
 * every 2,000 events so kills also land mid-snapshot. Cycles: the first argument (default 200). Kept out of `npm test`.
 */

const CYCLES = Number(process.argv[2] ?? 200);
const WRITERS = 8;
const ROOT = path.resolve(import.meta.dirname, '..');

interface Child {
  proc: ChildProcess;
  url: string;
}

function startChild(dataDir: string, adminKey: string): Promise<Child> {
  const proc = spawn(process.execPath, nodeArgsFor('main.ts'), {
    cwd: ROOT,
    env: {
      ...process.env,
      PORT: '0',
      GRPC_PORT: '0',
      HOST: '127.0.0.1',
      ANALYTICS_DATA_DIR: dataDir,
      ANALYTICS_ADMIN_KEY: adminKey,
      ANALYTICS_QUIET: '0',
      ANALYTICS_SNAPSHOT_EVERY_EVENTS: '2000',
      ANALYTICS_DURABILITY: 'flush',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    const on = (chunk: Buffer) => {
      out += chunk.toString();
      const m = /HTTP (http:\/\/\S+)/.exec(out);
      if (m) resolve({ proc, url: m[1]! });
    };
    proc.stdout!.on('data', on);
    proc.stderr!.on('data', (c: Buffer) => (out += c.toString()));
    proc.once('exit', (code) => reject(new Error(`child exited early (${code}): ${out}`)));
  });
}

function kill(child: Child): Promise<void> {
  return new Promise((resolve) => {
    child.proc.once('exit', () => resolve());
    child.proc.kill('SIGKILL');
  });
}

async function post(url: string, key: string, body: unknown): Promise<number> {
  const r = await fetch(`${url}/analytics`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  await r.arrayBuffer();
  return r.status;
}

async function counts(url: string, key: string): Promise<{ withId: number; withoutId: number }> {
  const r = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${key}` } });
  const m = (await r.json()) as { events: Record<string, number> };
  return { withId: m.events.soak_id ?? 0, withoutId: m.events.soak_noid ?? 0 };
}

interface Sent {
  id?: string;
  acked: boolean;
}

const started = Date.now();
const dataDir = mkdtempSync(path.join(tmpdir(), 'analytics-soak-'));
const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
const withId: Sent[] = [];
const withoutId: Sent[] = [];
let leftovers = 0;
let child = await startChild(dataDir, adminKey);
const created = await fetch(`${child.url}/projects`, {
  method: 'POST',
  headers: { authorization: `Bearer ${adminKey}`, 'content-type': 'application/json' },
  body: JSON.stringify({ allowed_origins: [], allowed_referrers: [], monthly_quota: 0 }),
}).then((r) => r.json() as Promise<{ keys: { secret: string } }>);
const key = created.keys.secret;
try {
  for (let cycle = 0; cycle < CYCLES; cycle++) {
    const c = await counts(child.url, key);
    const ackedId = withId.filter((s) => s.acked).length;
    const ackedNoId = withoutId.filter((s) => s.acked).length;
    assert.ok(c.withId >= ackedId && c.withId <= withId.length, `cycle ${cycle}: with ids ${ackedId} ≤ ${c.withId} ≤ ${withId.length}`);
    assert.ok(c.withoutId >= ackedNoId && c.withoutId <= withoutId.length, `cycle ${cycle}: without ids ${ackedNoId} ≤ ${c.withoutId} ≤ ${withoutId.length}`);
    let stop = false;
    const writer = async (ids: boolean) => {
      while (!stop) {
        const batch: Sent[] = Array.from({ length: 1 + Math.floor(Math.random() * 20) }, () => (ids ? { id: randomBytes(12).toString('hex'), acked: false } : { acked: false }));
        (ids ? withId : withoutId).push(...batch);
        try {
          const status = await post(child.url, key, batch.map((s, i) => ({ event: ids ? 'soak_id' : 'soak_noid', sessionId: `s${i % 7}`, ...(s.id ? { eventId: s.id } : {}) })));
          if (status === 200) for (const s of batch) s.acked = true;
        } catch {
          return; // killed mid-request: these stay unacknowledged
        }
      }
    };
    const writers = Array.from({ length: WRITERS }, (_, i) => writer(i % 2 === 0));
    await new Promise((r) => setTimeout(r, 100 + Math.random() * 500));
    await kill(child);
    stop = true;
    await Promise.all(writers);
    leftovers += readdirSync(path.join(dataDir, 'snapshots')).filter((f) => f.endsWith('.tmp')).length;
    child = await startChild(dataDir, adminKey);
    assert.deepEqual(readdirSync(path.join(dataDir, 'snapshots')).filter((f) => f.endsWith('.tmp')), [], 'leftover .tmp removed at start');
    if (cycle % 20 === 19) console.log(`cycle ${cycle + 1}/${CYCLES}: sent ${withId.length + withoutId.length}`);
  }
  const unacked = withId.filter((s) => !s.acked);
  for (let i = 0; i < unacked.length; i += 500) {
    const batch = unacked.slice(i, i + 500);
    assert.equal(await post(child.url, key, batch.map((s) => ({ event: 'soak_id', sessionId: 's0', eventId: s.id }))), 200);
  }
  // and a resend of everything acknowledged counts nothing twice
  const acked = withId.filter((s) => s.acked);
  for (let i = 0; i < acked.length; i += 500) {
    assert.equal(await post(child.url, key, acked.slice(i, i + 500).map((s) => ({ event: 'soak_id', sessionId: 's0', eventId: s.id }))), 200);
  }
  const final = await counts(child.url, key);
  assert.equal(final.withId, withId.length, 'every id\'d event counted exactly once after the resend');
  const summary = {
    cycles: CYCLES,
    writers: WRITERS,
    sentWithId: withId.length,
    ackedWithId: acked.length,
    sentWithoutId: withoutId.length,
    ackedWithoutId: withoutId.filter((s) => s.acked).length,
    countedWithoutId: final.withoutId,
    resent: unacked.length + acked.length,
    countedWithIdAfterResend: final.withId,
    snapshotTmpLeftOverByKills: leftovers,
    minutes: Number(((Date.now() - started) / 60_000).toFixed(1)),
  };
  console.log(JSON.stringify(summary, null, 2));
  await kill(child);
} finally {
  child.proc.kill('SIGKILL');
  rmSync(dataDir, { recursive: true, force: true });
}
