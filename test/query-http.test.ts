import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { assertError, assertRateHeaders } from './contract-helpers.ts';
import { api, createProject, startTestService, type CreatedProject, type TestService } from './helpers.ts';

/** POST /query, /query/funnel and the goals endpoints over real HTTP: validation, who may, the goals lifecycle. */

let svc: TestService;
let p: CreatedProject;
let other: CreatedProject;
let readKey: string;

before(async () => {
  svc = await startTestService();
  p = await createProject(svc.url, svc.adminKey);
  other = await createProject(svc.url, svc.adminKey);
  const rk = await api(svc.url, `/projects/${p.project.id}/keys`, { key: p.keys.secret, body: { type: 'read' } });
  readKey = rk.body.key;
});
after(() => svc.destroy());

const ask = (key: string | undefined, body: unknown, route = '/query') => api(svc.url, route, key === undefined ? { method: 'POST', body } : { key, body });

/** A question the service can only refuse (range over ten years), so gates are judged without the column store. */
const REFUSED_RANGE = { metrics: ['visits'], from: '2010-01-01', to: '2026-01-01' };

describe('POST /query: who may ask', () => {
  test('no key 401; pk_ 403; another project\'s sk_ 403; ak_ without projectId 400, with an unknown one 404', async () => {
    assertError(await ask(undefined, { metrics: ['visits'] }), 401, 'unauthorized');
    assertError(await ask(p.keys.publishable, { metrics: ['visits'] }), 403, 'forbidden');
    assertError(await ask(other.keys.secret, { metrics: ['visits'], projectId: p.project.id }), 403, 'forbidden');
    assertError(await ask(readKey, { metrics: ['visits'], projectId: other.project.id }), 403, 'forbidden');
    assertError(await ask(svc.adminKey, { metrics: ['visits'] }), 400, 'invalid_request');
    assertError(await ask(svc.adminKey, { metrics: ['visits'], projectId: 'p_nope' }), 404, 'not_found');
    for (const route of ['/query', '/query/funnel']) {
      assertError(await ask(p.keys.publishable, { steps: ['a', 'b'] }, route), 403, 'forbidden');
    }
  });

  test('sk_, rk_ and ak_ with projectId pass the gate (the range refusal proves it) and carry RateLimit-*', async () => {
    for (const [key, extra] of [[p.keys.secret, {}], [readKey, {}], [svc.adminKey, { projectId: p.project.id }], [readKey, { projectId: p.project.id }]] as const) {
      const r = await ask(key, { ...REFUSED_RANGE, ...extra });
      assertError(r, 400, 'invalid_request');
      assert.match(r.body.error.message, /3653/);
      assertRateHeaders(r);
    }
  });

  test('a body that does not parse is judged after the gate: 401 first, then 400 / 413 / 415', async () => {
    const bad = await api(svc.url, '/query', { raw: '{"metrics":', key: readKey });
    assertError(bad, 400, 'invalid_json');
    assertRateHeaders(bad);
    assertError(await api(svc.url, '/query', { raw: '{"metrics":' }), 401, 'unauthorized');
    assertError(await api(svc.url, '/query', { raw: '{"metrics":', key: p.keys.publishable }), 403, 'forbidden');
    assertError(await api(svc.url, '/query', { raw: '{}', key: readKey, headers: { 'content-type': 'application/xml' } }), 415, 'unsupported_media_type');
    const big = { metrics: ['visits'], filters: [['is', 'page', Array(40).fill('/'.repeat(2000))]] };
    assertError(await ask(readKey, big), 413, 'payload_too_large');
    assertError(await api(svc.url, '/query?x=1', { key: readKey, body: { metrics: ['visits'] } }), 400, 'invalid_request');
  });
});

