import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { MAGIC } from '../src/store/files/snapshot-format.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';
import { pv, storedEvents } from './contract-helpers.ts';
import { api, createProject, startTestService } from './helpers.ts';
import { startServiceProcess } from './service-process.ts';
import { nodeArgsFor } from '../bin/dist.mjs';

/**
 * Damage to the store's own files is named, never silent: one damaged remembered eventId no longer makes every
 * remembered id forgotten (the table is checked against the log's last 48 h and rebuilt from it).
 */

const BATCHES = 10;
const PER_BATCH = 100;
const idOf = (b: number, i: number) => `evt-${b}-${i}-${'0123456789abcdef'.repeat(2)}`;
const batchOf = (b: number) => Array.from({ length: PER_BATCH }, (_, i) => pv(`/d-${b}-${i}`, { sessionId: `s${b}-${i}`, eventId: idOf(b, i) }));

/** Runs a command to its end (or to the service's address line, then kills it): exit code, signal and output. */
function runToEnd(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }> {
  const proc = spawn(process.execPath, args, { env: { ...process.env, PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_QUIET: '0', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const on = (c: Buffer) => {
    out += c.toString();
    if (/HTTP http:\/\//.test(out)) proc.kill('SIGKILL'); // it started: the test reports that below
  };
  proc.stdout!.on('data', on);
  proc.stderr!.on('data', on);
  return new Promise((resolve) => proc.once('close', (code, signal) => resolve({ code, signal, output: out })));
}

async function waitFor(output: () => string, re: RegExp, ms = 15_000): Promise<string> {
  const until = Date.now() + ms;
  for (;;) {
    const m = re.exec(output());
    if (m) return m[0];
    if (Date.now() > until) throw new Error(`no line matching ${re} in: ${output().slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Changes every copy of `id` in `bytes` (a page may keep a stale copy in its free space), each next to its project. */
function eachCopy(bytes: Buffer, id: Buffer, projectId: string, change: (at: number) => void): number {
  let copies = 0;
  for (let at = bytes.indexOf(id); at >= 0; at = bytes.indexOf(id, at + 1)) {
    assert.ok(bytes.subarray(at - 40, at).includes(Buffer.from(projectId)), 'the remembered id, next to its project');
    change(at);
    copies++;
  }
  return copies;
}

test('one stored eventId damaged in a copy of a real data dir: the service names the damaged record, rebuilds the ids from the log, and a resend of every acknowledged batch counts nothing twice', async () => {
  const work = mkdtempSync(path.join(tmpdir(), 'analytics-idsdamage-'));
  const svc = await startTestService({ ANALYTICS_SNAPSHOT_EVERY_EVENTS: '100000000' }, { dataDir: path.join(work, 'data') });
  let child: Awaited<ReturnType<typeof startServiceProcess>> | undefined;
  try {
    const p = await createProject(svc.url, svc.adminKey);
    const key = p.keys.secret;
    for (let b = 0; b < BATCHES; b++) assert.equal((await api(svc.url, '/analytics', { key, body: batchOf(b) })).status, 200);
    await svc.stop();

    const damaged = path.join(work, 'damaged');
    cpSync(svc.dataDir, damaged, { recursive: true });
    rmSync(path.join(damaged, 'snapshots'), { recursive: true, force: true });
    const file = path.join(damaged, 'analytics.lmdb');
    const bytes = readFileSync(file);
    // the remembered id's key is the project id and the eventId side by side (the log holds its ids compressed)
    // (a page may hold a stale copy of a record in its free space: every copy is damaged)
    const id = Buffer.from(idOf(5, 50));
    // 16 bytes: the id's last 8 and the receive time stored after it
    const copies = eachCopy(bytes, id, p.project.id, (at) => {
      for (let i = at + id.length - 8; i < at + id.length + 8; i++) bytes[i] = bytes[i]! ^ 0xff;
    });
    assert.ok(copies > 0, 'the eventId is in the file');
    writeFileSync(file, bytes);

    child = await startServiceProcess(damaged, svc.adminKey);
    const named = await waitFor(child.output, /remembered eventIds: 1 damaged record\(s\) in \S*analytics\.lmdb \(table event_ids\) skipped[^\n]*/);
    assert.match(named, /rebuilding the table from the log/);
    // resent at once: the rebuild may still be running, and writes wait for it
    for (let b = 0; b < BATCHES; b++) {
      assert.equal((await api(child.url, '/analytics', { key, body: batchOf(b) })).status, 200);
      assert.equal(await storedEvents(child.url, key), BATCHES * PER_BATCH, `batch ${b} was acknowledged before: nothing counted again`);
    }
    assert.match(await waitFor(child.output, /remembered eventIds: checked against \d+ log records[^\n]*/), /[1-9]\d* missing id\(s\) rebuilt from the log/);
    assert.equal(await storedEvents(child.url, key), BATCHES * PER_BATCH, 'totals unchanged');
    const exited = once(child.proc, 'exit');
    child.proc.kill('SIGTERM');
    await exited;
    child = undefined;
    // The start removed the damaged record from LMDB: a pass over the table finds nothing left to remove.
    const store = LogStore.open(damaged, 'commit');
    try {
      assert.equal(await store.openRememberedIds().expire(Date.now()), 0);
    } finally {
      await store.close();
    }
  } finally {
    child?.proc.kill('SIGKILL');
    rmSync(work, { recursive: true, force: true });
  }
});

/** Starts the service on `dir` and resolves at its first 200 on /health (the moment a client may send again). */
async function startedAndHealthy(dir: string, adminKey: string): Promise<Awaited<ReturnType<typeof startServiceProcess>>> {
  const child = await startServiceProcess(dir, adminKey);
  for (;;) {
    const ok = await fetch(`${child.url}/health`).then((r) => r.arrayBuffer().then(() => r.ok), () => false);
    if (ok) return child;
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** The reported case: 35,000 events with ids, so the startup check of the remembered ids takes longer than a client's first request. */
const BIG_BATCHES = 70;
const BIG_BATCH = 500;
const bigId = (b: number, i: number) => `dmgid-${b}-${String(i).padStart(4, '0')}`;
const bigBatch = (b: number) => Array.from({ length: BIG_BATCH }, (_, i) => pv(`/d-${b}-${i % 50}`, { sessionId: `s${b}-${i % 100}`, eventId: bigId(b, i) }));

test('a remembered eventId whose key is damaged (not detectable as damage): a resend sent the moment /health answers counts nothing twice, 20 starts in a row', async () => {
  const work = mkdtempSync(path.join(tmpdir(), 'analytics-idskey-'));
  const svc = await startTestService({ ANALYTICS_SNAPSHOT_EVERY_EVENTS: '100000000' }, { dataDir: path.join(work, 'data') });
  let child: Awaited<ReturnType<typeof startServiceProcess>> | undefined;
  try {
    const p = await createProject(svc.url, svc.adminKey, { monthly_quota: 0 });
    const key = p.keys.secret;
    for (let b = 0; b < BIG_BATCHES; b++) assert.equal((await api(svc.url, '/analytics', { key, body: bigBatch(b) })).status, 200);
    await svc.stop();
    const template = path.join(work, 'template');
    cpSync(svc.dataDir, template, { recursive: true });
    rmSync(path.join(template, 'snapshots'), { recursive: true, force: true });
    const file = path.join(template, 'analytics.lmdb');
    const bytes = readFileSync(file);
    // every copy of one id's key changed so that it still sorts between its neighbours ("dmgid-2-0100" becomes
    // "dmgid-2-00:0", between -0099 and -0101) and its receive time is intact: LMDB's pages stay sound, the key decodes
    // as a [project, eventId] pair, nothing shows it as damaged; only the id is gone
    const id = Buffer.from(bigId(2, 100));
    const copies = eachCopy(bytes, id, p.project.id, (at) => bytes.write('00:0', at + id.length - 4, 'latin1'));
    assert.ok(copies > 0);
    writeFileSync(file, bytes);
    for (let run = 0; run < 20; run++) {
      const dir = path.join(work, `run-${run}`);
      cpSync(template, dir, { recursive: true });
      child = await startedAndHealthy(dir, svc.adminKey);
      // at once: the startup check of the remembered ids against the log may still be running
      assert.equal((await api(child.url, '/analytics', { key, body: bigBatch(2) })).status, 200, child.output().slice(-500));
      assert.equal(await storedEvents(child.url, key), BIG_BATCHES * BIG_BATCH, `start ${run + 1}: the resend was counted again`);
      const exited = once(child.proc, 'exit');
      child.proc.kill('SIGKILL');
      await exited;
      child = undefined;
      rmSync(dir, { recursive: true, force: true });
    }
  } finally {
    child?.proc.kill('SIGKILL');
    rmSync(work, { recursive: true, force: true });
  }
});

/** Damage to LMDB's own pages, each made in a copy of a real data directory (kept identical otherwise). */
const DAMAGES: Array<[string, (b: Buffer) => Buffer]> = [
  ['meta page 0, bytes 16..80 flipped', (b) => {
    for (let i = 16; i < 80; i++) b[i] = b[i]! ^ 0xff;
    return b;
  }],
  ['the file cut to half', (b) => b.subarray(0, Math.floor(b.length / 2))],
  ['the 4 KiB page holding an eventId flipped', (b) => {
    const page = Math.floor(b.indexOf(Buffer.from(idOf(5, 50))) / 4096) * 4096;
    assert.ok(page > 0);
    for (let i = page; i < page + 4096; i++) b[i] = b[i]! ^ 0xff;
    return b;
  }],
];

test('damaged LMDB pages (meta page, cut short, a garbled page): the service refuses to start naming the file and both ways out, exit 1, no crash; `analytics check` finds the same damage', async () => {
  const work = mkdtempSync(path.join(tmpdir(), 'analytics-lmdbdamage-'));
  const svc = await startTestService({ ANALYTICS_SNAPSHOT_EVERY_EVENTS: '100000000' }, { dataDir: path.join(work, 'data') });
  try {
    const p = await createProject(svc.url, svc.adminKey);
    for (let b = 0; b < BATCHES; b++) assert.equal((await api(svc.url, '/analytics', { key: p.keys.secret, body: batchOf(b) })).status, 200);
    await svc.stop();
    for (const [name, damage] of DAMAGES) {
      const dir = path.join(work, name.replace(/\W+/g, '-'));
      cpSync(svc.dataDir, dir, { recursive: true });
      const file = path.join(dir, 'analytics.lmdb');
      writeFileSync(file, damage(readFileSync(file)));
      const started = await runToEnd(nodeArgsFor('main.ts'), { ANALYTICS_DATA_DIR: dir, ANALYTICS_ADMIN_KEY: svc.adminKey });
      assert.equal(started.signal, null, `${name}: no crash`);
      assert.equal(started.code, 1, `${name}: refused, exit 1: ${started.output}`);
      assert.ok(started.output.includes(`${file} is damaged`), `${name}: names the file: ${started.output}`);
      assert.match(started.output, /restore the newest backup \(`analytics backup DEST`/, name);
      assert.match(started.output, /npx analytics repair --yes/, name);
      assert.doesNotMatch(started.output, /core dumped|Segmentation|Bus error|Assertion|\n\s+at /, `${name}: one message, no crash output or stack`);
      const checked = await runToEnd(['bin/analytics.js', 'check', '--data-dir', dir]);
      assert.equal(checked.code, 1, `${name}: check exits 1: ${checked.output}`);
      assert.ok(checked.output.includes(`lmdb: ${file} is damaged`), `${name}: check lists it: ${checked.output}`);
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

test('a damaged snapshot header: the log names the snapshot file and that it was skipped, and the log replay counts every event', async () => {
  const work = mkdtempSync(path.join(tmpdir(), 'analytics-snapdamage-'));
  const svc = await startTestService({ ANALYTICS_SNAPSHOT_EVERY_EVENTS: '100000000' }, { dataDir: path.join(work, 'data') });
  let child: Awaited<ReturnType<typeof startServiceProcess>> | undefined;
  try {
    const p = await createProject(svc.url, svc.adminKey);
    for (let b = 0; b < 2; b++) assert.equal((await api(svc.url, '/analytics', { key: p.keys.secret, body: batchOf(b) })).status, 200);
    await svc.stop(); // writes the final snapshot
    const dir = path.join(svc.dataDir, 'snapshots');
    const names = readdirSync(dir).filter((f) => /^snapshot-\d+\.bin$/.test(f));
    assert.ok(names.length > 0, `a snapshot was written: ${readdirSync(dir).join(', ')}`);
    const file = path.join(dir, names.sort().at(-1)!);
    const bytes = readFileSync(file);
    bytes.writeUInt32LE(0xffffff00, MAGIC.length); // the header frame's length
    writeFileSync(file, bytes);
    child = await startServiceProcess(svc.dataDir, svc.adminKey);
    assert.equal(await storedEvents(child.url, p.keys.secret), 2 * PER_BATCH);
    assert.ok(child.output().includes(`snapshot ${file} skipped`), child.output());
    assert.match(child.output(), /damaged: 4294967040 bytes are asked for at byte \d+, but the file ends at byte/);
    assert.doesNotMatch(child.output(), /The value of "length" is out of range/);
  } finally {
    child?.proc.kill('SIGKILL');
    rmSync(work, { recursive: true, force: true });
  }
});

test('a damaged sealed column segment: a question over its day is refused naming the file, the segment and `analytics rebuild`; ingestion goes on; after the rebuild it answers as before', async () => {
  const work = mkdtempSync(path.join(tmpdir(), 'analytics-segdamage-'));
  const dataDir = path.join(work, 'data');
  let svc = await startTestService({}, { dataDir });
  try {
    const p = await createProject(svc.url, svc.adminKey);
    const key = p.keys.secret;
    for (let b = 0; b < 2; b++) assert.equal((await api(svc.url, '/analytics', { key, body: batchOf(b) })).status, 200);
    const ask = () => api(svc.url, '/query', { key, body: { metrics: ['events', 'visits'] } });
    const before = await ask();
    assert.equal(before.status, 200);
    assert.deepEqual(before.body.totals, [2 * PER_BATCH, 2 * PER_BATCH]);
    await svc.stop(); // seals the open segments into columns.lmdb
    const file = path.join(dataDir, 'columns.lmdb');
    const bytes = readFileSync(file);
    let copies = 0;
    // every copy of a segment (its magic 'ACOL'): one byte of its meta flipped, so its checksum no longer holds
    for (let at = bytes.indexOf(Buffer.from('ACOL')); at >= 0; at = bytes.indexOf(Buffer.from('ACOL'), at + 1)) {
      bytes[at + 40] = bytes[at + 40]! ^ 0x01;
      copies++;
    }
    assert.ok(copies > 0, 'a sealed segment is in the file');
    writeFileSync(file, bytes);

    svc = await startTestService({}, { dataDir, adminKey: svc.adminKey });
    const refused = await ask();
    assert.equal(refused.status, 503, JSON.stringify(refused.body));
    assert.match(refused.body.error.message, /columns\.lmdb is damaged: the column segment of project p_\S+, day \d{4}-\d{2}-\d{2} \(no\. \d+\): checksum mismatch/);
    assert.match(refused.body.error.message, /npx analytics rebuild/);
    // the day aggregates and ingestion do not depend on the damaged segment
    assert.equal((await api(svc.url, '/analytics', { key, body: batchOf(2) })).status, 200);
    assert.equal(await storedEvents(svc.url, key), 3 * PER_BATCH);
    await svc.stop();

    const rebuilt = await runToEnd(['bin/analytics.js', 'rebuild', '--data-dir', dataDir]);
    assert.equal(rebuilt.code, 0, rebuilt.output);
    svc = await startTestService({}, { dataDir, adminKey: svc.adminKey });
    const after = await ask();
    assert.equal(after.status, 200, JSON.stringify(after.body));
    assert.deepEqual(after.body.totals, [3 * PER_BATCH, 3 * PER_BATCH], 'every event, folded again from the log');
  } finally {
    await svc.destroy().catch(() => {});
    rmSync(work, { recursive: true, force: true });
  }
});
