import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type ClientOptions, createClient, type DeliveryError } from '../clients/typescript/src/index.ts';
import type { MetricsResponse } from '../src/core/types.ts';
import { startProxy } from './forwarding-proxy.ts';
import { api, type CreatedProject, createProject, startTestService, type TestService } from './helpers.ts';

/**
 * The TypeScript client against a real service. Faults come from a small proxy in front of it that answers the
 * first attempts itself (503, 429 with Retry-After, a reset connection) or forwards and then loses the answer,
 * which is the case that makes eventId de-duplication necessary.
 */

/** What the proxy does with the next POST /analytics. */
type Fault =
  | { kind: 'status'; status: number; retryAfter?: string }
  /** forward, let the service commit, then answer 503 as if the response were lost on the way back */
  | { kind: 'commit-then-fail' }
  /** close the connection without an answer (a network error for the client) */
  | { kind: 'reset' };

interface FaultyProxy {
  endpoint: string;
  /** faults to apply, in order, to the next POSTs; then everything passes */
  faults: Fault[];
  /** bodies of every POST that reached the proxy */
  bodies: Array<{ events: Array<Record<string, unknown>> }>;
  close(): Promise<void>;
}

let service: TestService;
let proxy: FaultyProxy;

before(async () => {
  service = await startTestService();
  proxy = await startFaultyProxy(service.url);
});

after(async () => {
  await proxy?.close();
  await service?.destroy();
});

async function startFaultyProxy(target: string): Promise<FaultyProxy> {
  const state: FaultyProxy = { endpoint: '', faults: [], bodies: [], close: async () => {} };
  const proxy = await startProxy(target, async (req, res, body, forward) => {
    state.bodies.push(JSON.parse(body.toString()));
    const fault = state.faults.shift();
    if (fault?.kind === 'reset') return void req.socket.destroy();
    if (fault?.kind === 'status') {
      const headers: Record<string, string> = { 'Content-Type': 'application/json' };
      if (fault.retryAfter !== undefined) headers['Retry-After'] = fault.retryAfter;
      return void res.writeHead(fault.status, headers).end('{"ok":false,"error":{"code":"unavailable","message":"injected"}}');
    }
    const answer = await forward();
    if (fault?.kind === 'commit-then-fail') return void res.writeHead(503).end();
    res.writeHead(answer.status, answer.headers).end(answer.body);
  });
  state.endpoint = `${proxy.origin}/analytics`;
  state.close = proxy.close;
  return state;
}

async function newProject(name: string): Promise<CreatedProject> {
  return createProject(service.url, service.adminKey, { name });
}

async function metrics(project: CreatedProject): Promise<MetricsResponse> {
  const res = await api<MetricsResponse>(service.url, '/metrics', { key: project.keys.secret });
  assert.equal(res.status, 200);
  return res.body;
}

function clientFor(project: CreatedProject, options: Partial<ClientOptions> = {}) {
  return createClient({
    apiKey: project.keys.secret,
    projectId: project.project.id,
    endpoint: `${service.url}/analytics`,
    ...options,
  });
}

test('events are batched: 120 events with batchSize 50 arrive in 3 requests and are all counted', async () => {
  const project = await newProject('batching');
  let requests = 0;
  const counting: typeof fetch = (input, init) => {
    requests++;
    return fetch(input, init);
  };
  const client = clientFor(project, { batchSize: 50, flushIntervalMs: 60_000, fetch: counting });
  for (let i = 0; i < 120; i++) client.track('signup', { i }, { sessionId: `s${i % 7}` });
  await client.flush();
  assert.equal(requests, 3);
  assert.deepEqual(client.stats(), { queued: 0, inFlight: 0, sent: 120, dropped: 0, failed: 0, retries: 0, requests: 3 });
  const m = await metrics(project);
  assert.deepEqual(m.events, { signup: 120 });
  assert.equal(m.sessions, 7);
  await client.shutdown();
});