describe('POST /query: bad bodies are 400 invalid_request naming the culprit', () => {
  const CASES: Array<[string, unknown, string]> = [
    ['unknown metric', { metrics: ['sessions'] }, 'sessions'],
    ['unknown dimension', { metrics: ['visits'], dimensions: ['city'] }, 'city'],
    ['unknown operator', { metrics: ['visits'], filters: [['startsWith', 'page', ['/']]] }, 'startsWith'],
    ['unknown field', { metrics: ['visits'], sample: 0.1 }, 'sample'],
    ['a time filter', { metrics: ['visits'], filters: [['is', 'time:hour', ['2026-11-01T10']]] }, 'time:hour'],
    ['conversionRate without goals', { metrics: ['conversionRate'] }, 'conversionRate'],
    ['orderBy a name not asked', { metrics: ['visits'], orderBy: [['pageviews', 'asc']] }, 'pageviews'],
    ['two time dimensions', { metrics: ['visits'], dimensions: ['time:day', 'time:month'] }, 'time:day'],
    ['limit over 10,000', { metrics: ['visits'], limit: 20_000 }, 'limit'],
    ['a body that is an array', [{ metrics: ['visits'] }], 'object'],
  ];
  for (const [why, body, names] of CASES) {
    test(why, async () => {
      const r = await ask(p.keys.secret, body);
      assertError(r, 400, 'invalid_request');
      assert.ok(r.body.error.message.includes(names), r.body.error.message);
    });
  }

  test('funnel: an event-level filter, one step, and a goal name that does not exist', async () => {
    const page = await ask(p.keys.secret, { steps: [{ page: '/' }, { event: 'x' }], filters: [['is', 'page', ['/']]] }, '/query/funnel');
    assertError(page, 400, 'invalid_request');
    assert.match(page.body.error.message, /"page"/);
    assertError(await ask(p.keys.secret, { steps: [{ page: '/' }] }, '/query/funnel'), 400, 'invalid_request');
    const missing = await ask(p.keys.secret, { steps: [{ page: '/' }, 'No such goal'] }, '/query/funnel');
    assertError(missing, 400, 'invalid_request');
    assert.match(missing.body.error.message, /No such goal/);
  });

  test('a question covers up to ten years ("all time"), by time:hour at most 31 days', async () => {
    const years = await ask(p.keys.secret, { metrics: ['visits'], dimensions: ['time:month'], from: '2016-12-01', to: '2026-11-29', limit: 200 });
    assert.equal(years.status, 200, JSON.stringify(years.body));
    assert.equal(years.body.results.length, 120, 'every month of ten years is a row');
    const hours = await ask(p.keys.secret, { metrics: ['visits'], dimensions: ['time:hour'], from: '2026-10-01', to: '2026-11-29' });
    assertError(hours, 400, 'invalid_request');
    assert.match(hours.body.error.message, /time:hour covers at most 31 days/);
  });

  test('a goal filter naming no goal of the project is refused as the funnel refuses it, not answered with zeros', async () => {
    const r = await ask(p.keys.secret, { metrics: ['visitors', 'conversionRate'], filters: [['is', 'goal', ['No such goal']]] });
    assertError(r, 400, 'invalid_request');
    assert.match(r.body.error.message, /filters\[0\]: no goal named "No such goal"/);
    assert.deepEqual(r.body.error.details, [{ path: 'filters[0][2]', message: 'no goal named "No such goal"' }]);
  });
});

