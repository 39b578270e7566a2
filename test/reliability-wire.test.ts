import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { storedEvents, pv } from './contract-helpers.ts';
import { createProject, startTestService, type CreatedProject, type TestService } from './helpers.ts';

/** Issue 17, rows 6 and 7: leftover snapshot temporaries, and gzip request bodies. */

let svc: TestService;
let project: CreatedProject;

before(async () => {
  svc = await startTestService();
  project = await createProject(svc.url, svc.adminKey);
});
after(() => svc.destroy());

function post(body: Buffer | string, encoding: string | undefined, key = project.keys.secret): Promise<Response> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  if (encoding !== undefined) headers['content-encoding'] = encoding;
  return fetch(`${svc.url}/analytics`, { method: 'POST', headers, body: typeof body === 'string' ? body : new Uint8Array(body) });
}

describe('Content-Encoding on POST /analytics', () => {
  test('a gzip body is inflated and counted', async () => {
    const before = await storedEvents(svc.url, project.keys.secret);
    const events = Array.from({ length: 50 }, (_, i) => pv(`/gz${i}`, { sessionId: `gz${i}` }));
    const res = await post(gzipSync(JSON.stringify(events)), 'gzip');
    assert.equal(res.status, 200, await res.clone().text());
    assert.equal(((await res.json()) as { accepted: number }).accepted, 50);
    assert.equal(await storedEvents(svc.url, project.keys.secret), before + 50);
  });

  test('a plain JSON body labelled gzip is refused with 400, not read as JSON, and nothing is stored', async () => {
    const before = await storedEvents(svc.url, project.keys.secret);
    const res = await post(JSON.stringify(pv('/lie')), 'gzip');
    assert.equal(res.status, 400);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'invalid_request');
    assert.equal(await storedEvents(svc.url, project.keys.secret), before);
  });

  test('a zip bomb (a 60 KiB body inflating to 64 MiB) is cut off at 1 MiB of output with 413', async () => {
    const bomb = gzipSync(Buffer.alloc(64 * 1024 * 1024, 0x20));
    assert.ok(bomb.length < 100_000);
    const started = performance.now();
    const res = await post(bomb, 'gzip');
    assert.equal(res.status, 413);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'payload_too_large');
    assert.ok(performance.now() - started < 5000);
  });

  test('a gzip body that inflates to just over 1 MiB is 413; just under is read', async () => {
    const filler = (n: number) => JSON.stringify({ ...pv('/big'), eventParams: {} }).padEnd(n, ' ');
    assert.equal((await post(gzipSync(filler(1024 * 1024 + 1)), 'gzip')).status, 413);
    assert.equal((await post(gzipSync(filler(1024 * 1024 - 10)), 'gzip')).status, 200);
  });

  for (const enc of ['br', 'deflate', 'compress', 'gzip, br']) {
    test(`Content-Encoding: ${enc} is refused with 415 unsupported_media_type`, async () => {
      const res = await post(JSON.stringify(pv('/x')), enc);
      assert.equal(res.status, 415);
      assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'unsupported_media_type');
    });
  }

  test('Content-Encoding: identity is the same as none', async () => {
    assert.equal((await post(JSON.stringify(pv('/id')), 'identity')).status, 200);
  });
});

describe('leftover snapshot temporaries', () => {
  test('a .tmp file left by a kill during a snapshot write is removed at the next start', async () => {
    const dir = path.join(svc.dataDir, 'snapshots');
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, 'snapshot-0000000000000042.bin.tmp'), Buffer.alloc(1 << 20, 1));
    svc = await svc.restart();
    project = project; // keys survive the restart
    assert.deepEqual(readdirSync(dir).filter((f) => f.endsWith('.tmp')), []);
    assert.ok((await storedEvents(svc.url, project.keys.secret)) > 0, 'and the data is intact');
  });
});

describe('the TypeScript client compresses large batches', () => {
  test('a batch over the threshold is sent with Content-Encoding: gzip and counted; a small one is sent plain', async () => {
    const { createClient } = await import('../clients/typescript/src/index.ts');
    const { GZIP_THRESHOLD_BYTES } = await import('../clients/typescript/src/gzip-body.ts');
    const seen: Array<{ encoding: string | null; bytes: number }> = [];
    const spy: typeof fetch = async (input, init) => {
      const h = new Headers(init?.headers);
      const b = init?.body;
      seen.push({ encoding: h.get('content-encoding'), bytes: typeof b === 'string' ? b.length : (b as Uint8Array).byteLength });
      return fetch(input, init);
    };
    const before = await storedEvents(svc.url, project.keys.secret);
    const client = createClient({ apiKey: project.keys.secret, projectId: project.project.id, endpoint: `${svc.url}/analytics`, fetch: spy, flushIntervalMs: 60_000 });
    for (let i = 0; i < 100; i++) client.track('client_gzip', { i, note: 'x'.repeat(40) }, { sessionId: `c${i}` });
    await client.flush();
    client.track('client_plain');
    await client.shutdown();
    const last = seen.pop()!;
    assert.ok(seen.length >= 1);
    for (const s of seen) {
      assert.equal(s.encoding, 'gzip');
      assert.ok(s.bytes < GZIP_THRESHOLD_BYTES, `compressed to ${s.bytes} bytes`);
    }
    assert.equal(last.encoding, null);
    assert.equal(await storedEvents(svc.url, project.keys.secret), before + 101);
  });
});