test('a lone event is sent after flushIntervalMs without any flush()', async () => {
  const project = await newProject('interval');
  const client = clientFor(project, { flushIntervalMs: 50 });
  client.pageView({ url: '/alone', sessionId: 's1' });
  const deadline = Date.now() + 5000;
  while ((await metrics(project)).pageviews === 0) {
    assert.ok(Date.now() < deadline, 'the timer never sent the event');
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(client.stats().sent, 1);
  await client.shutdown();
});

test('pageView, purchase and captureException send the documented event shapes', async () => {
  const project = await newProject('shapes');
  const client = clientFor(project, { endpoint: proxy.endpoint, defaults: { sessionId: 'checkout-1', device: 'Desktop' } });
  const sentBefore = proxy.bodies.length;
  client.pageView({ url: 'https://shop.example/checkout?step=2', referrer: 'https://www.bing.com/', country: 'de', screen: '1280x720' });
  client.purchase('T-1001', 59.9, 'EUR', [
    { item_id: 'sku-1', price: 29.95, quantity: 2, name: 'Mug' },
  ]);
  client.captureException(new Error('x'.repeat(600)), { fatal: true });
  client.captureException('a string was thrown');
  await client.shutdown();

  const [pageView, purchase, exception, thrownString] = proxy.bodies.slice(sentBefore).flatMap((b) => b.events);
  assert.equal(pageView?.['event'], 'page_view');
  assert.equal(pageView?.['screen'], '1280x720', 'page context travels as top-level fields');
  assert.deepEqual(purchase?.['eventParams'], { transaction_id: 'T-1001', value: 59.9, currency: 'EUR' });
  assert.deepEqual(purchase?.['items'], [{ item_id: 'sku-1', price: 29.95, quantity: 2, name: 'Mug' }]);
  assert.deepEqual(exception?.['eventParams'], { description: 'x'.repeat(500), fatal: true });
  assert.deepEqual(thrownString?.['eventParams'], { description: 'a string was thrown', fatal: false });
  for (const e of [pageView, purchase, exception, thrownString]) {
    assert.equal(e?.['projectId'], project.project.id);
    assert.match(String(e?.['eventId']), /^[0-9a-f-]{32,36}$/);
  }

  const m = await metrics(project);
  assert.deepEqual(m.events, { page_view: 1, purchase: 1, exception: 2 });
  assert.deepEqual(m.pages, { '/checkout': 1 });
  assert.deepEqual(m.trafficSources, { Bing: 1 });
  assert.deepEqual(m.countries, { DE: 1 });
  assert.deepEqual(m.devices, { desktop: 1 });
  assert.equal(m.sessions, 1);
  assert.deepEqual(m.recentEvents.map((e) => e.event).sort(), ['exception', 'exception', 'page_view', 'purchase']);
  assert.ok(m.recentEvents.every((e) => e.sessionId === 'checkout-1'));
});

test('503s, a lost answer, 429s with Retry-After and a reset connection end with every event counted exactly once', async () => {
  const project = await newProject('faults');
  proxy.faults = [
    { kind: 'status', status: 503 },
    { kind: 'commit-then-fail' },
    { kind: 'status', status: 429, retryAfter: '1' },
    { kind: 'reset' },
    { kind: 'status', status: 429, retryAfter: '0' },
    { kind: 'status', status: 502 },
  ];
  const errors: DeliveryError[] = [];
  const client = clientFor(project, {
    endpoint: proxy.endpoint, batchSize: 20, maxRetries: 8, retryBaseMs: 10, flushIntervalMs: 60_000,
    onError: (e) => errors.push(e),
  });
  const started = Date.now();
  for (let i = 0; i < 30; i++) client.track('order', { i }, { sessionId: `s${i}` });
  await client.shutdown();

  assert.deepEqual(errors, []);
  assert.equal(proxy.faults.length, 0, 'every fault was used');
  assert.ok(Date.now() - started >= 1000, 'Retry-After: 1 was honoured');
  const stats = client.stats();
  assert.deepEqual({ sent: stats.sent, failed: stats.failed, dropped: stats.dropped, retries: stats.retries }, { sent: 30, failed: 0, dropped: 0, retries: 6 });
  const m = await metrics(project);
  assert.deepEqual(m.events, { order: 30 }, 'the batch committed before its answer was lost is not counted twice');
  assert.equal(m.sessions, 30);
});

test('400, 401 and 403 are never retried; the error reaches onError with the service code', async () => {
  const project = await newProject('refusals');
  const other = await newProject('refusals-other');
  const cases: Array<[Partial<ClientOptions>, number, string]> = [
    [{ apiKey: 'sk_not-a-real-key-000000000000' }, 401, 'unauthorized'],
    [{ apiKey: other.keys.secret }, 403, 'forbidden'], // the key of another project
  ];
  for (const [options, status, code] of cases) {
    let requests = 0;
    const errors: DeliveryError[] = [];
    const client = clientFor(project, {
      ...options,
      retryBaseMs: 1,
      onError: (e) => errors.push(e),
      fetch: (input, init) => {
        requests++;
        return fetch(input, init);
      },
    });
    client.track('nope');
    await client.shutdown();
    assert.equal(requests, 1, `${status} was not retried`);
    assert.deepEqual(
      errors.map((e) => [e.reason, e.status, e.code, e.events]),
      [['rejected', status, code, 1]],
    );
    assert.equal(client.stats().failed, 1);
  }
  assert.deepEqual((await metrics(project)).events, {});

  // 400 cannot come from a checked event; the proxy stands in for a service whose rules moved on.
  proxy.faults = [{ kind: 'status', status: 400 }];
  const errors: DeliveryError[] = [];
  const client = clientFor(project, { endpoint: proxy.endpoint, retryBaseMs: 1, onError: (e) => errors.push(e) });
  client.track('refused');
  await client.shutdown();
  assert.deepEqual(errors.map((e) => [e.reason, e.status]), [['rejected', 400]]);
});

test('a bad event is refused at the call and the rest of its batch is counted', async () => {
  const project = await newProject('bad-event');
  const client = clientFor(project, { flushIntervalMs: 60_000 });
  client.track('before');
  assert.throws(() => client.track('with-bad-param', { nested: { a: 1 } as never }), TypeError);
  assert.throws(() => client.pageView({ url: 'javascript:alert(1)' }), TypeError);
  client.track('after');
  await client.shutdown();
  assert.deepEqual((await metrics(project)).events, { before: 1, after: 1 });
});

test('shutdown() delivers what is queued, and a resend of the same eventId is counted once', async () => {
  const project = await newProject('shutdown');
  const first = clientFor(project, { flushIntervalMs: 60_000 });
  first.track('order_placed', { order: 'A-1' }, { eventId: 'order-A-1', sessionId: 's1' });
  await first.shutdown();
  const second = clientFor(project, { flushIntervalMs: 60_000 });
  second.track('order_placed', { order: 'A-1' }, { eventId: 'order-A-1', sessionId: 's1' });
  await second.shutdown();
  assert.equal(second.stats().sent, 1, 'the service acknowledged the repeat');
  assert.deepEqual((await metrics(project)).events, { order_placed: 1 });
});
