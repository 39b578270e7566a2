import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { DAY_MS, testClock } from './contract-helpers.ts';
import { api, createProject, startTestService, type TestService } from './helpers.ts';

/**
 * A visit's visitor is fixed by its first event (CONTRACT "GET /metrics": `users`): an identified event later in an
 * anonymous visit, or an anonymous event after an identified one, does not add a visitor. Over HTTP, on a live day,
 * once the day is sealed (alone and in a range), and after a restart.
 */

const MIN = 60_000;
/** receive time moves this far on: the first day's window (31 days + margins) closes and it is sealed */
const LATER_MS = 36 * DAY_MS;

const clock = testClock(Math.floor(Date.now() / DAY_MS) * DAY_MS - 60 * DAY_MS + 12 * 60 * MIN);
const day = new Date(clock.now()).toISOString().slice(0, 10);
let svc: TestService;
let key: string;

async function send(events: object[]): Promise<void> {
  const r = await api(svc.url, '/analytics', { key, body: events });
  assert.equal(r.status, 200, JSON.stringify(r.body));
}

async function figures(query: string): Promise<{ users: number; sessions: number; daily: Array<{ date: string; users: number; sessions: number }> }> {
  const r = await api(svc.url, `/metrics?${query}`, { key });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

before(async () => {
  svc = await startTestService({}, { now: clock.now });
  ({ keys: { secret: key } } = await createProject(svc.url, svc.adminKey, { monthly_quota: 0 }));
});

after(async () => {
  await svc.destroy();
});

test('two visits, one identified at its end and one only at its start, are two visitors (live day)', async () => {
  const t = clock.now();
  await send([
    { event: 'page_view', url: '/', sessionId: 'v1', timestamp: t - 5 * MIN },
    { event: 'page_view', url: '/pricing', sessionId: 'v1', timestamp: t - 4 * MIN },
    { event: 'signup', sessionId: 'v1', userId: 'alice', timestamp: t - 3 * MIN },
    { event: 'page_view', url: '/', sessionId: 'v2', userId: 'bob', timestamp: t - 5 * MIN },
    { event: 'page_view', url: '/docs', sessionId: 'v2', timestamp: t - 4 * MIN },
  ]);
  const m = await figures(`date=${day}`);
  assert.deepEqual([m.users, m.sessions], [2, 2]);
});

test('an event stamped before its visit\'s first moves the visit to its visitor, whenever it arrives', async () => {
  const t = clock.now();
  await send([{ event: 'page_view', url: '/', sessionId: 'v3', timestamp: t - 2 * MIN }]);
  await send([{ event: 'page_view', url: '/', sessionId: 'v3', userId: 'carol', timestamp: t - 10 * MIN }]);
  // carol's v3, and bob again in a visit of his own: four visits, three visitors (v1 is anonymous: its first event is)
  await send([{ event: 'page_view', url: '/', sessionId: 'v4', userId: 'bob', timestamp: t - MIN }]);
  const m = await figures(`date=${day}`);
  assert.deepEqual([m.users, m.sessions], [3, 4]);
});

test('the same after a restart, and once the day is sealed, alone and in a range with a live day', async () => {
  svc = await svc.restart();
  let m = await figures(`date=${day}`);
  assert.deepEqual([m.users, m.sessions], [3, 4]);

  clock.advance(LATER_MS);
  const today = new Date(clock.now()).toISOString().slice(0, 10);
  await send([{ event: 'page_view', url: '/', sessionId: 'v9', userId: 'alice', timestamp: clock.now() - MIN }]);
  await svc.service.engine.sealingIdle();
  m = await figures(`date=${day}`);
  assert.deepEqual([m.users, m.sessions], [3, 4], 'sealed day');
  m = await figures(`from=${day}&to=${today}`);
  // alice's first visit as herself (v1 counted for its anonymous visitor): a fourth visitor in the range
  assert.deepEqual([m.users, m.sessions], [4, 5], 'range of a sealed and a live day');
  for (const d of m.daily) assert.ok(d.users <= d.sessions, JSON.stringify(d));

  svc = await svc.restart();
  m = await figures(`from=${day}&to=${today}`);
  assert.deepEqual([m.users, m.sessions], [4, 5], 'after a restart');
  m = await figures(`date=${day}`);
  assert.deepEqual([m.users, m.sessions], [3, 4]);
});
