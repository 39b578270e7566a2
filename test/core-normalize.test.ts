import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sortedBreakdown } from '../src/core/capped-counter.ts';
import { parseEvent } from '../src/core/event-schema.ts';
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

test('a breakdown keeps a "__proto__" key like any other', () => {
  const b = sortedBreakdown(new Map([['__proto__', 2], ['x', 3]]));
  assert.deepEqual(Object.entries(b), [['x', 3], ['__proto__', 2]]);
  assert.equal(JSON.parse(JSON.stringify(b)).__proto__, 2);
});
