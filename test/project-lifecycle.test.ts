import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { LogRecord } from '../src/core/types.ts';
import { check } from '../src/engine/maintenance.ts';
import { AnalyticsClient } from '../src/grpc/client.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';
import { assertError } from './contract-helpers.ts';
import { api, createProject, startTestService, type TestService } from './helpers.ts';

let svc: TestService;

before(async () => {
  svc = await startTestService();
});
after(() => svc.destroy());

const pv = (url = 'https://a.example/') => ({ event: 'page_view', url, sessionId: 's1' });

/** Every file under a directory, recursively. */
function allFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name);
    return statSync(full).isDirectory() ? allFiles(full) : [full];
  });
}

function filesContaining(dir: string, needle: string): string[] {
  const bytes = Buffer.from(needle);
  return allFiles(dir).filter((f) => readFileSync(f).includes(bytes));
}

describe('PATCH /projects/{id}', () => {
  test('changes only the fields sent, with the validation of creation', async () => {
    const p = await createProject(svc.url, svc.adminKey, { name: 'Before', allowed_origins: ['https://a.example'] });
    const r = await api(svc.url, `/projects/${p.project.id}`, {
      method: 'PATCH',
      key: p.keys.secret,
      body: { name: 'After', allowed_origins: ['https://B.example:443/'], tracked_props: ['plan'] },
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.project.name, 'After');
    assert.deepEqual(r.body.project.allowed_origins, ['https://b.example']);
    assert.deepEqual(r.body.project.tracked_props, ['plan']);
    assert.equal(r.body.project.timezone, 'UTC');
    const listed = await api(svc.url, '/projects', { key: p.keys.secret });
    assert.equal(listed.body.projects[0].name, 'After');
    // the new origin rule applies at once
    const refused = await api(svc.url, '/analytics', { key: p.keys.publishable, body: pv(), headers: { origin: 'https://a.example' } });
    assertError(refused, 403, 'forbidden');
  });

  test('refuses timezone, unknown fields and invalid values with 400 invalid_request', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    for (const body of [{ timezone: 'Europe/Berlin' }, { colour: 'red' }, { allowed_origins: ['https://a.example/path'] }, { tracked_props: Array(11).fill('k') }, { monthly_quota: -1 }]) {
      const r = await api(svc.url, `/projects/${p.project.id}`, { method: 'PATCH', key: svc.adminKey, body });
      assertError(r, 400, 'invalid_request');
    }
  });

  test('answers 404 for an unknown project and 403 for another project\'s key, pk_ and rk_ keys', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    const other = await createProject(svc.url, svc.adminKey);
    assertError(await api(svc.url, '/projects/p_nope', { method: 'PATCH', key: svc.adminKey, body: {} }), 404, 'not_found');
    assertError(await api(svc.url, `/projects/${p.project.id}`, { method: 'PATCH', key: other.keys.secret, body: {} }), 403, 'forbidden');
    assertError(await api(svc.url, `/projects/${p.project.id}`, { method: 'PATCH', key: p.keys.publishable, body: {} }), 403, 'forbidden');
    const rk = await api(svc.url, `/projects/${p.project.id}/keys`, { key: p.keys.secret, body: { type: 'read' } });
    assertError(await api(svc.url, `/projects/${p.project.id}`, { method: 'PATCH', key: rk.body.key, body: {} }), 403, 'forbidden');
  });
});

