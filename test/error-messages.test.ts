import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { status, type ServiceError } from '@grpc/grpc-js';
import { AnalyticsClient } from '../src/grpc/client.ts';
import { assertError, testClock } from './contract-helpers.ts';
import { api, createProject, startTestService, type CreatedProject, type TestService } from './helpers.ts';

/**
 * Errors that say what is wrong (CONTRACT "Event fields", "Keys and scopes", "Limits"), over HTTP and gRPC, and the
 * inputs that used to be refused or split for no good reason: an ISO time without an offset, a source name's case.
 * Also HEAD on /script.js and /health.
 */

const NOW = Date.parse('2026-11-25T12:00:00Z');
const clock = testClock(NOW);
let svc: TestService;
let p: CreatedProject;
let grpc: AnalyticsClient;

before(async () => {
  svc = await startTestService({}, { now: clock.now });
  p = await createProject(svc.url, svc.adminKey, { monthly_quota: 0 });
  grpc = new AnalyticsClient(svc.grpcAddress, { key: p.keys.secret });
});

after(async () => {
  grpc.close();
  await svc.destroy();
});

async function refusal(call: Promise<unknown>): Promise<ServiceError> {
  try {
    await call;
  } catch (err) {
    return err as ServiceError;
  }
  throw new Error('the call succeeded, a refusal was expected');
}

function send(key: string | undefined, body: unknown, headers: Record<string, string> = {}) {
  return api(svc.url, '/analytics', { ...(key === undefined ? {} : { key }), body, headers });
}

test('a timestamp in seconds since epoch is refused with a message that says so, over HTTP and gRPC', async () => {
  const seconds = Math.floor(NOW / 1000) - 60;
  const r = await send(p.keys.secret, { event: 'signup', timestamp: seconds });
  assertError(r, 400, 'invalid_event');
  const detail = r.body.error.details[0];
  assert.equal(detail.path, 'timestamp');
  assert.match(detail.message, /looks like seconds since epoch/);
  assert.match(detail.message, /milliseconds/);
  // a timestamp really in the past keeps its own message
  const old = await send(p.keys.secret, { event: 'signup', timestamp: NOW - 40 * 86_400_000 });
  assert.match(old.body.error.details[0].message, /more than 31 days in the past/);

  const err = await refusal(grpc.ingest({ events: [{ event: 'signup', timestamp: { case: 'timestampMs', value: BigInt(seconds) } }] }));
  assert.equal(err.code, status.INVALID_ARGUMENT);
  assert.match(err.details, /looks like seconds since epoch/);
});

test('an ISO date-time without an offset is read as UTC and accepted', async () => {
  const q = await createProject(svc.url, svc.adminKey, { monthly_quota: 0, timezone: 'UTC' });
  const r = await send(q.keys.secret, [
    { event: 'page_view', url: '/', sessionId: 'a', timestamp: '2026-11-25T10:00:00' },
    // 23:30 UTC is still the 24th: read as local time on a server east of UTC it would not be
    { event: 'page_view', url: '/', sessionId: 'b', timestamp: '2026-11-24T23:30' },
  ]);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const m = await api(svc.url, '/metrics?from=2026-11-24&to=2026-11-25', { key: q.keys.secret });
  assert.deepEqual(
    m.body.daily.map((d: { date: string; pageviews: number }) => [d.date, d.pageviews]),
    [['2026-11-24', 1], ['2026-11-25', 1]],
  );
  const recent = m.body.recentEvents.map((e: { ts: number }) => e.ts).sort();
  assert.deepEqual(recent, [Date.parse('2026-11-24T23:30:00Z'), Date.parse('2026-11-25T10:00:00Z')]);
  const bad = await send(q.keys.secret, { event: 'x', timestamp: '2026-11-31T10:00:00' });
  assertError(bad, 400, 'invalid_event');
});

test('a Bearer key that is unknown, cut short or revoked says so; a missing or malformed header asks for one', async () => {
  const unknownMessage = /unknown or revoked/;
  for (const key of [p.keys.secret.slice(0, 12), `sk_${'A'.repeat(32)}`, 'not-a-key']) {
    const r = await send(key, { event: 'signup' });
    assertError(r, 401, 'unauthorized');
    assert.match(r.body.error.message, unknownMessage, key);
    assert.doesNotMatch(r.body.error.message, /send Authorization/, key);
  }
  const made = await api(svc.url, `/projects/${p.project.id}/keys`, { key: p.keys.secret, body: { type: 'secret' } });
  assert.equal(made.status, 200, JSON.stringify(made.body));
  const revoked = await api(svc.url, `/projects/${p.project.id}/keys/${made.body.id}`, { key: p.keys.secret, method: 'DELETE' });
  assert.equal(revoked.status, 200);
  const r = await send(made.body.key, { event: 'signup' });
  assertError(r, 401, 'unauthorized');
  assert.match(r.body.error.message, unknownMessage);

  for (const headers of [{}, { authorization: 'Basic dXNlcjpwYXNz' }, { authorization: 'Bearer' }] as Array<Record<string, string>>) {
    const missing = await send(undefined, { event: 'signup' }, headers);
    assertError(missing, 401, 'unauthorized');
    assert.match(missing.body.error.message, /send Authorization: Bearer <API key>/, JSON.stringify(headers));
  }

  const err = await refusal(grpc.ingest({ events: [{ event: 'signup' }] }, { key: p.keys.secret.slice(0, 12) }));
  assert.equal(err.code, status.UNAUTHENTICATED);
  assert.match(err.details, unknownMessage);
});

