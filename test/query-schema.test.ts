import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  defaultOrder,
  parseFunnelBody,
  parseGoalBody,
  parseQueryBody,
  resolveFunnel,
  resolveQuestion,
} from '../src/core/query/schema.ts';

/** [why it is refused, body, a word the message must contain (it names the culprit)] */
const BAD_QUERIES: Array<[string, unknown, string]> = [
  ['not an object', [], 'object'],
  ['no metrics', {}, 'metrics'],
  ['empty metrics', { metrics: [] }, 'metrics'],
  ['eleven metrics', { metrics: Array(11).fill('visitors') }, 'metrics'],
  ['unknown metric', { metrics: ['visitor'] }, '"visitor"'],
  ['repeated metric', { metrics: ['visits', 'visits'] }, '"visits"'],
  ['unknown field', { metrics: ['visits'], segment: 'x' }, '"segment"'],
  ['unknown dimension', { metrics: ['visits'], dimensions: ['pag'] }, '"pag"'],
  ['four dimensions', { metrics: ['visits'], dimensions: ['page', 'event', 'country', 'device'] }, 'dimensions'],
  ['repeated dimension', { metrics: ['visits'], dimensions: ['page', 'page'] }, '"page"'],
  ['two time dimensions', { metrics: ['visits'], dimensions: ['time:hour', 'time:day'] }, 'time:hour'],
  ['unknown time grain', { metrics: ['visits'], dimensions: ['time:year'] }, '"time:year"'],
  ['prop without a key', { metrics: ['visits'], dimensions: ['prop:'] }, 'prop:'],
  ['prop key over 40', { metrics: ['visits'], dimensions: [`prop:${'k'.repeat(41)}`] }, 'prop:'],
  ['a time filter', { metrics: ['visits'], filters: [['is', 'time:day', ['2026-11-01']]] }, '"time:day"'],
  ['unknown operator', { metrics: ['visits'], filters: [['equals', 'page', ['/']]] }, '"equals"'],
  ['unknown filter dimension', { metrics: ['visits'], filters: [['is', 'path', ['/']]] }, '"path"'],
  ['filter without values', { metrics: ['visits'], filters: [['is', 'page', []]] }, 'filters[0][2]'],
  ['filter of two parts', { metrics: ['visits'], filters: [['is', 'page']] }, 'filters[0]'],
  ['filter value not a string', { metrics: ['visits'], filters: [['is', 'page', [1]]] }, 'filters[0][2][0]'],
  ['filter value over 2048', { metrics: ['visits'], filters: [['is', 'page', ['/'.repeat(2049)]]] }, '2048'],
  ['101 filter values', { metrics: ['visits'], filters: [['is', 'page', Array(101).fill('/')]] }, '100'],
  ['21 filters', { metrics: ['visits'], filters: Array(21).fill(['is', 'page', ['/']]) }, 'filters'],
  ['goal with contains', { metrics: ['visits'], filters: [['contains', 'goal', ['x']]] }, 'goal'],
  ['conversionRate without goals', { metrics: ['conversionRate'], dimensions: ['page'] }, 'conversionRate'],
  ['orderBy a name not asked', { metrics: ['visits'], orderBy: [['visitors', 'desc']] }, '"visitors"'],
  ['orderBy a bad direction', { metrics: ['visits'], orderBy: [['visits', 'down']] }, '"down"'],
  ['orderBy not pairs', { metrics: ['visits'], orderBy: ['visits'] }, 'orderBy'],
  ['limit 0', { metrics: ['visits'], limit: 0 }, 'limit'],
  ['limit 10001', { metrics: ['visits'], limit: 10_001 }, 'limit'],
  ['limit not an integer', { metrics: ['visits'], limit: 1.5 }, 'limit'],
  ['negative offset', { metrics: ['visits'], offset: -1 }, 'offset'],
  ['projectId empty', { metrics: ['visits'], projectId: '' }, 'projectId'],
  ['date not a string', { metrics: ['visits'], date: 20261101 }, 'date'],
];