describe('project keys', () => {
  test('lists keys with id, type, hint and dates, never the key itself', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    const r = await api(svc.url, `/projects/${p.project.id}/keys`, { key: p.keys.secret });
    assert.equal(r.status, 200);
    assert.deepEqual(r.body.keys.map((k: { type: string }) => k.type).sort(), ['publishable', 'secret']);
    const text = JSON.stringify(r.body);
    assert.ok(!text.includes(p.keys.secret) && !text.includes(p.keys.publishable));
    const secret = r.body.keys.find((k: { type: string }) => k.type === 'secret');
    assert.equal(secret.hint, `sk_…${p.keys.secret.slice(-4)}`);
    assert.equal(secret.expires_at, null);
    assert.match(secret.created_at, /^\d{4}-\d\d-\d\dT/);
  });

  test('an rk_ key reads metrics but is refused on ingest and on management with 403', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    const created = await api(svc.url, `/projects/${p.project.id}/keys`, { key: p.keys.secret, body: { type: 'read' } });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    assert.match(created.body.key, /^rk_[A-Za-z0-9_-]{22,}$/);
    assert.equal(created.body.type, 'read');
    await api(svc.url, '/analytics', { key: p.keys.secret, body: pv() });
    const m = await api(svc.url, '/metrics', { key: created.body.key });
    assert.equal(m.status, 200);
    assert.equal(m.body.pageviews, 1);
    assertError(await api(svc.url, '/analytics', { key: created.body.key, body: pv() }), 403, 'forbidden');
    assertError(await api(svc.url, '/projects', { key: created.body.key }), 403, 'forbidden');
    assertError(await api(svc.url, `/projects/${p.project.id}/keys`, { key: created.body.key }), 403, 'forbidden');
  });

  test('a revoked key answers 401 at once and after a restart; the last secret key cannot be revoked (409)', async () => {
    const own = await startTestService();
    try {
      const p = await createProject(own.url, own.adminKey);
      const listed = await api(own.url, `/projects/${p.project.id}/keys`, { key: own.adminKey });
      const byType = (t: string) => listed.body.keys.find((k: { type: string }) => k.type === t).id as string;
      const last = await api(own.url, `/projects/${p.project.id}/keys/${byType('secret')}`, { method: 'DELETE', key: own.adminKey });
      assertError(last, 409, 'conflict');
      const second = await api(own.url, `/projects/${p.project.id}/keys`, { key: own.adminKey, body: { type: 'secret' } });
      const revoked = await api(own.url, `/projects/${p.project.id}/keys/${byType('secret')}`, { method: 'DELETE', key: own.adminKey });
      assert.equal(revoked.status, 200, JSON.stringify(revoked.body));
      assert.deepEqual(revoked.body, { ok: true });
      assertError(await api(own.url, '/metrics', { key: p.keys.secret }), 401, 'unauthorized');
      assert.equal((await api(own.url, `/projects/${p.project.id}/keys/${byType('publishable')}`, { method: 'DELETE', key: second.body.key })).status, 200);
      assertError(await api(own.url, '/analytics', { key: p.keys.publishable, body: pv() }), 401, 'unauthorized');
      assertError(await api(own.url, `/projects/${p.project.id}/keys/key_nope`, { method: 'DELETE', key: own.adminKey }), 404, 'not_found');
      const again = await own.restart();
      assertError(await api(again.url, '/metrics', { key: p.keys.secret }), 401, 'unauthorized');
      assertError(await api(again.url, '/analytics', { key: p.keys.publishable, body: pv() }), 401, 'unauthorized');
      assert.equal((await api(again.url, '/metrics', { key: second.body.key })).status, 200);
      await again.destroy();
    } finally {
      await own.stop().catch(() => {});
    }
  });

  test('a key past its expires_at answers 401; expires_at must be in the future', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    const past = await api(svc.url, `/projects/${p.project.id}/keys`, { key: p.keys.secret, body: { type: 'read', expires_at: '2020-01-01T00:00:00Z' } });
    assertError(past, 400, 'invalid_request');
    const soon = new Date(Date.now() + 1500).toISOString();
    const k = await api(svc.url, `/projects/${p.project.id}/keys`, { key: p.keys.secret, body: { type: 'read', expires_at: soon } });
    assert.equal(k.status, 200, JSON.stringify(k.body));
    assert.equal(k.body.expires_at, soon);
    assert.equal((await api(svc.url, '/metrics', { key: k.body.key })).status, 200);
    await new Promise((r) => setTimeout(r, Date.parse(soon) - Date.now() + 50));
    assertError(await api(svc.url, '/metrics', { key: k.body.key }), 401, 'unauthorized');
  });
});