test('a nested object in eventParams is refused saying nested objects are not allowed and which values are', async () => {
  const r = await send(p.keys.secret, [{ event: 'ok' }, { event: 'signup', eventParams: { plan: { name: 'pro' } } }]);
  assertError(r, 400, 'invalid_event');
  const [detail] = r.body.error.details;
  assert.equal(detail.index, 1);
  assert.equal(detail.path, 'eventParams.plan');
  assert.match(detail.message, /nested objects are not allowed/);
  assert.match(detail.message, /string, number, boolean or null/);
  const list = await send(p.keys.secret, { event: 'signup', eventParams: { tags: ['a'] } });
  assert.match(list.body.error.details[0].message, /arrays are not allowed.*string, number, boolean or null/);
});

test('429 quota_exceeded names monthly_quota and both ways to raise it', async () => {
  const q = await createProject(svc.url, svc.adminKey, { monthly_quota: 2 });
  assert.equal((await send(q.keys.secret, [{ event: 'a' }, { event: 'b' }])).status, 200);
  const r = await send(q.keys.secret, { event: 'c' });
  assertError(r, 429, 'quota_exceeded');
  const message: string = r.body.error.message;
  assert.match(message, /monthly_quota of 2 events/);
  assert.ok(message.includes(`PATCH /projects/${q.project.id}`), message);
  assert.ok(message.includes(`npx analytics projects update ${q.project.id} --quota N`), message);
  const raised = await api(svc.url, `/projects/${q.project.id}`, { key: q.keys.secret, method: 'PATCH', body: { monthly_quota: 10 } });
  assert.equal(raised.status, 200, JSON.stringify(raised.body));
  assert.equal((await send(q.keys.secret, { event: 'c' })).status, 200, 'the PATCH the message names works');
});

test('known sources match in any case: utm_source=twitter and a t.co referrer are one source, Twitter', async () => {
  const q = await createProject(svc.url, svc.adminKey, { monthly_quota: 0 });
  const r = await send(q.keys.secret, [
    { event: 'page_view', url: 'https://a.example/?utm_source=twitter', sessionId: 's1' },
    { event: 'page_view', url: 'https://a.example/', referrer: 'https://t.co/xyz', sessionId: 's2' },
    { event: 'page_view', url: 'https://a.example/?utm_source=TWITTER', sessionId: 's3' },
    { event: 'page_view', url: 'https://a.example/', referrer: 'google', sessionId: 's4' },
    { event: 'page_view', url: 'https://a.example/?utm_source=newsletter', sessionId: 's5' },
  ]);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const m = await api(svc.url, '/metrics', { key: q.keys.secret });
  assert.deepEqual(m.body.trafficSources, { Twitter: 3, Google: 1, newsletter: 1 });
});

test('HEAD /script.js and HEAD /health answer as GET without a body', async () => {
  for (const [route, headers] of [
    ['/script.js', { 'accept-encoding': 'identity' }],
    ['/script.js', { 'accept-encoding': 'gzip' }],
    ['/health', {}],
  ] as const) {
    const get = await fetch(svc.url + route, { headers });
    const getBody = Buffer.from(await get.arrayBuffer());
    const head = await fetch(svc.url + route, { method: 'HEAD', headers });
    assert.equal(head.status, get.status, route);
    assert.equal((await head.arrayBuffer()).byteLength, 0, `${route}: no body`);
    // hop-by-hop headers (connection, keep-alive) say how the socket goes on, not what the answer is
    const strip = (h: Headers) => Object.fromEntries([...h].filter(([k]) => !['date', 'content-length', 'connection', 'keep-alive'].includes(k)));
    assert.deepEqual(strip(head.headers), strip(get.headers), route);
    if (route === '/script.js') {
      assert.equal(head.headers.get('content-length'), get.headers.get('content-length'), route);
      // fetch inflates a gzip body, so only an identity body's length can be checked against the header
      if (!get.headers.has('content-encoding')) assert.equal(Number(get.headers.get('content-length')), getBody.byteLength);
    }
  }
  const hashed = (await (await fetch(`${svc.url}/script.js`)).headers.get('etag'))!.replaceAll('"', '');
  const pinned = await fetch(`${svc.url}/script.${hashed}.js`, { method: 'HEAD' });
  assert.equal(pinned.status, 200);
  const post = await fetch(`${svc.url}/health`, { method: 'POST' });
  assert.equal(post.status, 405);
  assert.match(post.headers.get('allow')!, /HEAD/);
});
