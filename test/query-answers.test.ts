import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { AnalyticsClient } from '../src/grpc/client.ts';
import { testClock } from './contract-helpers.ts';
import { api, createProject, startTestService, type CreatedProject, type TestService } from './helpers.ts';

/**
 * Answers end to end, over HTTP, gRPC and the CLI, on a fixture small enough to count by hand (one UTC day):
 *   visit sA: 10:05 page_view /, 10:10 page_view /pricing, 10:20 signup
 *   visit sB: 10:30 page_view /pricing
 *   visit sC: 14:00 page_view /, 14:01 page_view /docs/a
 *   visit sD: 14:30 page_view /pricing?plan=pro, 14:40 page_view /
 */

const DAY = '2026-11-20';
const at = (hhmm: string) => Date.parse(`${DAY}T${hhmm}:00Z`);
const pv = (sessionId: string, hhmm: string, path: string) => ({ event: 'page_view', url: `https://shop.example${path}`, sessionId, timestamp: at(hhmm) });

let svc: TestService;
let p: CreatedProject;
const clock = testClock(`${DAY}T23:00:00Z`);

before(async () => {
  svc = await startTestService({}, { now: clock.now });
  p = await createProject(svc.url, svc.adminKey);
  const events = [
    pv('sA', '10:05', '/'),
    pv('sA', '10:10', '/pricing'),
    { event: 'signup', sessionId: 'sA', timestamp: at('10:20') },
    pv('sB', '10:30', '/pricing'),
    pv('sC', '14:00', '/'),
    pv('sC', '14:01', '/docs/a'),
    pv('sD', '14:30', '/pricing?plan=pro'),
    pv('sD', '14:40', '/'),
  ];
  const sent = await api(svc.url, '/analytics', { key: p.keys.secret, body: events });
  assert.equal(sent.status, 200, JSON.stringify(sent.body));
  for (const goal of [{ name: 'Signed up', event: 'signup' }, { name: 'Docs', page: '/docs/*' }]) {
    assert.equal((await api(svc.url, `/projects/${p.project.id}/goals`, { key: p.keys.secret, body: goal })).status, 200);
  }
});
after(() => svc.destroy());

const ask = async (body: object, route = '/query') => {
  const r = await api(svc.url, route, { key: p.keys.secret, body: { date: DAY, ...body } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
};

describe('POST /query answers', () => {
  test('a page filter: the visits and visitors that viewed /pricing, and those page views', async () => {
    const a = await ask({ metrics: ['visitors', 'visits', 'pageviews'], filters: [['is', 'page', ['/pricing']]] });
    assert.deepEqual(a.results, [{ dimensions: [], metrics: [3, 3, 3] }]);
    assert.deepEqual(a.totals, [3, 3, 3]);
    assert.equal(a.totalRows, 1);
    assert.equal(a.projectId, p.project.id);
    assert.equal(a.from, DAY);
    assert.equal(a.timezone, 'UTC');
    assert.deepEqual(a.metrics, ['visitors', 'visits', 'pageviews']);
    assert.deepEqual(a.dimensions, []);
  });

  test('time:hour for one day: 24 rows in time order, zeros included', async () => {
    const a = await ask({ metrics: ['pageviews'], dimensions: ['time:hour'] });
    assert.equal(a.totalRows, 24);
    assert.equal(a.results.length, 24);
    assert.equal(a.results[0].dimensions[0], `${DAY}T00`);
    assert.equal(a.results[23].dimensions[0], `${DAY}T23`);
    const byHour = Object.fromEntries(a.results.map((r: { dimensions: string[]; metrics: number[] }) => [r.dimensions[0], r.metrics[0]]));
    assert.equal(byHour[`${DAY}T10`], 3);
    assert.equal(byHour[`${DAY}T14`], 4);
    assert.equal(a.results.reduce((s: number, r: { metrics: number[] }) => s + r.metrics[0]!, 0), 7);
    assert.deepEqual(a.totals, [7]);
  });

  test('goals with their conversion rate: every goal is a row; 1 of 4 visitors each', async () => {
    const a = await ask({ metrics: ['visitors', 'conversionRate'], dimensions: ['goal'] });
    const rows = Object.fromEntries(a.results.map((r: { dimensions: string[]; metrics: number[] }) => [r.dimensions[0], r.metrics]));
    assert.deepEqual(rows, { 'Signed up': [1, 25], Docs: [1, 25] });
    assert.equal(a.totalRows, 2);
    const filtered = await ask({ metrics: ['visitors', 'conversionRate'], filters: [['is', 'goal', ['Signed up']]] });
    assert.deepEqual(filtered.results, [{ dimensions: [], metrics: [1, 25] }]);
  });

  test('a two-step funnel: /pricing then the Signed up goal', async () => {
    const f = await ask({ steps: [{ page: '/pricing' }, 'Signed up'] }, '/query/funnel');
    assert.deepEqual(f, {
      projectId: p.project.id,
      from: DAY,
      to: DAY,
      timezone: 'UTC',
      steps: [
        { label: 'page:/pricing', visits: 3, visitors: 3, conversionRate: 100, dropoff: 0 },
        { label: 'Signed up', visits: 1, visitors: 1, conversionRate: 33.3, dropoff: 2 },
      ],
    });
  });

  test('gRPC answers the same figures (metric values as doubles)', async () => {
    const client = new AnalyticsClient(svc.grpcAddress, { key: p.keys.secret });
    try {
      const q = await client.call('query', { date: DAY, metrics: ['visitors', 'pageviews'], dimensions: ['page'], filters: [{ operator: 'is', dimension: 'page', values: ['/', '/pricing'] }] });
      const http = await ask({ metrics: ['visitors', 'pageviews'], dimensions: ['page'], filters: [['is', 'page', ['/', '/pricing']]] });
      assert.deepEqual(q.results.map((r) => ({ dimensions: r.dimensions, metrics: r.metrics })), http.results);
      assert.deepEqual(http.results, [{ dimensions: ['/'], metrics: [3, 3] }, { dimensions: ['/pricing'], metrics: [3, 3] }]);
      assert.equal(Number(q.totalRows), 2);
      const f = await client.call('queryFunnel', { date: DAY, steps: [{ step: { case: 'page', value: '/pricing' } }, { step: { case: 'event', value: 'signup' } }] });
      assert.deepEqual(f.steps.map((s) => [s.label, Number(s.visits), s.conversionRate, Number(s.dropoff)]), [['page:/pricing', 3, 100, 0], ['event:signup', 1, 33.3, 2]]);
    } finally {
      client.close();
    }
  });

  test('the CLI prints the rows as CSV', async () => {
    const bin = fileURLToPath(new URL('../bin/analytics.js', import.meta.url));
    const out = await new Promise<string>((resolve, reject) =>
      execFile(
        process.execPath,
        [bin, 'query', '--project', p.project.id, '--date', DAY, '--metrics', 'pageviews', '--dimensions', 'page', '--filter', 'isNot:page:/docs/a', '--format', 'csv'],
        { env: { PATH: process.env.PATH ?? '', ANALYTICS_URL: svc.url, ANALYTICS_KEY: p.keys.secret }, timeout: 60_000 },
        (err, stdout, stderr) => (err ? reject(new Error(stderr)) : resolve(stdout)),
      ),
    );
    assert.equal(out, 'page,pageviews\n/,3\n/pricing,3\n');
  });
});
