import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { assertError, HOUR_MS, ingest, pv, storedEvents, testClock, type TestClock } from './contract-helpers.ts';
import { api, createProject, startTestService, type CreatedProject, type TestService } from './helpers.ts';

/**
 * CONTRACT "Idempotency": an eventId already stored for the project within 48 h is acknowledged again and counted
 * once — in a later request, inside one batch, under concurrency, across restarts and snapshots.
 */

let svc: TestService;
let clock: TestClock;
let a: CreatedProject;
let b: CreatedProject;

before(async () => {
  clock = testClock('2026-11-21T12:00:00Z');
  svc = await startTestService({}, { now: clock.now });
  a = await createProject(svc.url, svc.adminKey, { name: 'A' });
  b = await createProject(svc.url, svc.adminKey, { name: 'B' });
});
after(() => svc.destroy());

let n = 0;
/** A fresh eventId per call, so tests do not see each other's ids. */
const id = (label: string) => `${label}-${++n}`;
const ev = (eventId: string, path = '/') => pv(path, { eventId });

describe('a repeated eventId is acknowledged and counted once', () => {
  const shapes: Array<{ name: string; send: (key: string, e: string) => Promise<void> }> = [
    {
      name: 'in a later request',
      send: async (key, e) => {
        for (let i = 0; i < 3; i++) {
          const r = await ingest(svc.url, key, ev(e));
          assert.equal(r.status, 200);
          assert.deepEqual([r.body.ok, r.body.accepted], [true, 1]);
        }
      },
    },
    {
      name: 'inside one batch',
      send: async (key, e) => {
        const r = await ingest(svc.url, key, [ev(e), ev(e), ev(e)]);
        assert.equal(r.status, 200);
        assert.equal(r.body.accepted, 3);
      },
    },
    {
      name: 'inside an {events} batch and again in a later single event',
      send: async (key, e) => {
        assert.equal((await ingest(svc.url, key, { events: [ev(e), ev(e)] })).status, 200);
        assert.equal((await ingest(svc.url, key, ev(e))).status, 200);
      },
    },
    {
      name: 'in 20 identical requests sent at once',
      send: async (key, e) => {
        const all = await Promise.all(Array.from({ length: 20 }, () => ingest(svc.url, key, [ev(e), ev(e)])));
        assert.deepEqual(new Set(all.map((r) => r.status)), new Set([200]));
      },
    },
    {
      name: 'from the secret and the publishable key of one project',
      send: async (_key, e) => {
        assert.equal((await ingest(svc.url, a.keys.secret, ev(e))).status, 200);
        assert.equal((await ingest(svc.url, a.keys.publishable, ev(e))).status, 200);
      },
    },
  ];
  for (const s of shapes) {
    test(`when it is repeated ${s.name}`, async () => {
      const before = await storedEvents(svc.url, a.keys.secret);
      const recentBefore = (await api(svc.url, '/metrics', { key: a.keys.secret })).body.recentEvents.length;
      await s.send(a.keys.secret, id('repeat'));
      assert.equal(await storedEvents(svc.url, a.keys.secret), before + 1);
      const recent = (await api(svc.url, '/metrics', { key: a.keys.secret })).body.recentEvents.length;
      assert.equal(recent, Math.min(50, recentBefore + 1));
    });
  }

  test('a batch mixing new ids, a repeat and events without ids stores each new event once', async () => {
    const seen = id('seen');
    await ingest(svc.url, a.keys.secret, ev(seen));
    const before = await storedEvents(svc.url, a.keys.secret);
    const r = await ingest(svc.url, a.keys.secret, [ev(id('new')), ev(seen), pv('/no-id'), pv('/no-id'), ev(id('new'))]);
    assert.equal(r.status, 200);
    assert.equal(r.body.accepted, 5);
    assert.equal(await storedEvents(svc.url, a.keys.secret), before + 4);
  });

  test('the first copy wins: a repeat with other content changes nothing', async () => {
    const e = id('first-wins');
    await ingest(svc.url, b.keys.secret, pv('/first', { eventId: e }));
    await ingest(svc.url, b.keys.secret, { event: 'signup', eventId: e });
    const m = (await api(svc.url, '/metrics', { key: b.keys.secret })).body;
    assert.equal(m.pages['/first'], 1);
    assert.equal(m.events.signup, undefined);
  });

  test('eventIds are per project: the same id in two projects is counted in each', async () => {
    const e = id('shared');
    const beforeA = await storedEvents(svc.url, a.keys.secret);
    const beforeB = await storedEvents(svc.url, b.keys.secret);
    assert.equal((await ingest(svc.url, a.keys.secret, ev(e))).status, 200);
    assert.equal((await ingest(svc.url, b.keys.secret, ev(e))).status, 200);
    assert.equal(await storedEvents(svc.url, a.keys.secret), beforeA + 1);
    assert.equal(await storedEvents(svc.url, b.keys.secret), beforeB + 1);
  });

  test('a repeat does not use the monthly quota', async () => {
    const q = await createProject(svc.url, svc.adminKey, { monthly_quota: 2 });
    const [e1, e2] = [id('q'), id('q')];
    assert.equal((await ingest(svc.url, q.keys.secret, [ev(e1), ev(e2)])).status, 200);
    assert.equal((await ingest(svc.url, q.keys.secret, [ev(e1), ev(e2)])).status, 200);
    assertError(await ingest(svc.url, q.keys.secret, ev(id('q'))), 429, 'quota_exceeded');
    assert.equal(await storedEvents(svc.url, q.keys.secret), 2);
  });
});

