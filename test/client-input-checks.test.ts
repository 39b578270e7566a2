import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { encodeEvent } from '../clients/typescript/src/encode-event.ts';
import { createClient, InvalidEventError } from '../clients/typescript/src/index.ts';
import { isRetryableStatus, parseRetryAfter, retryDelayMs } from '../clients/typescript/src/retry-policy.ts';
import { parseEvent } from '../src/core/event-schema.ts';
import { guardJson } from '../src/core/json-guard.ts';
import { MAX_EVENT_BYTES } from '../src/core/limits.ts';

/** A port nothing listens on: the client must hold, check and count without a service. */
const NOWHERE = 'http://127.0.0.1:9/analytics';

function offlineClient() {
  return createClient({ apiKey: 'sk_test', projectId: 'p_test', endpoint: NOWHERE, flushIntervalMs: 60_000, maxRetries: 0 });
}

function throwsAt(fn: () => unknown, path: string): void {
  assert.throws(fn, (e: unknown) => e instanceof InvalidEventError && e instanceof TypeError && e.path === path);
}

test('a bad event throws InvalidEventError at the call and is never queued', async () => {
  const client = offlineClient();
  throwsAt(() => client.track('x'.repeat(65)), 'event');
  throwsAt(() => client.track('a\u0007b'), 'event');
  throwsAt(() => client.pageView(), 'url'); // Node has no location to default to
  throwsAt(() => client.pageView({ url: 'ftp://a.example/' }), 'url');
  throwsAt(() => client.track('e', Object.fromEntries(Array.from({ length: 26 }, (_, i) => [`k${i}`, i]))), 'eventParams');
  throwsAt(() => client.track('e', { long: 'x'.repeat(501) }), 'eventParams.long');
  throwsAt(() => client.track('e', { ['k'.repeat(41)]: 1 }), `eventParams.${'k'.repeat(41)}`);
  throwsAt(() => client.track('e', { n: Number.NaN }), 'eventParams.n');
  throwsAt(() => client.track('e', {}, { referrer: 'not a url '.repeat(11) }), 'referrer');
  throwsAt(() => client.track('e', {}, { sessionId: '' }), 'sessionId');
  throwsAt(() => client.track('e', {}, { timestamp: Date.now() - 32 * 24 * 3600 * 1000 }), 'timestamp');
  throwsAt(() => client.track('e', {}, { timestamp: new Date(Date.now() + 10 * 60 * 1000) }), 'timestamp');
  throwsAt(() => client.track('e', {}, { page: { a: { b: { c: { d: { e: { f: 1 } } } } } } }), 'page.a.b.c.d.e');
  throwsAt(() => client.track('e', {}, JSON.parse('{"page":{"__proto__":{"x":1}}}')), 'page.__proto__');
  throwsAt(() => client.track('e', {}, { blob: 'x'.repeat(MAX_EVENT_BYTES) }), '');
  throwsAt(() => client.track('e', {}, { eventParams: {} } as never), 'context.eventParams');
  throwsAt(() => client.purchase('T1', 10, 'EUR', [{ item_id: 'a', price: 1, quantity: 1.5 }]), 'items.0.quantity');
  throwsAt(() => client.purchase('', 10, 'EUR', []), 'eventParams.transaction_id');
  throwsAt(() => client.purchase('T1', Number.POSITIVE_INFINITY, 'EUR', []), 'eventParams.value');
  assert.equal(client.stats().queued, 0);

  client.track('fine', { plan: 'pro' }, { userId: 'u1', timestamp: new Date() });
  assert.equal(client.stats().queued, 1, 'the good event is queued, untouched by the bad ones before it');
  await client.shutdown();
});

test('captureException turns anything thrown into a valid event with a description of at most 500 characters', async () => {
  const client = offlineClient();
  const long = new Error('é'.repeat(499) + '😀'); // the cut would split the surrogate pair
  assert.doesNotThrow(() => client.captureException(long, { fatal: true }));
  assert.doesNotThrow(() => client.captureException('plain string'));
  assert.doesNotThrow(() => client.captureException({ toJSON: () => { throw new Error('nope'); } }));
  assert.doesNotThrow(() => client.captureException(undefined));
  assert.equal(client.stats().queued, 4);
  await client.shutdown();
});

test('defaults cannot carry per-event fields', () => {
  const make = (defaults: Record<string, string>) => () =>
    createClient({ apiKey: 'sk_test', projectId: 'p_test', endpoint: NOWHERE, defaults });
  assert.throws(make({ eventId: 'same-for-all' }), TypeError);
  assert.throws(make({ timestamp: '2026-01-01T00:00:00Z' }), TypeError);
  assert.throws(make({ event: 'x' }), TypeError);
});

test('every event gets its own eventId, and a caller-supplied one is kept', async () => {
  const client = offlineClient();
  const a = client.track('e');
  const b = client.track('e');
  assert.notEqual(a, b);
  assert.ok(a.length <= 64);
  assert.equal(client.track('e', {}, { eventId: 'order-1001' }), 'order-1001');
  await client.shutdown();
});