describe('management requests', () => {
  test('PATCH on a key sets its expiry; expiring the last secret key is 409; unknown query parameters are 400', async () => {
    const p = await createProject(svc.url, svc.adminKey);
    const keys = (await api(svc.url, `/projects/${p.project.id}/keys`, { key: p.keys.secret })).body.keys as Array<{ id: string; type: string }>;
    const secretId = keys.find((k) => k.type === 'secret')!.id;
    const publishableId = keys.find((k) => k.type === 'publishable')!.id;
    const at = new Date(Date.now() + 86_400_000).toISOString();
    assertError(await api(svc.url, `/projects/${p.project.id}/keys/${secretId}`, { method: 'PATCH', key: p.keys.secret, body: { expires_at: at } }), 409, 'conflict');
    const patched = await api(svc.url, `/projects/${p.project.id}/keys/${publishableId}`, { method: 'PATCH', key: p.keys.secret, body: { expires_at: at } });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.equal(patched.body.expires_at, at);
    assertError(await api(svc.url, `/projects/${p.project.id}/keys?type=read`, { key: p.keys.secret }), 400, 'invalid_request');
    assertError(await api(svc.url, `/projects/${p.project.id}?force=1`, { method: 'DELETE', key: p.keys.secret }), 400, 'invalid_request');
    assert.equal((await api(svc.url, '/projects', { key: svc.adminKey })).body.projects.some((x: { id: string }) => x.id === p.project.id), true);
  });

  test('CORS preflights allow PATCH and DELETE', async () => {
    const res = await fetch(`${svc.url}/projects/p_x`, {
      method: 'OPTIONS',
      headers: { origin: 'https://admin.example', 'access-control-request-method': 'DELETE' },
    });
    assert.equal(res.status, 204);
    assert.match(res.headers.get('access-control-allow-methods') ?? '', /PATCH.*DELETE/);
  });
});

