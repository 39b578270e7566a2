import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { assertError, DAY_MS, HOUR_MS, ingest, pv, storedEvents, testClock, type TestClock } from './contract-helpers.ts';
import { api, createProject, startTestService, type CreatedProject, type TestService } from './helpers.ts';

/**
 * CONTRACT: a project's IANA timezone decides its days, for ingest and for GET /metrics; timestamps are accepted
 * from 31 days back to 5 minutes ahead; DST days (23, 23.5 or 25 hours) are still one day each; every date
 * parameter rule of GET /metrics. The engine runs on a test clock, so none of this depends on when it runs.
 */

const NOW = '2026-11-21T12:00:00Z';
let svc: TestService;
let clock: TestClock;
let utc: CreatedProject;
let ny: CreatedProject;

before(async () => {
  clock = testClock(NOW);
  svc = await startTestService({}, { now: clock.now });
  utc = await createProject(svc.url, svc.adminKey, { name: 'UTC' });
  ny = await createProject(svc.url, svc.adminKey, { name: 'New York', timezone: 'America/New_York' });
});
after(() => svc.destroy());

/** Page views per day of the range, as GET /metrics reports them. */
async function perDay(key: string, from: string, to: string): Promise<Record<string, number>> {
  const m = await api(svc.url, `/metrics?from=${from}&to=${to}`, { key });
  assert.equal(m.status, 200, JSON.stringify(m.body));
  const out: Record<string, number> = {};
  for (const d of m.body.daily as Array<{ date: string; pageviews: number }>) out[d.date] = d.pageviews;
  assert.equal(Object.values(out).reduce((x, y) => x + y, 0), m.body.pageviews, 'the days sum to the range');
  return out;
}

describe("a project's timezone decides its days", () => {
  test('an event at 03:00 UTC counts on the previous local day in New York and on the same day in UTC', async () => {
    const ts = Date.parse('2026-11-20T03:00:00Z'); // 22:00 on 19 November in New York
    for (const p of [utc, ny]) assert.equal((await ingest(svc.url, p.keys.secret, pv('/late', { timestamp: ts, sessionId: 'tz' }))).status, 200);
    assert.deepEqual(await perDay(ny.keys.secret, '2026-11-19', '2026-11-20'), { '2026-11-19': 1, '2026-11-20': 0 });
    assert.deepEqual(await perDay(utc.keys.secret, '2026-11-19', '2026-11-20'), { '2026-11-19': 0, '2026-11-20': 1 });
    const m = await api(svc.url, '/metrics?date=2026-11-19', { key: ny.keys.secret });
    assert.equal(m.body.timezone, 'America/New_York');
    assert.equal(m.body.recentEvents[0].ts, ts);
  });

  const todays: Array<{ tz: string; at: string; today: string }> = [
    { tz: 'America/New_York', at: '2026-11-21T03:00:00Z', today: '2026-11-20' },
    { tz: 'America/Los_Angeles', at: '2026-11-21T07:59:59Z', today: '2026-11-20' },
    { tz: 'UTC', at: '2026-11-21T03:00:00Z', today: '2026-11-21' },
    { tz: 'Asia/Tokyo', at: '2026-11-20T15:00:00Z', today: '2026-11-21' },
    { tz: 'Asia/Kolkata', at: '2026-11-20T18:29:59Z', today: '2026-11-20' },
    { tz: 'Asia/Kolkata', at: '2026-11-20T18:30:00Z', today: '2026-11-21' },
    { tz: 'Pacific/Kiritimati', at: '2026-11-21T12:00:00Z', today: '2026-11-22' },
    { tz: 'Pacific/Pago_Pago', at: '2026-11-21T10:00:00Z', today: '2026-11-20' },
  ];
  for (const t of todays) {
    test(`GET /metrics without dates answers the local day in ${t.tz} (${t.today} at ${t.at}), counting an event sent now`, async () => {
      const saved = clock.now();
      try {
        clock.set(t.at);
        const p = await createProject(svc.url, svc.adminKey, { timezone: t.tz });
        assert.equal((await ingest(svc.url, p.keys.secret, pv('/now'))).status, 200);
        const m = await api(svc.url, '/metrics', { key: p.keys.secret });
        assert.equal(m.status, 200);
        assert.deepEqual([m.body.from, m.body.to, m.body.timezone], [t.today, t.today, t.tz]);
        assert.equal(m.body.pageviews, 1);
        assert.deepEqual(m.body.daily.map((d: { date: string }) => d.date), [t.today]);
        // `from` alone runs to the same local today
        const since = await api(svc.url, `/metrics?from=${t.today}`, { key: p.keys.secret });
        assert.deepEqual([since.body.from, since.body.to], [t.today, t.today]);
      } finally {
        clock.set(saved);
      }
    });
  }
});

