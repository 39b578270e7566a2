import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { api, createProject, startTestService, todayUtc, type CreatedProject, type TestService } from './helpers.ts';

let svc: TestService;
let p: CreatedProject;

before(async () => {
  svc = await startTestService();
  p = await createProject(svc.url, svc.adminKey, { name: 'Q' });
});
after(() => svc.destroy());

const event = { event: 'page_view', url: 'https://a.example/', sessionId: 's1' };

function assertNamesUnknown(res: { status: number; body: any }, ...names: string[]): void {
  assert.equal(res.status, 400, JSON.stringify(res.body));
  assert.equal(res.body.error.code, 'invalid_request');
  for (const n of names) assert.ok(res.body.error.message.includes(`\`${n}\``), res.body.error.message);
  assert.deepEqual(res.body.error.details.map((d: { path: string }) => d.path), names);
}

test('GET /metrics refuses an unknown parameter such as period=7d instead of silently answering today', async () => {
  assertNamesUnknown(await api(svc.url, '/metrics?period=7d', { key: p.keys.secret }), 'period');
  assertNamesUnknown(await api(svc.url, `/metrics?date=${todayUtc()}&range=week&x=1`, { key: p.keys.secret }), 'range', 'x');
  // what it takes still works
  assert.equal((await api(svc.url, `/metrics?date=${todayUtc()}`, { key: p.keys.secret })).status, 200);
  assert.equal((await api(svc.url, `/metrics?from=${todayUtc()}&to=${todayUtc()}`, { key: p.keys.secret })).status, 200);
  assert.equal((await api(svc.url, `/metrics?projectId=${p.project.id}`, { key: svc.adminKey })).status, 200);
});

test('GET /metrics refuses a parameter given twice', async () => {
  const r = await api(svc.url, `/metrics?date=${todayUtc()}&date=2026-01-01`, { key: p.keys.secret });
  assert.equal(r.status, 400);
  assert.equal(r.body.error.code, 'invalid_request');
  assert.match(r.body.error.message, /`date` given more than once/);
});

test('POST /analytics with an unknown query parameter is refused and stores nothing', async () => {
  const before = (await api(svc.url, '/metrics', { key: p.keys.secret })).body.pageviews as number;
  assertNamesUnknown(await api(svc.url, '/analytics?debug=1', { key: p.keys.secret, body: event }), 'debug');
  const afterRefusal = (await api(svc.url, '/metrics', { key: p.keys.secret })).body.pageviews as number;
  assert.equal(afterRefusal, before);
  assert.equal((await api(svc.url, '/analytics', { key: p.keys.secret, body: event })).status, 200);
  assert.equal((await api(svc.url, '/metrics', { key: p.keys.secret })).body.pageviews, before + 1);
});

test('GET and POST /projects refuse unknown query parameters, and POST creates nothing', async () => {
  assertNamesUnknown(await api(svc.url, '/projects?page=5', { key: svc.adminKey }), 'page'); // limit and cursor are its parameters
  const count = (await api(svc.url, '/projects', { key: svc.adminKey })).body.projects.length as number;
  assertNamesUnknown(await api(svc.url, '/projects?dryRun=1', { key: svc.adminKey, body: { name: 'nope' } }), 'dryRun');
  assert.equal((await api(svc.url, '/projects', { key: svc.adminKey })).body.projects.length, count);
});

test('/health and /script.js take any query (a cache-busting ?v= stays fine)', async () => {
  assert.equal((await api(svc.url, '/health?probe=k8s')).status, 200);
  const s = await fetch(`${svc.url}/script.js?v=20261123`);
  assert.equal(s.status, 200);
  await s.arrayBuffer();
});