describe('GET /projects pagination', () => {
  test('pages through every project in creation order with an opaque cursor', async () => {
    const own = await startTestService();
    try {
      const ids: string[] = [];
      for (let i = 0; i < 7; i++) ids.push((await createProject(own.url, own.adminKey, { name: `n${i}` })).project.id);
      const seen: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const q: string = `?limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
        const r = await api(own.url, `/projects${q}`, { key: own.adminKey });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.ok(r.body.projects.length <= 3);
        seen.push(...r.body.projects.map((p: { id: string }) => p.id));
        cursor = r.body.next_cursor;
        pages++;
      } while (cursor !== null);
      assert.deepEqual(seen, ids);
      assert.equal(pages, 3);
      const all = await api(own.url, '/projects', { key: own.adminKey });
      assert.deepEqual(all.body.projects.map((p: { id: string }) => p.id), ids);
      assert.equal(all.body.next_cursor, null);
      for (const q of ['?limit=0', '?limit=1001', '?limit=abc', '?limit=1.5', '?cursor=nope', '?page=2']) {
        assertError(await api(own.url, `/projects${q}`, { key: own.adminKey }), 400, 'invalid_request');
      }
    } finally {
      await own.destroy();
    }
  });
});

describe('DELETE /projects/{id}', () => {
  test('erases its events from the log and every file of the data directory by the next snapshot', async () => {
    const own = await startTestService();
    try {
      const doomed = await createProject(own.url, own.adminKey);
      const kept = await createProject(own.url, own.adminKey);
      const marker = `erase-me-${randomBytes(8).toString('hex')}`;
      for (let i = 0; i < 5; i++) {
        const r = await api(own.url, '/analytics', {
          key: doomed.keys.secret,
          body: Array.from({ length: 20 }, (_, j) => ({ ...pv(`https://a.example/${marker}/${i}/${j}`), eventParams: { note: marker }, eventId: `${marker}-${i}-${j}` })),
        });
        assert.equal(r.status, 200);
      }
      await api(own.url, '/analytics', { key: kept.keys.secret, body: pv('https://a.example/kept') });
      await own.service.engine.snapshotNow();
      await own.service.engine.snapshotNow(); // two snapshots hold it now
      assert.ok(filesContaining(own.dataDir, marker).length >= 2, 'the marker is on disk before the delete (the test can fail)');

      const del = await api(own.url, `/projects/${doomed.project.id}`, { method: 'DELETE', key: own.adminKey });
      assert.equal(del.status, 200, JSON.stringify(del.body));
      assert.deepEqual(del.body, { ok: true });
      assertError(await api(own.url, '/metrics', { key: doomed.keys.secret }), 401, 'unauthorized');
      assertError(await api(own.url, '/analytics', { key: doomed.keys.publishable, body: pv() }), 401, 'unauthorized');
      assertError(await api(own.url, `/metrics?projectId=${doomed.project.id}`, { key: own.adminKey }), 404, 'not_found');
      await own.service.engine.snapshotNow();
      assert.deepEqual(filesContaining(own.dataDir, marker), []);

      // The other project is untouched, the service keeps writing, and a restart agrees.
      assert.equal((await api(own.url, '/analytics', { key: kept.keys.secret, body: pv('https://a.example/after') })).status, 200);
      const again = await own.restart();
      const m = await api(again.url, '/metrics', { key: kept.keys.secret });
      assert.equal(m.body.pageviews, 2);
      assertError(await api(again.url, '/metrics', { key: doomed.keys.secret }), 401, 'unauthorized');
      const listed = await api(again.url, '/projects', { key: again.adminKey });
      assert.deepEqual(listed.body.projects.map((p: { id: string }) => p.id), [kept.project.id]);
      await again.stop();
      assert.deepEqual(filesContaining(own.dataDir, marker), []);
      // Log format 2: the five batches became tombstones of the same count, so the log is still continuous, every
      // checksum holds, and `analytics check` finds nothing wrong.
      const report = await check(own.dataDir);
      assert.deepEqual(report.problems, []);
      const store = LogStore.open(own.dataDir, 'flush', { readOnly: true });
      try {
        const read = [...store.readAfter(0)];
        assert.equal(read.length, store.lastSeq(), 'every sequence is read, erased ones included');
        assert.equal(read.filter((r) => r.record.t === 'x').length, 100);
        assert.equal(read.filter((r) => r.record.t !== 'x' && r.record.p === doomed.project.id).length, 0);
      } finally {
        await store.close();
      }
      await again.destroy();
    } finally {
      await own.stop().catch(() => {});
    }
  });
});

describe('erasure in log format 2', () => {
  test('an entry mixing projects (only tools write those) keeps the other records and its sequences; checksums hold', async () => {
    const own = await startTestService();
    const dataDir = own.dataDir;
    await own.stop();
    const store = LogStore.open(dataDir, 'flush');
    try {
      const rec = (p: string, i: number): LogRecord => ({
        t: 'e', p, ts: 1_763_700_000_000 + i, rt: 1_763_700_000_000 + i, day: '2026-11-21', event: 'page_view', url: `https://a.example/${p}/${i}`,
        path: `/${p}/${i}`, referrer: '', source: 'Direct', sessionId: `s${i}`, user: `s:s${i}`, country: '', device: 'desktop', params: {},
      } as LogRecord);
      const start = store.lastSeq() + 1;
      await store.append([rec('p_gone', 1), rec('p_gone', 2)]);
      await store.append([rec('p_keep', 3), rec('p_gone', 4), rec('p_keep', 5)]);
      await store.append([rec('p_keep', 6)]);
      assert.equal(await store.eraseProjectEvents('p_gone'), 3);
      const read = [...store.readAfter(start - 1)].map(({ seq, record }) => [seq - start, record.t === 'x' ? 'x' : record.p]);
      assert.deepEqual(read, [[0, 'x'], [1, 'x'], [2, 'p_keep'], [3, 'x'], [4, 'p_keep'], [5, 'p_keep']]);
      assert.equal(await store.eraseProjectEvents('p_gone'), 0, 'a second erasure finds nothing');
    } finally {
      await store.close();
    }
    const report = await check(dataDir);
    assert.deepEqual(report.problems, []);
    await (await own.restart()).destroy();
  });
});