describe('POST /query body', () => {
  for (const [why, body, names] of BAD_QUERIES) {
    test(`refuses ${why}, naming it`, () => {
      const r = parseQueryBody(body);
      assert.equal(r.ok, false, why);
      if (!r.ok) {
        assert.ok(r.message.includes(names), `${why}: "${r.message}" should name ${names}`);
        assert.ok(r.details.length > 0);
      }
    });
  }

  test('range rules are those of GET /metrics', () => {
    const ok = parseQueryBody({ metrics: ['visits'] });
    assert.ok(ok.ok);
    for (const [range, word] of [
      [{ to: '2026-11-02' }, '`to`'],
      [{ date: '2026-11-01', from: '2026-11-01' }, '`date`'],
      [{ from: '2026-11-05', to: '2026-11-01' }, '`from`'],
      [{ from: '2010-01-01', to: '2026-11-01' }, '3653'],
      [{ date: '2026-02-30' }, '`date`'],
      [{ date: '1999-12-31' }, '2000-01-01'],
    ] as const) {
      const parsed = parseQueryBody({ metrics: ['visits'], ...range });
      assert.ok(parsed.ok);
      const q = resolveQuestion(parsed.value, '2026-11-20', []);
      assert.equal(q.ok, false, JSON.stringify(range));
      if (!q.ok) assert.ok(q.message.includes(word), q.message);
    }
    const today = resolveQuestion(ok.value, '2026-11-20', []);
    assert.ok(today.ok && today.value.from === '2026-11-20' && today.value.to === '2026-11-20');
    const from = parseQueryBody({ metrics: ['visits'], from: '2026-11-01' });
    assert.ok(from.ok);
    const open = resolveQuestion(from.value, '2026-11-20', []);
    assert.ok(open.ok && open.value.from === '2026-11-01' && open.value.to === '2026-11-20');
  });

  test('defaults: limit 100, offset 0, order by time, else first metric desc then dimensions asc', () => {
    const a = parseQueryBody({ metrics: ['visitors', 'visits'], dimensions: ['page', 'country'] });
    assert.ok(a.ok);
    assert.equal(a.value.question.limit, 100);
    assert.equal(a.value.question.offset, 0);
    assert.deepEqual(a.value.question.orderBy, [['visitors', 'desc'], ['page', 'asc'], ['country', 'asc']]);
    assert.deepEqual(defaultOrder(['visits'], ['time:hour'])[0], ['time:hour', 'asc']);
    const given = parseQueryBody({ metrics: ['visits'], dimensions: ['page'], orderBy: [['page', 'desc']], limit: 5, offset: 10 });
    assert.ok(given.ok);
    assert.deepEqual(given.value.question.orderBy, [['page', 'desc']]);
    assert.equal(given.value.question.limit, 5);
    assert.equal(given.value.question.offset, 10);
  });

  test('accepts every dimension kind, goal filters and conversionRate with a goal', () => {
    const r = parseQueryBody({
      metrics: ['visitors', 'conversionRate'],
      dimensions: ['prop:plan', 'time:week', 'exitPage'],
      filters: [['is', 'goal', ['Signed up']], ['notContains', 'country', ['de']], ['isNot', 'prop:plan', ['free']]],
    });
    assert.ok(r.ok, r.ok ? '' : r.message);
    assert.ok(parseQueryBody({ metrics: ['conversionRate'], dimensions: ['goal'] }).ok);
  });
});

describe('POST /query/funnel body', () => {
  const BAD: Array<[string, unknown, string]> = [
    ['one step', { steps: ['a'] }, 'steps'],
    ['nine steps', { steps: Array(9).fill('a') }, 'steps'],
    ['a page step without /', { steps: ['a', { page: 'pricing' }] }, 'steps[1].page'],
    ['a step with event and page', { steps: ['a', { event: 'x', page: '/' }] }, 'steps[1]'],
    ['a step that is a number', { steps: ['a', 3] }, 'steps[1]'],
    ['an event-level filter', { steps: ['a', 'b'], filters: [['is', 'page', ['/']]] }, '"page"'],
    ['an unknown field', { steps: ['a', 'b'], metrics: ['visits'] }, '"metrics"'],
  ];
  for (const [why, body, names] of BAD) {
    test(`refuses ${why}, naming it`, () => {
      const r = parseFunnelBody(body);
      assert.equal(r.ok, false, why);
      if (!r.ok) assert.ok(r.message.includes(names), `${why}: "${r.message}" should name ${names}`);
    });
  }

  test('resolves steps: goals by name, labels event:<name> and page:<pattern>; an unknown goal is named', () => {
    const r = parseFunnelBody({ date: '2026-11-01', steps: ['Signed up', { event: 'buy' }, { page: '/thanks*' }], filters: [['is', 'country', ['DE']]] });
    assert.ok(r.ok);
    const goals = [{ id: 'g1', name: 'Signed up', page: '/welcome', createdAt: 0 }];
    const q = resolveFunnel(r.value, '2026-11-20', goals);
    assert.ok(q.ok);
    assert.deepEqual(q.value.steps, [
      { label: 'Signed up', page: '/welcome' },
      { label: 'event:buy', event: 'buy' },
      { label: 'page:/thanks*', page: '/thanks*' },
    ]);
    assert.equal(q.value.from, '2026-11-01');
    const missing = resolveFunnel(r.value, '2026-11-20', []);
    assert.equal(missing.ok, false);
    if (!missing.ok) assert.match(missing.message, /"Signed up"/);
  });
});

describe('POST /projects/{id}/goals body', () => {
  const BAD: Array<[string, unknown, string]> = [
    ['no name', { event: 'signup' }, 'name'],
    ['an empty name', { name: '', event: 'signup' }, 'name'],
    ['a name over 64', { name: 'n'.repeat(65), event: 'signup' }, 'name'],
    ['neither event nor page', { name: 'a' }, 'event'],
    ['both event and page', { name: 'a', event: 'x', page: '/' }, 'page'],
    ['a page without /', { name: 'a', page: 'pricing' }, 'page'],
    ['a page over 2048', { name: 'a', page: `/${'p'.repeat(2048)}` }, 'page'],
    ['an event over 64', { name: 'a', event: 'e'.repeat(65) }, 'event'],
    ['an unknown field', { name: 'a', event: 'x', colour: 'red' }, '"colour"'],
  ];
  for (const [why, body, names] of BAD) {
    test(`refuses ${why}, naming it`, () => {
      const r = parseGoalBody(body);
      assert.equal(r.ok, false, why);
      if (!r.ok) assert.ok(r.message.includes(names), `${why}: "${r.message}" should name ${names}`);
    });
  }
  test('accepts an event goal and a page goal', () => {
    assert.deepEqual(parseGoalBody({ name: 'Signed up', event: 'signup' }), { ok: true, value: { name: 'Signed up', event: 'signup' } });
    assert.deepEqual(parseGoalBody({ name: 'Docs', page: '/docs/*' }), { ok: true, value: { name: 'Docs', page: '/docs/*' } });
  });
});
