import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { api, startTestService, todayUtc, type TestService } from './helpers.ts';

const BIN = fileURLToPath(new URL('../bin/analytics.js', import.meta.url));

let svc: TestService;
before(async () => {
  svc = await startTestService();
});
after(() => svc.destroy());

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the real `analytics` bin in a child process (stdout/stderr are pipes, so no TTY: plain progress lines). */
function cli(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      { env: { PATH: process.env.PATH ?? '', ANALYTICS_URL: svc.url, ANALYTICS_KEY: svc.adminKey, ...env }, timeout: 60_000 },
      (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr }),
    );
  });
}

const json = (r: Run) => {
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout);
};

describe('analytics CLI against a running service', () => {
  let projectId = '';
  let secret = '';

  test('projects create prints the keys once; list and update go through the HTTP calls', async () => {
    const created = json(await cli(['projects', 'create', '--name', 'Shop', '--origin', 'https://shop.example', '--timezone', 'Europe/Berlin', '--json']));
    projectId = created.project.id;
    secret = created.keys.secret;
    assert.match(secret, /^sk_/);
    assert.deepEqual(created.project.allowed_origins, ['https://shop.example']);
    const listed = json(await cli(['projects', 'list', '--json']));
    assert.ok(listed.projects.some((p: { id: string }) => p.id === projectId));
    const text = await cli(['projects', 'list']);
    assert.match(text.stdout, new RegExp(`${projectId}\\s+Shop\\s+Europe/Berlin`));
    const updated = json(await cli(['projects', 'update', projectId, '--name', 'Shop 2', '--quota', '0', '--json']));
    assert.equal(updated.project.name, 'Shop 2');
    assert.equal(updated.project.monthly_quota, 0);
  });

  test('keys create, list and rotate (with and without --overlap) keep exactly the promised keys working', async () => {
    const read = json(await cli(['keys', 'create', projectId, '--type', 'read', '--json']));
    assert.match(read.key, /^rk_/);
    const listed = json(await cli(['keys', 'list', projectId, '--json']));
    assert.deepEqual(listed.keys.map((k: { type: string }) => k.type).sort(), ['publishable', 'read', 'secret']);
    // rotate with an overlap: the old key still works and shows an expiry about an hour away
    const rotated = json(await cli(['keys', 'rotate', projectId, read.id, '--overlap', '1h', '--json']));
    assert.match(rotated.key.key, /^rk_/);
    const expiry = Date.parse(rotated.old.expires_at) - Date.now();
    assert.ok(expiry > 3_500_000 && expiry <= 3_600_000, String(expiry));
    assert.equal((await api(svc.url, '/metrics', { key: read.key })).status, 200);
    // rotate without overlap: the old key is refused at once
    const again = json(await cli(['keys', 'rotate', projectId, rotated.key.id, '--json']));
    assert.equal(again.old.revoked, true);
    assert.equal((await api(svc.url, '/metrics', { key: rotated.key.key })).status, 401);
    assert.equal((await api(svc.url, '/metrics', { key: again.key.key })).status, 200);
  });

  test('import sends an NDJSON file in batches; a re-run counts nothing twice', async () => {
    const file = path.join(svc.dataDir, 'events.ndjson');
    const start = Date.now() - 60_000;
    const lines = Array.from({ length: 1203 }, (_, i) => JSON.stringify({ event: 'page_view', url: `https://shop.example/p${i % 7}`, sessionId: `s${i % 50}`, timestamp: start + i }));
    lines.splice(10, 0, ''); // blank lines are skipped
    writeFileSync(file, `${lines.join('\n')}\n`);
    const first = await cli(['import', '--project', projectId, file, '--key', secret, '--json']);
    assert.equal(json(first).sent, 1203);
    assert.match(first.stderr, /^import: 100% /m, 'plain progress lines when not on a terminal');
    // the project counts days in Berlin: read from the Berlin date the events lie on (a minute ago) to its today
    const berlin = (t: number) => new Intl.DateTimeFormat('en-CA', { timeZone: 'Europe/Berlin' }).format(t);
    const metrics = async () => (await api(svc.url, `/metrics?from=${berlin(start)}&to=${berlin(Date.now())}`, { key: secret })).body.pageviews as number;
    assert.equal(await metrics(), 1203);
    assert.equal(json(await cli(['import', '--project', projectId, file, '--key', secret, '--json'])).sent, 1203);
    assert.equal(await metrics(), 1203);
  });

  test('import --from plausible reads Plausible CE\'s raw export: UTM medium and campaign and every custom property kept; a re-run counts nothing twice', async () => {
    const created = json(await cli(['projects', 'create', '--name', 'From Plausible', '--json'])) as { project: { id: string }; keys: { secret: string } };
    const p = created.project.id;
    const sk = created.keys.secret;
    const file = path.join(svc.dataDir, 'events_v2.csv');
    const day = new Date(Date.now() - 2 * 86_400_000).toISOString().slice(0, 10);
    writeFileSync(
      file,
      [
        'name,timestamp,hostname,pathname,referrer,referrer_source,utm_medium,utm_campaign,session_id,user_id,country_code,screen_size,browser,operating_system,meta.key,meta.value',
        `pageview,${day} 10:00:00,shop.example,/,,Newsletter,email,june-digest,111,900,DE,Desktop,Firefox,Linux,[],[]`,
        `Signup,${day} 10:01:00,shop.example,/signup,,Newsletter,email,june-digest,111,900,DE,Desktop,Firefox,Linux,"['plan','seats']","['pro','3']"`,
        `pageview,${day} 11:00:00,shop.example,/pricing,https://www.google.com/,Google,,,222,901,US,Mobile,Safari,iOS,[],[]`,
      ].join('\n') + '\n',
    );
    const first = json(await cli(['import', '--project', p, '--from', 'plausible', file, '--key', sk, '--json']));
    assert.equal(first.sent, 3);
    const ask = async (body: object) => (await api(svc.url, '/query', { key: sk, body: { from: day, to: day, ...body } })).body;
    assert.deepEqual((await ask({ metrics: ['visits'], dimensions: ['utmCampaign'] })).results, [{ dimensions: ['june-digest'], metrics: [1] }]);
    assert.deepEqual((await ask({ metrics: ['visits'], dimensions: ['utmMedium'] })).results, [{ dimensions: ['email'], metrics: [1] }]);
    assert.deepEqual((await ask({ metrics: ['events'], dimensions: ['prop:plan', 'prop:seats'] })).results, [{ dimensions: ['pro', '3'], metrics: [1] }]);
    assert.deepEqual((await ask({ metrics: ['visits'], dimensions: ['source'] })).results.map((r: { dimensions: string[] }) => r.dimensions[0]).sort(), ['Google', 'Newsletter']);
    assert.equal(json(await cli(['import', '--project', p, '--from', 'plausible', file, '--key', sk, '--json'])).sent, 3);
    assert.deepEqual((await ask({ metrics: ['events'] })).totals, [3], 'the re-run counted nothing twice');
    const wrong = await cli(['import', '--project', p, '--from', 'matomo', file, '--key', sk]);
    assert.notEqual(wrong.code, 0);
    assert.match(wrong.stderr, /plausible, umami, ga4|choices/);
  });

  test('export writes daily rows as CSV and NDJSON, and the stored events with --raw', async () => {
    // The project counts days in Berlin, ahead of UTC: from 23:00 (or 22:00) UTC its today is UTC's tomorrow, where the
    // events just imported lie. Counts are read up to the project's today; --to's default is today in UTC.
    const today = todayUtc();
    const last = new Intl.DateTimeFormat('en-CA', { timeZone: 'Europe/Berlin' }).format(new Date());
    const from = new Date(Date.now() - 2 * 86_400_000).toISOString().slice(0, 10);
    const csv = await cli(['export', '--project', projectId, '--from', from, '--to', last]);
    assert.equal(csv.code, 0, csv.stderr);
    const rows = csv.stdout.trim().split('\n');
    assert.equal(rows[0], 'date,users,sessions,pageviews,bounce_rate');
    assert.ok(rows.length >= 3);
    const utc = await cli(['export', '--project', projectId, '--from', from, '--to', today]);
    const noTo = await cli(['export', '--project', projectId, '--from', from]);
    assert.equal(noTo.code, 0, noTo.stderr);
    assert.equal(noTo.stdout, utc.stdout, '--to defaults to today (UTC)');
    const nd = await cli(['export', '--project', projectId, '--from', from, '--to', last, '--format', 'ndjson', '--key', secret]);
    const days = nd.stdout.trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(days.reduce((n: number, d: { pageviews: number }) => n + d.pageviews, 0), 1203);
    const raw = await cli(['export', '--project', projectId, '--from', from, '--to', last, '--raw', '--format', 'ndjson', '--data-dir', svc.dataDir]);
    assert.equal(raw.code, 0, raw.stderr);
    const events = raw.stdout.trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(events.length, 1203);
    assert.ok(events.every((e: { event: string; eventId: string }) => e.event === 'page_view' && e.eventId.startsWith('imp_')));
  });

  test('exit codes: 1 with the message on stderr for a refused request or bad input, 2 for a usage error', async () => {
    const refused = await cli(['projects', 'list', '--key', 'sk_AAAAAAAAAAAAAAAAAAAAAAAAAAAA']);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /401 unauthorized/);
    assert.equal(refused.stdout, '');
    const unconfirmed = await cli(['projects', 'delete', projectId]);
    assert.equal(unconfirmed.code, 1);
    assert.match(unconfirmed.stderr, /--yes/);
    assert.equal((await cli(['projects', 'frobnicate'])).code, 2);
    assert.equal((await cli(['keys', 'create', projectId, '--type', 'admin'])).code, 2);
    assert.equal((await cli(['export', '--project', projectId])).code, 2);
    const importHelp = await cli(['import', '--help']);
    assert.match(importHelp.stdout.replace(/\s+/g, ' '), /sk_ key or an ak_ admin key \(POST \/projects\/\{id\}\/history takes both; pk_ and rk_ are refused\)/);
    const help = await cli(['keys', 'rotate', '--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /--overlap/);
  });

  test('check passes on a healthy data directory, rebuild re-folds it, and check lists a damaged snapshot (exit 1)', async () => {
    await svc.stop();
    const ok = await cli(['check'], { ANALYTICS_DATA_DIR: svc.dataDir }); // the data-dir rule: --data-dir, else the variable, else ./storage
    assert.equal(ok.code, 0, ok.stderr + ok.stdout);
    assert.match(ok.stdout, /^ok: \d+ log entries in sequence, 1 snapshot\(s\) verified/);
    assert.match(ok.stderr, /^log: 100% /m, 'plain progress lines when stderr is not a terminal');
    assert.doesNotMatch(ok.stderr, /█/);
    // On a terminal (a pty from util-linux `script`): a progress bar instead of lines.
    const tty = await new Promise<string>((resolve, reject) =>
      execFile('script', ['-qec', `${process.execPath} ${BIN} check --data-dir ${svc.dataDir}`, '/dev/null'], { timeout: 60_000 }, (err, stdout) =>
        err ? reject(err) : resolve(stdout),
      ),
    );
    assert.match(tty, /fold \[█+\] 100%/);
    assert.match(tty, /ok: \d+ log entries in sequence/);
    const rebuilt = json(await cli(['rebuild', '--data-dir', svc.dataDir, '--json']));
    assert.equal(rebuilt.records, 1203 + 3, 'the NDJSON import\'s 1,203 events and the Plausible import\'s 3');
    assert.match(rebuilt.snapshot, /snapshot-\d{16}\.bin$/);
    const snaps = readdirSync(path.join(svc.dataDir, 'snapshots'));
    assert.equal(snaps.length, 1);
    const file = path.join(svc.dataDir, 'snapshots', snaps[0]!);
    const bytes = readFileSync(file);
    bytes[bytes.length - 5] = bytes[bytes.length - 5]! ^ 0xff;
    writeFileSync(file, bytes);
    const bad = await cli(['check', '--data-dir', svc.dataDir, '--json']);
    assert.equal(bad.code, 1);
    const report = JSON.parse(bad.stdout);
    assert.equal(report.ok, false);
    assert.ok(report.problems.some((p: string) => /checksum mismatch/.test(p)), bad.stdout);
    assert.match(bad.stderr, /check found 1 problem/);
    // the service still starts (a damaged snapshot is skipped for a full replay) and agrees with the log
    svc = await svc.restart();
    assert.equal((await api(svc.url, '/metrics', { key: secret })).body.pageviews, 1203);
  });
});