test('a full queue drops the oldest events and counts them', async () => {
  const errors: string[] = [];
  const client = createClient({
    apiKey: 'sk_test', projectId: 'p_test', endpoint: NOWHERE, flushIntervalMs: 60_000, maxRetries: 0, maxQueue: 3,
    onError: (e) => errors.push(e.reason),
  });
  for (let i = 0; i < 5; i++) client.track('e', { i });
  assert.deepEqual({ queued: client.stats().queued, dropped: client.stats().dropped }, { queued: 3, dropped: 2 });
  assert.deepEqual(errors, ['dropped', 'dropped']);
  await client.shutdown(); // nothing listens: the remaining batch fails after its one attempt
  assert.deepEqual({ ...client.stats(), retries: 0 }, { queued: 0, inFlight: 0, sent: 0, dropped: 2, failed: 3, retries: 0, requests: 1 });
  assert.equal(errors.at(-1), 'retries_exhausted');
  client.track('late');
  assert.equal(client.stats().dropped, 3, 'events after shutdown are dropped and counted');
  assert.equal(errors.at(-1), 'closed');
});

test('network trouble, 408, 429 and 5xx are retried; 400, 401, 403, 413 and 415 never are', () => {
  for (const status of [408, 429, 500, 502, 503, 504]) assert.equal(isRetryableStatus(status), true, String(status));
  for (const status of [400, 401, 403, 404, 413, 415]) assert.equal(isRetryableStatus(status), false, String(status));
});

test('Retry-After is read as seconds or as an HTTP date, and backoff grows with jitter inside its step', () => {
  const now = Date.parse('2026-11-21T10:00:00Z');
  assert.equal(parseRetryAfter('0', now), 0);
  assert.equal(parseRetryAfter('2', now), 2000);
  assert.equal(parseRetryAfter('Sat, 21 Nov 2026 10:00:05 GMT', now), 5000);
  assert.equal(parseRetryAfter('soon', now), undefined);
  assert.equal(parseRetryAfter(null, now), undefined);
  assert.equal(retryDelayMs(0, 500, 30_000, 1000), 1000);
  assert.equal(retryDelayMs(0, 500, 30_000, 90_000), 30_000);
  for (let attempt = 0; attempt < 10; attempt++) {
    const step = Math.min(30_000, 500 * 2 ** attempt);
    const d = retryDelayMs(attempt, 500, 30_000, undefined);
    assert.ok(d >= step / 2 && d <= step, `attempt ${attempt}: ${d} outside [${step / 2}, ${step}]`);
  }
});

/** Service verdict for one event sent the way the client sends it, inside `{ events: [...] }`. */
function serverAccepts(event: Record<string, unknown>): boolean {
  const body: unknown = JSON.parse(JSON.stringify({ events: [event] }));
  if (!guardJson(body).ok) return false;
  const parsed = (body as { events: unknown[] }).events[0];
  return parseEvent(parsed).ok && new TextEncoder().encode(JSON.stringify(parsed)).length <= MAX_EVENT_BYTES;
}

function clientAccepts(event: Record<string, unknown>): boolean {
  try {
    encodeEvent(event, Date.now());
    return true;
  } catch (e) {
    if (e instanceof InvalidEventError) return false;
    throw e;
  }
}

test('the client accepts exactly the events the service accepts (limits cannot drift)', () => {
  const around = (n: number) => fc.integer({ min: Math.max(0, n - 2), max: n + 2 });
  // Mostly ordinary lengths, sometimes right at a limit, so both verdicts come up often.
  const str = (n: number) =>
    fc.oneof({ weight: 6, arbitrary: fc.constantFrom('ab', 'x1') }, { weight: 1, arbitrary: around(n).map((len) => 'x'.repeat(len)) });
  const scalar = fc.oneof(fc.string({ maxLength: 3 }), str(500), fc.double(), fc.boolean(), fc.constant(null));
  const nested: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
    node: fc.oneof({ depthSize: 'small' }, fc.integer(), fc.dictionary(fc.constantFrom('a', 'b', 'constructor'), tie('node'), { maxKeys: 2 })),
  })).node;
  const event = fc.record(
    {
      event: fc.oneof(str(64), fc.constantFrom('page_view', 'a\u0001', '')),
      url: fc.oneof(fc.constant('/p'), fc.constant('https://a.example/x'), fc.constant('mailto:x'), str(2048).map((s) => `/${s}`)),
      referrer: fc.oneof(str(100), fc.constant(''), str(2048).map((s) => `https://r.example/${s}`.slice(0, 2049))),
      sessionId: str(128),
      userId: str(128),
      country: str(64),
      device: str(32),
      eventId: str(64),
      eventParams: fc.dictionary(fc.oneof(str(40), fc.constant('')), scalar, { maxKeys: 27 }),
      items: fc.array(fc.record({ item_id: fc.oneof(str(128), fc.constant('')), price: fc.double(), quantity: fc.oneof(fc.integer(), fc.double()) }), { maxLength: 2 }),
      page: nested,
    },
    { requiredKeys: ['event'] },
  );
  const verdicts = { accepted: 0, refused: 0 };
  fc.assert(
    fc.property(event, (e) => {
      // Drop values JSON cannot carry: the wire never sees them, so neither side judges them.
      const wire = JSON.parse(JSON.stringify(e)) as Record<string, unknown>;
      const accepted = clientAccepts(wire);
      assert.equal(accepted, serverAccepts(wire), JSON.stringify(wire).slice(0, 300));
      verdicts[accepted ? 'accepted' : 'refused']++;
    }),
    { numRuns: 2000 },
  );
  assert.ok(verdicts.accepted > 20 && verdicts.refused > 20, `both verdicts exercised: ${JSON.stringify(verdicts)}`);
});