describe('goals', () => {
  test('create, 409 on a repeated name, list, delete, 404; who may', async () => {
    const id = p.project.id;
    const base = `/projects/${id}/goals`;
    const a = await api(svc.url, base, { key: p.keys.secret, body: { name: 'Signed up', event: 'signup' } });
    assert.equal(a.status, 200, JSON.stringify(a.body));
    assert.equal(a.body.goal.name, 'Signed up');
    assert.equal(a.body.goal.event, 'signup');
    assert.ok(!('page' in a.body.goal));
    assertRateHeaders(a);
    const b = await api(svc.url, base, { key: svc.adminKey, body: { name: 'Docs', page: '/docs/*' } });
    assert.equal(b.status, 200, JSON.stringify(b.body));
    assertError(await api(svc.url, base, { key: p.keys.secret, body: { name: 'Signed up', page: '/x' } }), 409, 'conflict');
    assertError(await api(svc.url, base, { key: p.keys.secret, body: { name: 'Both', event: 'x', page: '/x' } }), 400, 'invalid_request');
    assertError(await api(svc.url, base, { key: p.keys.secret, body: { name: 'Bad page', page: 'x' } }), 400, 'invalid_request');
    // rk_ may list, not change; pk_ neither; another project's key neither
    assertError(await api(svc.url, base, { key: readKey, body: { name: 'R', event: 'r' } }), 403, 'forbidden');
    assertError(await api(svc.url, base, { key: p.keys.publishable }), 403, 'forbidden');
    assertError(await api(svc.url, base, { key: other.keys.secret }), 403, 'forbidden');
    assertError(await api(svc.url, `/projects/p_nope/goals`, { key: svc.adminKey }), 404, 'not_found');
    for (const key of [readKey, p.keys.secret, svc.adminKey]) {
      const list = await api(svc.url, base, { key });
      assert.equal(list.status, 200);
      assert.deepEqual(list.body.goals.map((g: { name: string }) => g.name), ['Signed up', 'Docs']);
    }
    assertError(await api(svc.url, `${base}/${a.body.goal.id}`, { method: 'DELETE', key: readKey }), 403, 'forbidden');
    const del = await api(svc.url, `${base}/${a.body.goal.id}`, { method: 'DELETE', key: p.keys.secret });
    assert.equal(del.status, 200);
    assert.deepEqual(del.body, { ok: true });
    assertError(await api(svc.url, `${base}/${a.body.goal.id}`, { method: 'DELETE', key: p.keys.secret }), 404, 'not_found');
    const left = await api(svc.url, base, { key: p.keys.secret });
    assert.deepEqual(left.body.goals.map((g: { name: string }) => g.name), ['Docs']);
    // the name is free again
    assert.equal((await api(svc.url, base, { key: p.keys.secret, body: { name: 'Signed up', event: 'signup' } })).status, 200);
  });

  test('at most 100 goals a project', async () => {
    const q = await createProject(svc.url, svc.adminKey);
    const base = `/projects/${q.project.id}/goals`;
    for (let i = 0; i < 100; i++) {
      const r = await api(svc.url, base, { key: q.keys.secret, body: { name: `g${i}`, event: `e${i}` } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    const over = await api(svc.url, base, { key: q.keys.secret, body: { name: 'g100', event: 'e100' } });
    assertError(over, 400, 'invalid_request');
    assert.match(over.body.error.message, /100/);
  });

  test('kept across a restart, and erased with the project', async () => {
    const q = await createProject(svc.url, svc.adminKey);
    const base = `/projects/${q.project.id}/goals`;
    const made = await api(svc.url, base, { key: q.keys.secret, body: { name: 'Bought', event: 'purchase' } });
    assert.equal(made.status, 200);
    svc = await svc.restart();
    const list = await api(svc.url, base, { key: q.keys.secret });
    assert.equal(list.status, 200);
    assert.deepEqual(list.body.goals, [made.body.goal]);
    // PATCH keeps the goals
    assert.equal((await api(svc.url, `/projects/${q.project.id}`, { method: 'PATCH', key: q.keys.secret, body: { name: 'Renamed' } })).status, 200);
    assert.equal((await api(svc.url, base, { key: q.keys.secret })).body.goals.length, 1);
    assert.equal((await api(svc.url, `/projects/${q.project.id}`, { method: 'DELETE', key: svc.adminKey })).status, 200);
    assertError(await api(svc.url, base, { key: svc.adminKey }), 404, 'not_found');
  });
});
