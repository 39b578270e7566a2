import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { DRAIN_DEADLINE_MS } from '../src/service.ts';
import { pv, storedEvents } from './contract-helpers.ts';
import { api, createProject } from './helpers.ts';
import { startServiceProcess, type ServiceProcess } from './service-process.ts';

/**
 * Issue 17, row 3: one silent connection kept SIGTERM from ever finishing (no exit after 90 s, no snapshot). Now a
 * real process with silent sockets on both ports, an idle keep-alive client and a client dribbling a body exits 0
 * within the drain deadline, the slow client gets its answer (503) or a close, and the snapshot is written.
 */


function open(address: string): Socket {
  const [host, port] = address.replace('http://', '').split(':');
  const s = connect(Number(port), host!);
  s.on('error', () => {});
  return s;
}

test('SIGTERM with silent, idle and slow clients open exits 0 within the drain deadline and writes the snapshot', async () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'analytics-shutdown-'));
  const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
  const child = await startServiceProcess(dataDir, adminKey);
  try {
    const p = await createProject(child.url, adminKey);
    assert.equal((await api(child.url, '/analytics', { key: p.keys.secret, body: pv('/before') })).status, 200);
    assert.equal(await storedEvents(child.url, p.keys.secret), 1);

    const silent = [...Array.from({ length: 20 }, () => open(child.url)), ...Array.from({ length: 20 }, () => open(child.grpc))];
    // idle keep-alive: one answered request, connection left open
    const idle = open(child.url);
    idle.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    // slow: headers sent, the body dribbles one byte a second
    const slow = open(child.url);
    let slowAnswer = '';
    slow.on('data', (c: Buffer) => (slowAnswer += c.toString()));
    slow.write(`POST /analytics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${p.keys.secret}\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n[`);
    const dribble = setInterval(() => slow.write(' '), 1000);
    await new Promise((r) => setTimeout(r, 300));

    const started = Date.now();
    const exited = new Promise<number | null>((r) => child.proc.once('exit', (code) => r(code)));
    child.proc.kill('SIGTERM');
    const code = await exited;
    const took = Date.now() - started;
    clearInterval(dribble);
    assert.equal(code, 0);
    assert.ok(took < DRAIN_DEADLINE_MS + 3000, `exited after ${took} ms`);
    await new Promise((r) => setTimeout(r, 200));
    for (const s of [...silent, idle, slow]) s.destroy();
    assert.ok(slowAnswer === '' || /^HTTP\/1\.1 503 /.test(slowAnswer), `slow client got: ${slowAnswer.slice(0, 80)}`);
    const snaps = readdirSync(path.join(dataDir, 'snapshots'));
    assert.ok(snaps.some((f) => /^snapshot-\d+\.bin$/.test(f)), `snapshot written: ${snaps.join(', ')}`);
  } finally {
    child.proc.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  }
});
