import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import { Client, credentials } from '@grpc/grpc-js';
import { api, createProject } from './helpers.ts';
import { startServiceProcess, type ServiceProcess } from './service-process.ts';

/**
 * The service as `npm start` runs it: dist/, a bundle (bin/build.mjs; `npm test` builds it first). A bundle moves
 * modules away from the files they resolve beside them and from the modules they import only when first asked, and
 * the tests that start the service in their own process run src/, where both hold by construction. So here one
 * process is asked for each: the version (package.json), the tracker and the dashboard (their TypeScript, built on
 * request), countries (the geo database package), the MCP face, operator metrics and gRPC reflection (loaded lazily),
 * and at SIGTERM the snapshot written by its worker thread; the start itself ran the LMDB walk's child process.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const UA = 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36';
/** How long the startup line naming the metrics port is waited for after the HTTP and gRPC addresses. */
const STARTUP_LINE_MS = 2_000;

/** grpc.reflection.v1 list_services: the raw response, encoded and decoded with the protobuf wire primitives. */
async function reflectionList(address: string): Promise<Buffer> {
  const raw = new Client(address, credentials.createInsecure());
  try {
    const call = raw.makeBidiStreamRequest(
      '/grpc.reflection.v1.ServerReflection/ServerReflectionInfo',
      (b: Uint8Array) => Buffer.from(b),
      (b: Buffer) => b,
    );
    const answer = once(call, 'data') as Promise<[Buffer]>;
    call.write(new BinaryWriter().tag(7, WireType.LengthDelimited).string('*').finish()); // list_services = 7
    call.end();
    return (await answer)[0];
  } finally {
    raw.close();
  }
}

async function metricsUrl(child: ServiceProcess): Promise<string> {
  const until = Date.now() + STARTUP_LINE_MS;
  for (;;) {
    const m = /operator metrics (http:\/\/\S+)/.exec(child.output());
    if (m) return m[1]!;
    assert.ok(Date.now() < until, `no metrics address in: ${child.output()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('the built service reaches the files beside its modules and the modules it loads when first asked', async () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'analytics-built-'));
  const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
  const child = await startServiceProcess(dataDir, adminKey, { METRICS_PORT: '0', TRUST_PROXY: '1' });
  try {
    const version = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
    assert.equal((await api(child.url, '/health')).body.version, version);

    const script = await fetch(`${child.url}/script.js`);
    assert.equal(script.status, 200);
    assert.ok((await script.text()).length > 100, 'the tracker is built from its source');

    const page = await fetch(`${child.url}/dashboard`);
    assert.equal(page.status, 200);
    const assets = [...new Set((await page.text()).match(/app\.[0-9a-f]{16}\.(js|css)/g) ?? [])];
    assert.equal(assets.length, 2, 'the page names its script and stylesheet');
    for (const asset of assets) assert.equal((await fetch(`${child.url}/dashboard/${asset}`)).status, 200, asset);

    const { keys } = await createProject(child.url, adminKey);
    const sent = await api(child.url, '/analytics', { key: keys.secret, headers: { 'user-agent': UA, 'x-forwarded-for': '8.8.8.8' }, body: { event: 'page_view', url: 'https://site.example/' } });
    assert.equal(sent.status, 200);
    assert.deepEqual((await api(child.url, '/metrics', { key: keys.secret })).body.countries, { US: 1 });

    const mcp = await fetch(`${child.url}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${adminKey}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    assert.equal(mcp.status, 200);
    assert.match(await mcp.text(), /list_projects/);

    const metrics = await fetch(await metricsUrl(child));
    assert.equal(metrics.status, 200);
    assert.match(await metrics.text(), /^# HELP /m);

    const listed = (await reflectionList(child.grpc)).toString('latin1');
    assert.ok(listed.includes('analytics.v1.AnalyticsService') && listed.includes('grpc.health.v1.Health'), listed);

    const exited = once(child.proc, 'exit') as Promise<[number | null]>;
    child.proc.kill('SIGTERM');
    assert.equal((await exited)[0], 0, child.output());
    const snapshots = readdirSync(path.join(dataDir, 'snapshots'));
    assert.ok(snapshots.some((f) => /^snapshot-\d+\.bin$/.test(f)), `snapshot written: ${snapshots.join(', ')}`);
  } finally {
    child.proc.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  }
});
