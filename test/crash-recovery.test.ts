import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { api, createProject, todayUtc } from './helpers.ts';
import { startServiceProcess, type ServiceProcess } from './service-process.ts';

/** ≥ 20 kills in `npm test`; bench/soak runs more. */
const RUNS = Number(process.env.CRASH_RUNS ?? 20);
/** Concurrent ingest loops while the kill lands. */
const WRITERS = 8;


function kill(child: ServiceProcess): Promise<void> {
  return new Promise((resolve) => {
    child.proc.once('exit', () => resolve());
    child.proc.kill('SIGKILL');
  });
}

interface Sent {
  eventId: string;
  acked: boolean;
}

/** The UTC date the test started on: its counts are read from there to today (it may run over midnight). */
const FIRST_DAY = todayUtc();

async function crashCount(url: string, key: string): Promise<number> {
  const m = await api(url, `/metrics?from=${FIRST_DAY}&to=${todayUtc()}`, { key });
  assert.equal(m.status, 200);
  return (m.body.events.crash as number | undefined) ?? 0;
}

test(`every acknowledged event is counted exactly once across ${RUNS} SIGKILLs under concurrent ingest`, { timeout: 600_000 }, async () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'analytics-crash-'));
  const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
  const sent: Sent[] = [];
  try {
    let child = await startServiceProcess(dataDir, adminKey);
    const { keys } = await createProject(child.url, adminKey, { monthly_quota: 0 });
    for (let run = 0; run < RUNS; run++) {
      const counted = await crashCount(child.url, keys.secret);
      const acked = sent.filter((s) => s.acked).length;
      assert.ok(counted >= acked, `run ${run}: ${counted} counted < ${acked} acknowledged`);
      assert.ok(counted <= sent.length, `run ${run}: ${counted} counted > ${sent.length} sent`);

      let stop = false;
      const writer = async () => {
        while (!stop) {
          const batch: Sent[] = Array.from({ length: 1 + Math.floor(Math.random() * 5) }, () => ({ eventId: randomBytes(12).toString('hex'), acked: false }));
          sent.push(...batch);
          try {
            const r = await api(child.url, '/analytics', {
              key: keys.secret,
              body: batch.map((s) => ({ event: 'crash', eventId: s.eventId, sessionId: s.eventId })),
            });
            if (r.status === 200) for (const s of batch) s.acked = true;
          } catch {
            return; // the server died mid-request: these stay unacknowledged
          }
        }
      };
      const writers = Array.from({ length: WRITERS }, writer);
      await new Promise((r) => setTimeout(r, 50 + Math.random() * 400));
      await kill(child);
      stop = true;
      await Promise.all(writers);
      child = await startServiceProcess(dataDir, adminKey);
    }

    // Resend everything not acknowledged with the same eventIds, as a client would: each event is then stored once.
    const unacked = sent.filter((s) => !s.acked);
    for (let i = 0; i < unacked.length; i += 500) {
      const r = await api(child.url, '/analytics', {
        key: keys.secret,
        body: unacked.slice(i, i + 500).map((s) => ({ event: 'crash', eventId: s.eventId, sessionId: s.eventId })),
      });
      assert.equal(r.status, 200);
    }
    assert.equal(await crashCount(child.url, keys.secret), sent.length);
    assert.ok(sent.filter((s) => s.acked).length > RUNS, 'ingest made progress between kills');
    await kill(child);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('SIGTERM drains, writes a snapshot, exits 0, and the next start serves the same figures', { timeout: 60_000 }, async () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'analytics-term-'));
  const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
  try {
    const child = await startServiceProcess(dataDir, adminKey);
    const { keys } = await createProject(child.url, adminKey, { monthly_quota: 0 });
    const body = Array.from({ length: 50 }, (_, i) => ({ event: 'crash', sessionId: `s${i}` }));
    const inflight = Array.from({ length: 10 }, () => api(child.url, '/analytics', { key: keys.secret, body }));
    const exited = new Promise<number | null>((resolve) => child.proc.once('exit', (code) => resolve(code)));
    await Promise.all(inflight.map((p) => p.then((r) => assert.equal(r.status, 200))));
    child.proc.kill('SIGTERM');
    assert.equal(await exited, 0);
    assert.ok(readdirSync(path.join(dataDir, 'snapshots')).some((f) => f.endsWith('.bin')), 'a snapshot was written');

    const again = await startServiceProcess(dataDir, adminKey);
    assert.equal(await crashCount(again.url, keys.secret), 500);
    await kill(again);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
