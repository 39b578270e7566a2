import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { status, type ServiceError } from '@grpc/grpc-js';
import fc from 'fast-check';
import { eachDay } from '../src/core/dates.ts';
import { MAX_QUERY_DATE, MAX_RANGE_DAYS, MIN_QUERY_DATE } from '../src/core/limits.ts';
import { resolveRange } from '../src/core/metrics.ts';
import { AnalyticsClient } from '../src/grpc/client.ts';
import { api, createProject, startTestService, type CreatedProject, type TestService } from './helpers.ts';

/**
 * Issue 17, row 1: a range ending on 9999-12-31 used to loop forever (the day after formats as '+010000-01-01',
 * which sorts before it) and took the process down. Every date is now bounded to 2000-01-01..2199-12-31 on every
 * face, and every loop over days has its length fixed and capped before it runs.
 */

let svc: TestService;
let project: CreatedProject;
let grpc: AnalyticsClient;

before(async () => {
  svc = await startTestService();
  project = await createProject(svc.url, svc.adminKey);
  grpc = new AnalyticsClient(svc.grpcAddress, { key: project.keys.secret });
});
after(async () => {
  grpc.close();
  await svc.destroy();
});

const hostile = [
  'date=9999-12-31',
  'from=9999-12-01&to=9999-12-31',
  'from=9999-12-31',
  'date=2200-01-01',
  'date=1999-12-31',
  'from=0001-01-01&to=0001-12-31',
];

describe('dates outside 2000-01-01..2199-12-31 are refused on every face, and the service keeps answering', () => {
  for (const q of hostile) {
    test(`GET /metrics?${q} answers 400 invalid_request at once`, async () => {
      const res = await api(svc.url, `/metrics?${q}`, { key: project.keys.secret });
      assert.equal(res.status, 400, JSON.stringify(res.body));
      assert.equal(res.body.error.code, 'invalid_request');
      assert.match(res.body.error.message, /between 2000-01-01 and 2199-12-31|must be a date/);
      assert.equal((await api(svc.url, '/health')).status, 200);
    });
  }

  test('gRPC GetMetrics with date 9999-12-31 (and from/to in year 9999) is INVALID_ARGUMENT, and health still answers', async () => {
    for (const req of [{ date: '9999-12-31' }, { from: '9999-12-01', to: '9999-12-31' }]) {
      const err = await grpc.getMetrics(req).then(
        () => assert.fail('a refusal was expected'),
        (e: ServiceError) => e,
      );
      assert.equal(err.code, status.INVALID_ARGUMENT);
    }
    assert.equal((await api(svc.url, '/health')).status, 200);
  });

  test('the bounds themselves are accepted: 2000-01-01 and 2199-12-31', async () => {
    for (const q of [`date=${MIN_QUERY_DATE}`, `date=${MAX_QUERY_DATE}`, `from=2199-01-01&to=${MAX_QUERY_DATE}`]) {
      const res = await api(svc.url, `/metrics?${q}`, { key: project.keys.secret });
      assert.equal(res.status, 200, `${q}: ${JSON.stringify(res.body)}`);
    }
  });
});

describe('date parsing and day loops always terminate (fast-check)', () => {
  const dateLike = fc.oneof(
    fc.tuple(fc.integer({ min: 0, max: 9999 }), fc.integer({ min: 0, max: 13 }), fc.integer({ min: 0, max: 32 })).map(
      ([y, m, d]) => `${String(y).padStart(4, '0')}-${String(m).padStart(2, '0')}-${String(d).padStart(2, '0')}`,
    ),
    fc.string({ maxLength: 12 }),
    fc.constantFrom('9999-12-31', '+010000-01-01', '2199-12-31', '2000-01-01', '2024-02-29', '2023-02-29'),
  );
  const maybe = fc.option(dateLike, { nil: undefined });

  test('resolveRange answers quickly for any date, from, to and today, and an accepted range is bounded', () => {
    fc.assert(
      fc.property(maybe, maybe, maybe, dateLike, (date, from, to, today) => {
        const started = performance.now();
        const r = resolveRange({ date, from, to }, today);
        if (r.ok) {
          assert.ok(r.from >= MIN_QUERY_DATE && r.to <= MAX_QUERY_DATE, `${r.from}..${r.to}`);
          const days = eachDay(r.from, r.to);
          assert.ok(days.length >= 1 && days.length <= MAX_RANGE_DAYS);
          assert.equal(days[0], r.from);
          assert.equal(days.at(-1), r.to);
        }
        assert.ok(performance.now() - started < 1000);
      }),
      { numRuns: 5000 },
    );
  });

  test('eachDay never runs away: it ends, or refuses a range over its bound before looping', () => {
    fc.assert(
      fc.property(dateLike, dateLike, (from, to) => {
        try {
          const days = eachDay(from, to);
          assert.ok(days.length <= 4000, 'the bound: ten years of questions, with slack');
        } catch (err) {
          assert.ok(err instanceof RangeError, String(err));
        }
      }),
      { numRuns: 5000 },
    );
    assert.deepEqual(eachDay('9999-12-30', '9999-12-31'), ['9999-12-30', '9999-12-31']);
    assert.throws(() => eachDay('2000-01-01', '9999-12-31'), RangeError);
  });
});