describe('DST days are one day each', () => {
  /** Local midnight at the start of the DST day and of the next day, as UTC instants (checked against Intl below). */
  const days: Array<{ tz: string; day: string; before: string; after: string; start: string; end: string; hours: number }> = [
    { tz: 'America/New_York', day: '2026-03-08', before: '2026-03-07', after: '2026-03-09', start: '2026-03-08T05:00:00Z', end: '2026-03-09T04:00:00Z', hours: 23 },
    { tz: 'America/New_York', day: '2026-11-01', before: '2026-10-31', after: '2026-11-02', start: '2026-11-01T04:00:00Z', end: '2026-11-02T05:00:00Z', hours: 25 },
    { tz: 'Europe/Berlin', day: '2026-03-29', before: '2026-03-28', after: '2026-03-30', start: '2026-03-28T23:00:00Z', end: '2026-03-29T22:00:00Z', hours: 23 },
    { tz: 'Europe/Berlin', day: '2026-10-25', before: '2026-10-24', after: '2026-10-26', start: '2026-10-24T22:00:00Z', end: '2026-10-25T23:00:00Z', hours: 25 },
    { tz: 'Australia/Sydney', day: '2026-04-05', before: '2026-04-04', after: '2026-04-06', start: '2026-04-04T13:00:00Z', end: '2026-04-05T14:00:00Z', hours: 25 },
    { tz: 'Australia/Lord_Howe', day: '2026-10-04', before: '2026-10-03', after: '2026-10-05', start: '2026-10-03T13:30:00Z', end: '2026-10-04T13:00:00Z', hours: 23.5 },
  ];
  for (const d of days) {
    test(`${d.tz} ${d.day} is ${d.hours} hours long and every event of it lands on it, none on its neighbours`, async () => {
      const start = Date.parse(d.start);
      const end = Date.parse(d.end);
      assert.equal((end - start) / HOUR_MS, d.hours, 'the fixture itself');
      const local = new Intl.DateTimeFormat('en-CA', { timeZone: d.tz, year: 'numeric', month: '2-digit', day: '2-digit' });
      assert.deepEqual([local.format(start - 1), local.format(start), local.format(end - 1), local.format(end)], [d.before, d.day, d.day, d.after]);

      const saved = clock.now();
      try {
        clock.set(end + 2 * DAY_MS); // every timestamp below is within the last 31 days
        const p = await createProject(svc.url, svc.adminKey, { timezone: d.tz });
        // the clocks change at local 02:00 or 03:00: these instants fall before, inside and after the skipped or
        // repeated hour (in New York on 1 November, +1.5 h is the first 01:30 and +2.5 h the second)
        const instants = [start - 1, start, start + 1.5 * HOUR_MS, start + 2.5 * HOUR_MS, start + 3.5 * HOUR_MS, end - 1, end];
        const batch = instants.map((ts, i) => pv(`/${i}`, { timestamp: ts, sessionId: `dst-${i}` }));
        assert.equal((await ingest(svc.url, p.keys.secret, batch)).status, 200);
        assert.deepEqual(await perDay(p.keys.secret, d.before, d.after), { [d.before]: 1, [d.day]: 5, [d.after]: 1 });
        const only = await api(svc.url, `/metrics?date=${d.day}`, { key: p.keys.secret });
        assert.equal(only.body.pageviews, 5);
        assert.equal(only.body.sessions, 5);
        assert.deepEqual(only.body.recentEvents.map((e: { ts: number }) => e.ts).sort((x: number, y: number) => x - y), instants.slice(1, 6));
      } finally {
        clock.set(saved);
      }
    });
  }
});