describe('what is not remembered', () => {
  test('the ids of a refused batch are not remembered: the corrected batch is counted', async () => {
    const e = id('refused');
    const before = await storedEvents(svc.url, a.keys.secret);
    assertError(await ingest(svc.url, a.keys.secret, [ev(e), { event: 'page_view', eventId: id('bad') }]), 400, 'invalid_event');
    assert.equal(await storedEvents(svc.url, a.keys.secret), before);
    assert.equal((await ingest(svc.url, a.keys.secret, ev(e))).status, 200);
    assert.equal(await storedEvents(svc.url, a.keys.secret), before + 1);
  });

  test('the ids of a batch refused over quota are not remembered', async () => {
    const q = await createProject(svc.url, svc.adminKey, { monthly_quota: 1 });
    const [e1, e2] = [id('oq'), id('oq')];
    assertError(await ingest(svc.url, q.keys.secret, [ev(e1), ev(e2)]), 429, 'quota_exceeded');
    assert.equal((await ingest(svc.url, q.keys.secret, ev(e1))).status, 200);
    assert.equal(await storedEvents(svc.url, q.keys.secret), 1);
  });

  test('an id is remembered for 48 hours: a repeat 47 h later is not counted, one 48 h later is', async () => {
    const saved = clock.now();
    try {
      const c = await createProject(svc.url, svc.adminKey, {});
      const e = id('window');
      const from = new Date(clock.now()).toISOString().slice(0, 10);
      assert.equal((await ingest(svc.url, c.keys.secret, ev(e))).status, 200);
      clock.advance(47 * HOUR_MS);
      assert.equal((await ingest(svc.url, c.keys.secret, ev(e))).status, 200);
      clock.advance(HOUR_MS + 1000);
      assert.equal((await ingest(svc.url, c.keys.secret, ev(e))).status, 200);
      assert.equal(await storedEvents(svc.url, c.keys.secret, `?from=${from}`), 2);
    } finally {
      clock.set(saved);
    }
  });

  test('eventId must be a string of 1 to 64 characters', async () => {
    const before = await storedEvents(svc.url, a.keys.secret);
    for (const eventId of ['', 'x'.repeat(65), 42, null, ['x'], { id: 'x' }]) {
      const r = await ingest(svc.url, a.keys.secret, pv('/', { eventId }));
      assertError(r, 400, 'invalid_event');
      assert.deepEqual(r.body.error.details.map((d: { path: string }) => d.path), ['eventId'], JSON.stringify(eventId));
    }
    assert.equal((await ingest(svc.url, a.keys.secret, pv('/', { eventId: 'x'.repeat(64) + n++ }))).status, 400);
    assert.equal((await ingest(svc.url, a.keys.secret, pv('/', { eventId: `${n++}`.padEnd(64, 'y') }))).status, 200);
    assert.equal(await storedEvents(svc.url, a.keys.secret), before + 1);
  });
});

describe('ids survive restarts and snapshots', () => {
  test('a repeat after a restart (log replay), after a snapshot, and after a snapshot plus a replayed tail is counted once', async () => {
    const rclock = testClock('2026-11-21T12:00:00Z');
    let r = await startTestService({}, { now: rclock.now });
    try {
      const c = await createProject(r.url, r.adminKey, {});
      const key = c.keys.secret;
      assert.equal((await ingest(r.url, key, [ev('replayed'), ev('replayed')])).status, 200);

      r = await r.restart(); // no snapshot yet: the id comes back by replaying the log
      assert.equal((await ingest(r.url, key, ev('replayed'))).status, 200);
      assert.equal(await storedEvents(r.url, key), 1);

      assert.equal((await ingest(r.url, key, ev('snapshotted'))).status, 200);
      await r.service.engine.snapshotNow();
      assert.equal((await ingest(r.url, key, ev('in-the-tail'))).status, 200);
      r = await r.restart(); // snapshot holds 'replayed' and 'snapshotted'; the tail after it holds 'in-the-tail'
      for (const e of ['replayed', 'snapshotted', 'in-the-tail']) assert.equal((await ingest(r.url, key, [ev(e), ev(e)])).status, 200);
      assert.equal(await storedEvents(r.url, key), 3);

      await r.service.engine.snapshotNow();
      r = await r.restart();
      for (const e of ['replayed', 'snapshotted', 'in-the-tail']) assert.equal((await ingest(r.url, key, ev(e))).status, 200);
      assert.equal(await storedEvents(r.url, key), 3);

      // and the 48-hour window is measured from the first receipt, across restarts too
      rclock.advance(48 * HOUR_MS + 1000);
      r = await r.restart();
      assert.equal((await ingest(r.url, key, ev('replayed'))).status, 200);
      assert.equal(await storedEvents(r.url, key, '?from=2026-11-21'), 4);
    } finally {
      await r.destroy();
    }
  });
});