describe('DELETE /projects/{id} interrupted by a crash', () => {
  test('a delete whose erasure did not finish is finished at the next start, before serving', async () => {
    const own = await startTestService();
    const doomed = await createProject(own.url, own.adminKey);
    const marker = `crash-erase-${randomBytes(8).toString('hex')}`;
    assert.equal((await api(own.url, '/analytics', { key: doomed.keys.secret, body: pv(`https://a.example/${marker}`) })).status, 200);
    await own.stop();
    // The first step of a delete (catalog and keys, in one transaction), then "the crash": no erasure, no snapshot.
    const store = LogStore.open(own.dataDir, 'flush');
    await store.deleteProject(doomed.project.id);
    await store.close();
    assert.ok(filesContaining(own.dataDir, marker).length > 0);
    const again = await own.restart();
    try {
      assert.deepEqual(filesContaining(own.dataDir, marker), []);
      assertError(await api(again.url, '/metrics', { key: doomed.keys.secret }), 401, 'unauthorized');
    } finally {
      await again.destroy();
    }
  });
});

describe('gRPC lifecycle', () => {
  test('UpdateProject, ListKeys, CreateKey, RevokeKey, DeleteProject and ListProjects pages follow the HTTP rules', async () => {
    const client = new AnalyticsClient(svc.grpcAddress, { key: svc.adminKey });
    try {
      const p = await createProject(svc.url, svc.adminKey, { name: 'grpc' });
      const id = p.project.id;
      const updated = await client.call('updateProject', { projectId: id, name: 'renamed', trackedProps: { values: ['plan'] } });
      assert.equal(updated.project?.name, 'renamed');
      assert.deepEqual(updated.project?.trackedProps, ['plan']);
      await assert.rejects(client.call('updateProject', { projectId: 'p_nope' }), (e: { code: number }) => e.code === 5);
      const keys = await client.call('listKeys', { projectId: id });
      assert.equal(keys.keys.length, 2);
      const secretId = keys.keys.find((k) => k.type === 'secret')!.id;
      await assert.rejects(client.call('revokeKey', { projectId: id, keyId: secretId }), (e: { code: number }) => e.code === 9);
      const created = await client.call('createKey', { projectId: id, type: 'read' });
      assert.match(created.key, /^rk_/);
      assert.equal(created.info?.expiresAt, '');
      const soon = new Date(Date.now() + 3_600_000).toISOString();
      const expiring = await client.call('updateKey', { projectId: id, keyId: created.info!.id, expiresAt: soon });
      assert.equal(expiring.key?.expiresAt, soon);
      await assert.rejects(client.call('updateKey', { projectId: id, keyId: secretId, expiresAt: soon }), (e: { code: number }) => e.code === 9);
      await client.call('revokeKey', { projectId: id, keyId: created.info!.id });
      assertError(await api(svc.url, '/metrics', { key: created.key }), 401, 'unauthorized');
      const first = await client.listProjects({}, { limit: 1 });
      assert.equal(first.projects.length, 1);
      assert.notEqual(first.nextCursor, '');
      const second = await client.listProjects({}, { limit: 1, cursor: first.nextCursor });
      assert.notEqual(second.projects[0]!.id, first.projects[0]!.id);
      await assert.rejects(client.listProjects({}, { limit: 5000 }), (e: { code: number }) => e.code === 3);
      await client.call('deleteProject', { projectId: id });
      assertError(await api(svc.url, '/metrics', { key: p.keys.secret }), 401, 'unauthorized');
    } finally {
      client.close();
    }
  });
});