describe('event timestamps', () => {
  const now = Date.parse(NOW);
  const accepted: Array<{ name: string; timestamp: number | string; day: string }> = [
    { name: 'exactly 31 days ago', timestamp: now - 31 * DAY_MS, day: '2026-10-21' },
    { name: 'one ms less than 31 days ago', timestamp: now - 31 * DAY_MS + 1, day: '2026-10-21' },
    { name: 'now', timestamp: now, day: '2026-11-21' },
    { name: 'exactly 5 minutes ahead', timestamp: now + 5 * 60_000, day: '2026-11-21' },
    { name: 'an ISO-8601 string in UTC', timestamp: '2026-11-20T10:00:00Z', day: '2026-11-20' },
    { name: 'an ISO-8601 string with milliseconds', timestamp: '2026-11-19T10:00:00.123Z', day: '2026-11-19' },
    { name: 'an ISO-8601 string with microseconds', timestamp: '2026-11-19T10:00:00.123456Z', day: '2026-11-19' },
    { name: 'an ISO-8601 string without seconds', timestamp: '2026-11-18T10:00Z', day: '2026-11-18' },
    { name: 'an ISO-8601 string with a positive offset', timestamp: '2026-11-18T02:00:00+05:30', day: '2026-11-17' },
    { name: 'an ISO-8601 string with a negative offset', timestamp: '2026-11-17T22:00:00-08:00', day: '2026-11-18' },
    { name: 'an ISO-8601 string with a compact offset', timestamp: '2026-11-16T12:00:00+0100', day: '2026-11-16' },
    { name: 'an ISO-8601 string without an offset (read as UTC)', timestamp: '2026-11-15T23:30:00', day: '2026-11-15' },
  ];
  for (const a of accepted) {
    test(`accepts a timestamp ${a.name} and counts it on its own day (${a.day} UTC)`, async () => {
      const p = await createProject(svc.url, svc.adminKey, {});
      const r = await ingest(svc.url, p.keys.secret, pv('/t', { timestamp: a.timestamp }));
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.ts, now, 'ts acknowledges the receive time');
      const m = await api(svc.url, `/metrics?date=${a.day}`, { key: p.keys.secret });
      assert.equal(m.body.pageviews, 1);
    });
  }

  const refused: Array<{ name: string; timestamp: unknown }> = [
    { name: 'one ms more than 31 days ago', timestamp: now - 31 * DAY_MS - 1 },
    { name: 'one ms more than 5 minutes ahead', timestamp: now + 5 * 60_000 + 1 },
    { name: 'in seconds rather than milliseconds', timestamp: Math.floor(now / 1000) },
    { name: 'zero (1970)', timestamp: 0 },
    { name: 'negative', timestamp: -1 },
    { name: 'fractional', timestamp: now + 0.5 },
    { name: 'an ISO-8601 string a year ago', timestamp: '2025-11-21T12:00:00Z' },
    { name: 'an ISO-8601 string tomorrow', timestamp: '2026-11-22T12:00:00Z' },
    { name: 'a date without a time', timestamp: '2026-11-21' },
    { name: 'an impossible hour', timestamp: '2026-11-21T25:00:00Z' },
    { name: 'free text', timestamp: 'yesterday' },
    { name: 'milliseconds as a string', timestamp: String(now) },
    { name: 'a boolean', timestamp: true },
    { name: 'an object', timestamp: { ms: now } },
  ];
  for (const r of refused) {
    test(`refuses a timestamp ${r.name} with 400 invalid_event at path "timestamp" and stores nothing`, async () => {
      const before = await storedEvents(svc.url, utc.keys.secret, '?from=2026-10-01');
      const res = await ingest(svc.url, utc.keys.secret, [pv('/fine'), pv('/t', { timestamp: r.timestamp })]);
      assertError(res, 400, 'invalid_event');
      assert.deepEqual(fields(res.body.error.details), ['1 timestamp']);
      assert.equal(await storedEvents(svc.url, utc.keys.secret, '?from=2026-10-01'), before);
    });
  }

  test('refuses a timestamp of 1e309 (Infinity once parsed) with 400 invalid_event', async () => {
    const res = await ingest(svc.url, utc.keys.secret, undefined, { raw: '{"event":"x","timestamp":1e309}' });
    assertError(res, 400, 'invalid_event');
    assert.equal(res.body.error.details[0].path, 'timestamp');
  });

  test('lists the timestamp problem of every bad event of a batch, with its index', async () => {
    const res = await ingest(svc.url, utc.keys.secret, [pv('/', { timestamp: 0 }), pv('/'), pv('/', { timestamp: now + DAY_MS })]);
    assertError(res, 400, 'invalid_event');
    assert.deepEqual(fields(res.body.error.details), ['0 timestamp', '2 timestamp']);
  });
});

/** The distinct "index path" pairs of an error's details (one field may carry more than one message). */
function fields(details: Array<{ index: number; path: string }>): string[] {
  return [...new Set(details.map((d) => `${d.index} ${d.path}`))];
}

