import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { check } from '../src/engine/maintenance.ts';
import { LogStore, type StoredEntries } from '../src/store/lmdb/log-store.ts';
import { pv, storedEvents } from './contract-helpers.ts';
import { api, createProject, startTestService } from './helpers.ts';
import { nodeArgsFor } from '../bin/dist.mjs';

/**
 * Issue 17, row 5: a damaged log was served as if healthy (26,145 of 35,000 events, nothing logged). Now every log
 * entry carries a checksum and a count, startup verifies what it replays and refuses to start naming the first bad
 * sequence and the way out; `analytics backup` copies the data directory while the service runs, and restoring it
 * brings back every acknowledged event.
 */

const run = promisify(execFile);
const BATCHES = 30;
const PER_BATCH = 100;

function startProcess(dataDir: string, adminKey: string): Promise<{ code: number | null; output: string; url?: string; kill: () => void }> {
  const proc = spawn(process.execPath, nodeArgsFor('main.ts'), {
    env: { ...process.env, PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: dataDir, ANALYTICS_ADMIN_KEY: adminKey, ANALYTICS_QUIET: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  return new Promise((resolve) => {
    const on = (c: Buffer) => {
      out += c.toString();
      const m = /HTTP (http:\/\/\S+)/.exec(out);
      if (m) resolve({ code: null, output: out, url: m[1]!, kill: () => proc.kill('SIGKILL') });
    };
    proc.stdout!.on('data', on);
    proc.stderr!.on('data', on);
    proc.once('exit', (code) => resolve({ code, output: out, kill: () => {} }));
  });
}

test('flipped bytes in a copy of a real data dir: startup refuses naming the first bad sequence and both ways out; `analytics repair --yes` cuts the log there and the service starts with exactly the events before it; the backup restores every acknowledged event', async () => {
  const work = mkdtempSync(path.join(tmpdir(), 'analytics-damage-'));
  const svc = await startTestService({ ANALYTICS_SNAPSHOT_EVERY_EVENTS: '100000000' }, { dataDir: path.join(work, 'data') });
  try {
    const p = await createProject(svc.url, svc.adminKey);
    const key = p.keys.secret;
    for (let b = 0; b < BATCHES; b++) {
      const events = Array.from({ length: PER_BATCH }, (_, i) => pv(`/dmg-${b}-${i}-end`, { sessionId: `s${b}-${i}`, eventId: `id-${b}-${i}` }));
      assert.equal((await api(svc.url, '/analytics', { key, body: events })).status, 200);
    }
    const acked = BATCHES * PER_BATCH;
    const health = await api(svc.url, '/health');
    assert.equal(health.status, 200);
    assert.equal(health.body.log.ok, true);
    assert.equal(health.body.log.lastSeq, acked);

    // an online backup, from a second process, while the service runs
    const backupDir = path.join(work, 'backup');
    const { stdout } = await run(process.execPath, ['bin/analytics.js', 'backup', backupDir, '--data-dir', svc.dataDir, '--json']);
    assert.equal(JSON.parse(stdout).lastSeq, acked);
    await svc.stop();

    // a damaged copy: no snapshots (so startup replays the whole log), one byte changed inside batch 20's records
    const damaged = path.join(work, 'damaged');
    cpSync(svc.dataDir, damaged, { recursive: true });
    rmSync(path.join(damaged, 'snapshots'), { recursive: true, force: true });
    const file = path.join(damaged, 'analytics.lmdb');
    const bytes = readFileSync(file);
    // batch 20's entry as stored (compressed: its strings are not in the file as such), found by its bytes
    let stored!: StoredEntries;
    const reader = LogStore.open(damaged, 'commit', { readOnly: true, entries: (e) => (stored = e) });
    const entry = stored.storedEntry(20 * PER_BATCH + 1)!;
    await reader.close();
    const at = bytes.indexOf(entry.subarray(0, 32));
    assert.ok(at > 0, 'the entry is in the file');
    const inRecords = at + entry.length - 40;
    bytes[inRecords] = bytes[inRecords]! ^ 0x01;
    writeFileSync(file, bytes);
    const refused = await startProcess(damaged, svc.adminKey);
    refused.kill();
    assert.notEqual(refused.code, 0, `refused to start: ${refused.output}`);
    const firstBad = 20 * PER_BATCH + 1;
    assert.match(refused.output, new RegExp(`damaged at sequence ${firstBad}\\b`));
    assert.match(refused.output, /checksum mismatch/);
    assert.match(refused.output, /Way out \(either\): 1\. restore the newest backup/);
    assert.match(refused.output, new RegExp(`2\\. \`analytics repair --yes\` \\(explicit\\).*cuts the log at sequence ${firstBad}\\b`));
    // `analytics check` reads through the same verifying reader and names the same sequence
    const report = await check(damaged);
    assert.equal(report.ok, false);
    assert.ok(report.problems.some((p) => p.includes(`damaged at sequence ${firstBad}:`) && p.includes('checksum mismatch')), report.problems.join('\n'));

    // the second way out, explicit: `analytics repair` without --yes is a usage error and changes nothing
    const untouched = readFileSync(file);
    const listing = readdirSync(damaged).sort();
    const noYes = await run(process.execPath, ['bin/analytics.js', 'repair', '--data-dir', damaged]).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code: number; stderr: string }) => e,
    );
    assert.equal(noYes.code, 2, noYes.stderr);
    assert.match(noYes.stderr, /--yes/);
    assert.ok(readFileSync(file).equals(untouched), 'the data directory is unchanged');
    assert.deepEqual(readdirSync(damaged).sort(), listing);

    // a snapshot that counted past the damage (copied from the healthy dir) must not be used: the log is the truth
    cpSync(path.join(svc.dataDir, 'snapshots'), path.join(damaged, 'snapshots'), { recursive: true });
    const damaged2 = path.join(work, 'damaged2');
    cpSync(damaged, damaged2, { recursive: true });
    const said = await run(process.execPath, ['bin/analytics.js', 'repair', '--yes', '--data-dir', damaged2]);
    assert.match(said.stdout, new RegExp(`removed sequences ${firstBad}\\.\\.${acked} \\(${acked - firstBad + 1} record\\(s\\)\\): lost`));
    assert.match(said.stdout, new RegExp(`newest valid snapshot \\(through sequence ${acked}\\) had counted ${acked - firstBad + 1} of them; not used`));
    assert.match(said.stdout, /kept a copy of the damaged analytics\.lmdb and snapshots in .*damaged-/);
    const repaired = await run(process.execPath, ['bin/analytics.js', 'repair', '--yes', '--data-dir', damaged, '--json']);
    const r = JSON.parse(repaired.stdout);
    assert.equal(r.repaired, true);
    assert.equal(r.removedFrom, firstBad);
    assert.equal(r.removedTo, acked);
    assert.equal(r.lastSeq, firstBad - 1);
    assert.equal(r.snapshotLastSeq, acked, 'the stopped service wrote a snapshot through the last sequence');
    assert.equal(r.snapshotCovered, acked - firstBad + 1);
    assert.ok(readFileSync(path.join(r.keptAside, 'analytics.lmdb')).equals(untouched), 'the damaged file is kept aside as it was');
    const human = await run(process.execPath, ['bin/analytics.js', 'repair', '--yes', '--data-dir', damaged]);
    assert.match(human.stdout, new RegExp(`verified through sequence ${firstBad - 1}; nothing to repair`));
    const checked = await run(process.execPath, ['bin/analytics.js', 'check', '--data-dir', damaged, '--json']);
    assert.equal(JSON.parse(checked.stdout).ok, true, checked.stdout);
    const fixed = await startTestService({}, { dataDir: damaged, adminKey: svc.adminKey });
    try {
      const h = await api(fixed.url, '/health');
      assert.equal(h.status, 200);
      assert.equal(h.body.log.ok, true);
      assert.equal(h.body.log.lastSeq, firstBad - 1);
      assert.equal(await storedEvents(fixed.url, key), firstBad - 1, 'exactly the events before the damaged sequence');
      // the log continues where it now ends
      assert.equal((await api(fixed.url, '/analytics', { key, body: [pv('/after-repair', { sessionId: 'r' })] })).status, 200);
      assert.equal(await storedEvents(fixed.url, key), firstBad);
      // eventIds of removed records are forgotten (a resend counts again, the damaged batch's too); kept ones are not
      const resend = [pv('/dmg-20-50-end', { sessionId: 's20-50', eventId: 'id-20-50' }), pv('/dmg-25-0-end', { sessionId: 's25-0', eventId: 'id-25-0' }), pv('/dmg-5-0-end', { sessionId: 's5-0', eventId: 'id-5-0' })];
      assert.equal((await api(fixed.url, '/analytics', { key, body: resend })).status, 200);
      assert.equal(await storedEvents(fixed.url, key), firstBad + 2, 'the two removed events count again, the kept one is a duplicate');
    } finally {
      await fixed.stop();
    }

    // restore the backup: every acknowledged event is back
    const restored = path.join(work, 'restored');
    cpSync(backupDir, restored, { recursive: true });
    const again = await startTestService({}, { dataDir: restored, adminKey: svc.adminKey });
    try {
      assert.equal(await storedEvents(again.url, key), acked);
      const h = await api(again.url, '/health');
      assert.equal(h.body.log.verifiedRecords, acked, 'startup verified every record it replayed');
    } finally {
      await again.stop();
    }
  } finally {
    await svc.stop().catch(() => {});
    rmSync(work, { recursive: true, force: true });
  }
});
