import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sortedBreakdown } from '../src/core/capped-counter.ts';
import { isValidDate, utcMidnight } from '../src/core/dates.ts';
import { EventSchema, parseEvent } from '../src/core/event-schema.ts';
import { urlPath } from '../src/core/normalize.ts';

test('a page is one key whether sent as a path or an absolute URL', () => {
  const rows: Array<[string, string]> = [
    ['/café?x=1#top', '/caf%C3%A9'],
    ['https://site.example/café', '/caf%C3%A9'],
    ['/pricing?utm_source=x', '/pricing'],
    ['https://site.example', '/'],
    ['/a b', '/a%20b'],
    ['', ''],
  ];
  for (const [url, path] of rows) assert.equal(urlPath(url), path, url);
});

test('an ISO timestamp must name a real calendar date, and one bad timestamp is one problem', () => {
  const bad = parseEvent({ event: 'x', timestamp: '2026-11-31T12:00:00Z' });
  assert.ok(!bad.ok);
  assert.deepEqual(bad.issues.map((i) => i.path), ['timestamp']);
  const junk = parseEvent({ event: 'x', timestamp: 'yesterday' });
  assert.ok(!junk.ok && junk.issues.length === 1);
  assert.ok(parseEvent({ event: 'x', timestamp: '2026-11-30T12:00:00+01:00' }).ok);
  assert.ok(!parseEvent({ event: 'x', timestamp: 1.5 }).ok);
});

test('a calendar date is real exactly when Date reads it back unchanged (every day of 0001-9999 around month ends)', () => {
  const byDate = (s: string) => {
    const [y, m, d] = s.split('-').map(Number) as [number, number, number];
    const t = Date.UTC(y, m - 1, d);
    return Number.isFinite(t) && new Date(t).toISOString().slice(0, 10) === s;
  };
  const pad = (n: number, w: number) => String(n).padStart(w, '0');
  for (const y of [1, 99, 100, 400, 1600, 1700, 1900, 2000, 2024, 2025, 2026, 2100, 2400, 9999]) {
    for (let m = 0; m <= 13; m++) {
      for (const d of [0, 1, 27, 28, 29, 30, 31, 32]) {
        const s = `${pad(y, 4)}-${pad(m, 2)}-${pad(d, 2)}`;
        assert.equal(isValidDate(s), byDate(s), s);
        assert.equal(utcMidnight(s), Date.parse(`${s}T00:00:00Z`), `utcMidnight ${s}`);
      }
    }
  }
  assert.equal(isValidDate('2026-1-01'), false);
  for (const s of ['2026-1-01', '0x1f-01-01', '2026-11-3a', '', '2026-11-300']) assert.deepEqual(utcMidnight(s), Date.parse(`${s}T00:00:00Z`), s);
  for (let t = Date.UTC(1999, 11, 20); t < Date.UTC(2031, 0, 10); t += 86_400_000) assert.equal(utcMidnight(new Date(t).toISOString().slice(0, 10)), t);
});

test('the fast path takes exactly the timestamps the schema takes (ms or ISO-8601 with a real date)', () => {
  const stamps: unknown[] = [
    '2026-11-30T12:00:00Z', '2026-11-30T12:00:00+01:00', '2026-11-30T12:00:00-0530', '2026-11-30T12:00', '2026-11-30T12:00:00.123456789Z',
    '2024-02-29T00:00:00Z', '2025-02-29T00:00:00Z', '2026-11-31T12:00:00Z', '2026-13-01T00:00:00Z', '0099-01-01T00:00:00Z',
    '2026-11-30', '2026-11-30 12:00:00Z', 'yesterday', '', '2026-11-30T25:00:00Z', '2026-11-30T12:00:00+99:99', 1732960000000, 0, -1, 1.5,
  ];
  for (const timestamp of stamps) {
    const event = { event: 'page_view', url: '/', timestamp };
    assert.equal(parseEvent(event).ok, EventSchema.safeParse(event).success, String(timestamp));
  }
});

test('a breakdown keeps a "__proto__" key like any other', () => {
  const b = sortedBreakdown(new Map([['__proto__', 2], ['x', 3]]));
  assert.deepEqual(Object.entries(b), [['x', 3], ['__proto__', 2]]);
  assert.equal(JSON.parse(JSON.stringify(b)).__proto__, 2);
});