describe('GET /metrics date parameters', () => {
  const refused: Array<{ name: string; q: string }> = [
    { name: '`to` without `from`', q: 'to=2026-11-20' },
    { name: '`date` with `from`', q: 'date=2026-11-20&from=2026-11-19' },
    { name: '`date` with `to`', q: 'date=2026-11-20&to=2026-11-21' },
    { name: '`date` with `from` and `to`', q: 'date=2026-11-20&from=2026-11-19&to=2026-11-21' },
    { name: 'an empty `date`', q: 'date=' },
    { name: 'an empty `from`', q: 'from=' },
    { name: 'an empty `to`', q: 'from=2026-11-01&to=' },
    { name: 'month 13 in `date`', q: 'date=2026-13-01' },
    { name: 'month 13 in `from`', q: 'from=2026-13-01' },
    { name: 'month 00', q: 'date=2026-00-10' },
    { name: 'day 31 of November in `to`', q: 'from=2026-11-01&to=2026-11-31' },
    { name: '29 February of a common year', q: 'date=2026-02-29' },
    { name: 'day 00', q: 'date=2026-11-00' },
    { name: 'a date without leading zeros', q: 'date=2026-1-5' },
    { name: 'a date without dashes', q: 'date=20261121' },
    { name: 'a date-time', q: 'date=2026-11-21T00:00:00Z' },
    { name: 'a two-digit year', q: 'date=26-11-21' },
    { name: 'a date with a trailing space', q: 'date=2026-11-21%20' },
    { name: 'a date with slashes', q: 'date=2026%2F11%2F21' },
    { name: 'the word today', q: 'date=today' },
    { name: '`from` after `to`', q: 'from=2026-11-21&to=2026-11-20' },
    { name: '`from` after today without `to`', q: 'from=2026-11-22' },
    { name: 'a range of 367 days', q: 'from=2025-11-20&to=2026-11-21' },
    { name: 'a range of 367 days in the future', q: 'from=2027-01-01&to=2028-01-02' },
    { name: 'a range of ten thousand years', q: 'from=0001-01-01&to=9999-12-31' },
  ];
  for (const r of refused) {
    test(`refuses ${r.name} with 400 invalid_request`, async () => {
      const res = await api(svc.url, `/metrics?${r.q}`, { key: utc.keys.secret });
      assertError(res, 400, 'invalid_request');
    });
  }

  const ok: Array<{ name: string; q: string; from: string; to: string; days: number }> = [
    { name: 'no parameter (today)', q: '', from: '2026-11-21', to: '2026-11-21', days: 1 },
    { name: 'one `date`', q: 'date=2026-11-01', from: '2026-11-01', to: '2026-11-01', days: 1 },
    { name: '`from` alone, up to today', q: 'from=2026-11-15', from: '2026-11-15', to: '2026-11-21', days: 7 },
    { name: '`from` equal to `to`', q: 'from=2026-11-20&to=2026-11-20', from: '2026-11-20', to: '2026-11-20', days: 1 },
    { name: 'a range of exactly 366 days', q: 'from=2025-11-21&to=2026-11-21', from: '2025-11-21', to: '2026-11-21', days: 366 },
    { name: 'a leap year, 366 days', q: 'from=2024-01-01&to=2024-12-31', from: '2024-01-01', to: '2024-12-31', days: 366 },
    { name: '29 February of a leap year', q: 'date=2024-02-29', from: '2024-02-29', to: '2024-02-29', days: 1 },
    { name: 'a range in the future', q: 'from=2027-01-01&to=2027-01-31', from: '2027-01-01', to: '2027-01-31', days: 31 },
    { name: 'a range across a year end', q: 'from=2025-12-30&to=2026-01-02', from: '2025-12-30', to: '2026-01-02', days: 4 },
  ];
  for (const o of ok) {
    test(`answers ${o.name} with one combined figure and a daily series of ${o.days} day(s)`, async () => {
      const res = await api(svc.url, `/metrics${o.q ? `?${o.q}` : ''}`, { key: utc.keys.secret });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.deepEqual([res.body.from, res.body.to], [o.from, o.to]);
      const dates = res.body.daily.map((d: { date: string }) => d.date);
      assert.equal(dates.length, o.days);
      assert.deepEqual([dates[0], dates.at(-1)], [o.from, o.to]);
      assert.deepEqual(dates, [...dates].sort(), 'in order');
      assert.equal(new Set(dates).size, dates.length, 'no day twice');
    });
  }

  test('the days of a range cross a DST change in the project timezone without a gap or a repeat', async () => {
    const res = await api(svc.url, '/metrics?from=2026-10-31&to=2026-11-02', { key: ny.keys.secret });
    assert.deepEqual(res.body.daily.map((d: { date: string }) => d.date), ['2026-10-31', '2026-11-01', '2026-11-02']);
  });
});
