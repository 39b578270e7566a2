// long because it is the whole gRPC face over real sockets: every method, status, limit, stream behaviour, health
// and reflection, sharing one service and client setup.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { after, before, describe, test } from 'node:test';
import { fromBinary } from '@bufbuild/protobuf';
import { BinaryReader, BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import { Client, Metadata, credentials, status } from '@grpc/grpc-js';
import type { ServiceError } from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import type { GetMetricsResponse, IngestStreamResponse } from '../src/gen/analytics/v1/analytics_pb.ts';
import type { MetricsResponse } from '../src/core/types.ts';
import { AnalyticsClient } from '../src/grpc/client.ts';
import { api, createProject, startTestService, todayUtc } from './helpers.ts';
import type { CreatedProject, TestService } from './helpers.ts';

/** A desktop browser, sent as User-Agent over HTTP and as grpc-js `grpc.primary_user_agent` over gRPC. */
const BROWSER_UA = 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36';

let svc: TestService;
let client: AnalyticsClient;

before(async () => {
  svc = await startTestService();
  client = new AnalyticsClient(svc.grpcAddress);
});
after(async () => {
  client.close();
  await svc.destroy();
});

function isServiceError(err: unknown): err is ServiceError {
  return err instanceof Error && typeof (err as Partial<ServiceError>).code === 'number';
}

async function refusal(call: Promise<unknown>): Promise<ServiceError> {
  try {
    await call;
  } catch (err) {
    if (isServiceError(err)) return err;
    throw err;
  }
  throw new Error('the call succeeded, a refusal was expected');
}

function trailer(err: ServiceError, key: string): string | undefined {
  const value = err.metadata.get(key)[0];
  return typeof value === 'string' ? value : undefined;
}

async function metricsJson(key: string, query = ''): Promise<MetricsResponse> {
  const r = await api<MetricsResponse>(svc.url, `/metrics${query}`, { key });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

function breakdown(entries: GetMetricsResponse['countries']): Record<string, number> {
  return Object.fromEntries(entries.map((e) => [e.key, Number(e.count)]));
}

/** GetMetricsResponse → the JSON of GET /metrics, to show the message carries all of it. */
function metricsFromMessage(m: GetMetricsResponse): MetricsResponse {
  return {
    projectId: m.projectId,
    from: m.from,
    to: m.to,
    timezone: m.timezone,
    users: Number(m.users),
    sessions: Number(m.sessions),
    pageviews: Number(m.pageviews),
    bounceRate: m.bounceRate,
    trafficSources: breakdown(m.trafficSources),
    countries: breakdown(m.countries),
    devices: breakdown(m.devices),
    pages: breakdown(m.pages),
    events: breakdown(m.events),
    bots: Number(m.bots),
    recentEvents: m.recentEvents.map((r) => ({
      ts: Number(r.ts),
      event: r.event,
      url: r.url,
      referrer: r.referrer,
      source: r.source,
      country: r.country,
      device: r.device,
      sessionId: r.sessionId,
    })),
    daily: dailyFromMessage(m.daily),
    entryPages: breakdown(m.entryPages),
    browsers: breakdown(m.browsers),
    operatingSystems: breakdown(m.operatingSystems),
    utmMediums: breakdown(m.utmMediums),
    utmCampaigns: breakdown(m.utmCampaigns),
    revenue: Object.fromEntries(m.revenue.map((r) => [r.currency, { total: r.total, purchases: Number(r.purchases) }])),
    props: Object.fromEntries(m.props.map((p) => [p.key, breakdown(p.values)])),
    ...(m.compare
      ? {
          compare: {
            from: m.compare.from,
            to: m.compare.to,
            users: Number(m.compare.users),
            sessions: Number(m.compare.sessions),
            pageviews: Number(m.compare.pageviews),
            bounceRate: m.compare.bounceRate,
            daily: dailyFromMessage(m.compare.daily),
          },
        }
      : {}),
  };
}

function dailyFromMessage(days: GetMetricsResponse['daily']): MetricsResponse['daily'] {
  return days.map((d) => ({
    date: d.date,
    users: Number(d.users),
    sessions: Number(d.sessions),
    pageviews: Number(d.pageviews),
    bounceRate: d.bounceRate,
  }));
}

function withoutProjectId(m: MetricsResponse): Omit<MetricsResponse, 'projectId'> {
  const { projectId: _ignored, ...rest } = m;
  return rest;
}

/** Writes every batch, collects acknowledgements until the server ends the call (or it fails). */
async function streamBatches(
  stream: ReturnType<AnalyticsClient['ingestStream']>,
  batches: Array<Parameters<ReturnType<AnalyticsClient['ingestStream']>['write']>[0]>,
): Promise<{ acks: IngestStreamResponse[]; error?: ServiceError }> {
  const acks: IngestStreamResponse[] = [];
  stream.on('data', (ack: IngestStreamResponse) => acks.push(ack));
  // grpc-js may report the status before the last messages are read: wait for both.
  const outcome = Promise.all([
    new Promise<[{ code: number }]>((resolve) => stream.on('status', (s: { code: number }) => resolve([s]))),
    new Promise<ServiceError | undefined>((resolve) => {
      stream.on('end', () => resolve(undefined));
      stream.on('error', (err: ServiceError) => resolve(err));
    }),
  ]);
  for (const batch of batches) stream.write(batch);
  stream.end();
  const [[{ code }], error] = await outcome;
  if (code === status.OK) return { acks };
  return { acks, error: error ?? Object.assign(new Error(`status ${code}`), { code, details: '', metadata: new Metadata() }) };
}

describe('gRPC statuses', () => {
  let project: CreatedProject;
  let other: CreatedProject;
  before(async () => {
    project = await createProject(svc.url, svc.adminKey, { name: 'statuses' });
    other = await createProject(svc.url, svc.adminKey, { name: 'other' });
  });

  test('a call without a key is refused with UNAUTHENTICATED', async () => {
    const err = await refusal(client.ingest({ events: [{ event: 'signup' }] }));
    assert.equal(err.code, status.UNAUTHENTICATED);
    assert.equal(trailer(err, 'error-code'), 'unauthorized');
  });

  test('a call with an unknown key is refused with UNAUTHENTICATED', async () => {
    const err = await refusal(client.ingest({ events: [{ event: 'signup' }] }, { key: 'sk_AAAAAAAAAAAAAAAAAAAAAAAAAAAA' }));
    assert.equal(err.code, status.UNAUTHENTICATED);
  });

  test('an event naming another project is refused with PERMISSION_DENIED', async () => {
    const err = await refusal(
      client.ingest({ events: [{ event: 'signup', projectId: other.project.id }] }, { key: project.keys.secret }),
    );
    assert.equal(err.code, status.PERMISSION_DENIED);
    assert.equal(trailer(err, 'error-code'), 'forbidden');
  });

  test('metrics of another project are refused with PERMISSION_DENIED', async () => {
    const err = await refusal(client.getMetrics({ projectId: other.project.id }, { key: project.keys.secret }));
    assert.equal(err.code, status.PERMISSION_DENIED);
  });

  test('an invalid batch is refused with INVALID_ARGUMENT naming the event index and field, and nothing is stored', async () => {
    const err = await refusal(
      client.ingest(
        {
          events: [
            { event: 'page_view', url: '/fine', sessionId: 'v1' },
            { event: 'page_view', sessionId: 'v1' },
            { event: 'signup', eventParams: { plan: { kind: { case: 'stringValue', value: 'x'.repeat(501) } } } },
          ],
        },
        { key: project.keys.secret },
      ),
    );
    assert.equal(err.code, status.INVALID_ARGUMENT);
    assert.match(err.details, /events\[1\]\.url/);
    assert.match(err.details, /events\[2\]\.event_params\.plan/);
    const raw = err.metadata.get('error-details-bin')[0];
    assert.ok(Buffer.isBuffer(raw));
    const details = JSON.parse(raw.toString('utf8')) as Array<{ index?: number; path: string; field: string }>;
    assert.deepEqual(
      details.map((d) => [d.index, d.path, d.field]),
      [
        [1, 'url', 'events[1].url'],
        [2, 'eventParams.plan', 'events[2].event_params.plan'],
      ],
    );
    assert.equal((await metricsJson(project.keys.secret)).pageviews, 0);
  });

  test('a ParamValue that sets no value is refused with INVALID_ARGUMENT naming its field', async () => {
    const err = await refusal(
      client.ingest({ events: [{ event: 'signup', eventParams: { plan: {} } }] }, { key: project.keys.secret }),
    );
    assert.equal(err.code, status.INVALID_ARGUMENT);
    assert.match(err.details, /events\[0\]\.event_params\.plan/);
  });

  test('a page-context key that names a typed field is refused with INVALID_ARGUMENT', async () => {
    const err = await refusal(
      client.ingest({ events: [{ event: 'signup', pageContext: { url: '/sneaky' } }] }, { key: project.keys.secret }),
    );
    assert.equal(err.code, status.INVALID_ARGUMENT);
    assert.match(err.details, /events\[0\]\.page_context\.url/);
  });

  test('a __proto__ key in event_params or page_context is refused with INVALID_ARGUMENT, as over HTTP', async () => {
    const key = project.keys.secret;
    const viaParams = await refusal(
      client.ingest({ events: [{ event: 'signup', eventParams: { ['__proto__']: { kind: { case: 'boolValue', value: true } } } }] }, { key }),
    );
    assert.equal(viaParams.code, status.INVALID_ARGUMENT);
    assert.match(viaParams.details, /events\[0\]\.event_params\.__proto__/);
    const viaContext = await refusal(
      client.ingest({ events: [{ event: 'signup', pageContext: JSON.parse('{"__proto__": {"polluted": true}}') as Record<string, never> }] }, { key }),
    );
    assert.equal(viaContext.code, status.INVALID_ARGUMENT);
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
  });

  test('an empty batch is refused with INVALID_ARGUMENT', async () => {
    const err = await refusal(client.ingest({ events: [] }, { key: project.keys.secret }));
    assert.equal(err.code, status.INVALID_ARGUMENT);
  });

  test('events beyond the monthly quota are refused with RESOURCE_EXHAUSTED and a retry-after', async () => {
    const small = await createProject(svc.url, svc.adminKey, { name: 'small', monthly_quota: 3 });
    const key = small.keys.secret;
    const three = [1, 2, 3].map((n) => ({ event: 'signup', sessionId: `q${n}` }));
    assert.equal((await client.ingest({ events: three }, { key })).accepted, 3);
    const err = await refusal(client.ingest({ events: [{ event: 'signup', sessionId: 'q4' }] }, { key }));
    assert.equal(err.code, status.RESOURCE_EXHAUSTED);
    assert.equal(trailer(err, 'error-code'), 'quota_exceeded');
    assert.ok(Number(trailer(err, 'retry-after')) > 0);
    assert.equal((await metricsJson(key)).events.signup, 3);
  });

  test('a project\'s domain over gRPC: set at creation, shown, a repeat refused (conflict), the empty string removes it', async () => {
    const created = await client.createProject({ name: 'site', domain: 'Grpc-Site.example' }, { key: svc.adminKey });
    assert.equal(created.project?.domain, 'grpc-site.example');
    const again = await refusal(client.createProject({ name: 'twin', domain: 'grpc-site.example' }, { key: svc.adminKey }));
    assert.equal(again.code, status.FAILED_PRECONDITION, 'conflict, as a goal of the same name');
    const cleared = await client.call('updateProject', { projectId: created.project!.id, domain: '' }, { key: svc.adminKey });
    assert.equal(cleared.project?.domain, undefined);
  });

  test('calls beyond the rate limit are refused with RESOURCE_EXHAUSTED and a retry-after', async () => {
    const created = await client.createProject(
      { name: 'slow', rateLimit: { perKey: 0.001, burstPerKey: 1 } },
      { key: svc.adminKey },
    );
    const key = created.keys?.secret;
    assert.ok(key);
    await client.ingest({ events: [{ event: 'signup' }] }, { key });
    const err = await refusal(client.ingest({ events: [{ event: 'signup' }] }, { key }));
    assert.equal(err.code, status.RESOURCE_EXHAUSTED);
    assert.equal(trailer(err, 'error-code'), 'rate_limited');
    assert.ok(Number(trailer(err, 'retry-after')) >= 1);
  });

  test('garbage bytes are refused with INVALID_ARGUMENT and the server keeps serving', async () => {
    const raw = new Client(svc.grpcAddress, credentials.createInsecure());
    const metadata = new Metadata();
    metadata.set('authorization', `Bearer ${project.keys.secret}`);
    const err = await new Promise<ServiceError | null>((resolve) => {
      raw.makeUnaryRequest(
        '/analytics.v1.AnalyticsService/Ingest',
        (b: Buffer) => b,
        (b: Buffer) => b,
        Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01]),
        metadata,
        (e) => resolve(e),
      );
    });
    raw.close();
    assert.equal(err?.code, status.INVALID_ARGUMENT);
    const ok = await client.ingest({ events: [{ event: 'signup' }] }, { key: project.keys.secret });
    assert.equal(ok.accepted, 1);
  });

  test('garbage bytes without a key are refused with UNAUTHENTICATED, as a bad key wins over a bad body over HTTP', async () => {
    const raw = new Client(svc.grpcAddress, credentials.createInsecure());
    const err = await new Promise<ServiceError | null>((resolve) => {
      raw.makeUnaryRequest('/analytics.v1.AnalyticsService/Ingest', (b: Buffer) => b, (b: Buffer) => b, Buffer.from([0xff]), new Metadata(), (e) =>
        resolve(e),
      );
    });
    raw.close();
    assert.equal(err?.code, status.UNAUTHENTICATED);
  });

  test('answers carry the rate-limit state in ratelimit-* trailers', async () => {
    const raw = new Client(svc.grpcAddress, credentials.createInsecure());
    const metadata = new Metadata();
    metadata.set('authorization', `Bearer ${project.keys.secret}`);
    const trailers = await new Promise<Metadata>((resolve) => {
      const call = raw.makeUnaryRequest('/analytics.v1.AnalyticsService/ListProjects', (b: Buffer) => b, (b: Buffer) => b, Buffer.alloc(0), metadata, () => {});
      call.on('status', (s: { metadata: Metadata }) => resolve(s.metadata));
    });
    raw.close();
    for (const key of ['ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset']) {
      assert.match(String(trailers.get(key)[0]), /^\d+$/, key);
    }
  });

  test('a message over 1 MiB is refused with RESOURCE_EXHAUSTED', async () => {
    const err = await refusal(
      client.ingest({ events: [{ event: 'signup', pageContext: { blob: 'x'.repeat(1024 * 1024) } }] }, { key: project.keys.secret }),
    );
    assert.equal(err.code, status.RESOURCE_EXHAUSTED);
  });
});

describe('gRPC and HTTP give the same aggregates', () => {
  test('events sent over gRPC and the same events over HTTP to an identical project yield identical metrics', async () => {
    const twin = { name: 'twin', timezone: 'Europe/Berlin', tracked_props: ['plan', 'seats', 'trial', 'coupon'] };
    const viaGrpc = await createProject(svc.url, svc.adminKey, twin);
    const viaHttp = await createProject(svc.url, svc.adminKey, twin);
    const t0 = Date.now() - 60_000;
    const json = [
      { event: 'page_view', url: 'https://shop.example/?utm_source=newsletter&utm_medium=email&utm_campaign=launch', sessionId: 's1', timestamp: t0, country: 'de' },
      { event: 'page_view', url: '/pricing#plans', sessionId: 's1', referrer: 'https://www.google.com/search?q=x', timestamp: t0 + 1000 },
      { event: 'page_view', url: '/', sessionId: 's2', userId: 'u2', referrer: 'Newsletter', device: 'Tablet', timestamp: new Date(t0 + 2000).toISOString() },
      { event: 'signup', sessionId: 's2', fingerprint: 'fp', eventParams: { plan: 'pro', seats: 3, trial: true, coupon: null }, timestamp: t0 + 3000, eventId: 'e-signup' },
      { event: 'purchase', sessionId: 's2', eventParams: { transaction_id: 't1', value: 42.5, currency: 'EUR' }, items: [{ item_id: 'sku1', price: 40, quantity: 1, item_name: 'Plan' }], timestamp: t0 + 4000 },
      { event: 'page_view', url: 'https://shop.example/a', sessionId: 's3', country: 'FR', timestamp: t0 + 5000, title: 'A page', section: { name: 'docs', depth: 2 } },
    ];
    const grpcUser = new AnalyticsClient(svc.grpcAddress, {
      key: viaGrpc.keys.secret,
      channelOptions: { 'grpc.primary_user_agent': BROWSER_UA },
    });
    try {
      const ack = await grpcUser.ingest({
        events: [
          { event: 'page_view', url: 'https://shop.example/?utm_source=newsletter&utm_medium=email&utm_campaign=launch', sessionId: 's1', timestamp: { case: 'timestampMs', value: BigInt(t0) }, country: 'de' },
          { event: 'page_view', url: '/pricing#plans', sessionId: 's1', referrer: 'https://www.google.com/search?q=x', timestamp: { case: 'timestampMs', value: BigInt(t0 + 1000) } },
          { event: 'page_view', url: '/', sessionId: 's2', userId: 'u2', referrer: 'Newsletter', device: 'Tablet', timestamp: { case: 'timestampIso', value: new Date(t0 + 2000).toISOString() } },
          {
            event: 'signup',
            sessionId: 's2',
            fingerprint: 'fp',
            eventParams: {
              plan: { kind: { case: 'stringValue', value: 'pro' } },
              seats: { kind: { case: 'numberValue', value: 3 } },
              trial: { kind: { case: 'boolValue', value: true } },
              coupon: { kind: { case: 'nullValue', value: 0 } },
            },
            timestamp: { case: 'timestampMs', value: BigInt(t0 + 3000) },
            eventId: 'e-signup',
          },
          {
            event: 'purchase',
            sessionId: 's2',
            eventParams: {
              transaction_id: { kind: { case: 'stringValue', value: 't1' } },
              value: { kind: { case: 'numberValue', value: 42.5 } },
              currency: { kind: { case: 'stringValue', value: 'EUR' } },
            },
            items: [{ itemId: 'sku1', price: 40, quantity: 1, extra: { item_name: { kind: { case: 'stringValue', value: 'Plan' } } } }],
            timestamp: { case: 'timestampMs', value: BigInt(t0 + 4000) },
          },
          { event: 'page_view', url: 'https://shop.example/a', sessionId: 's3', country: 'FR', timestamp: { case: 'timestampMs', value: BigInt(t0 + 5000) }, pageContext: { title: 'A page', section: { name: 'docs', depth: 2 } } },
        ],
      });
      assert.equal(ack.accepted, json.length);
      const http = await api(svc.url, '/analytics', {
        key: viaHttp.keys.secret,
        body: { events: json },
        headers: { 'user-agent': BROWSER_UA },
      });
      assert.equal(http.status, 200, JSON.stringify(http.body));

      const query = `?from=${todayUtc(t0 - 86_400_000)}&compare=previous`;
      const fromGrpc = await metricsJson(viaGrpc.keys.secret, query);
      const fromHttp = await metricsJson(viaHttp.keys.secret, query);
      assert.equal(fromGrpc.pageviews, 4);
      assert.equal(fromGrpc.devices.desktop, 2, 'the browser User-Agent reached the engine through grpc-js');
      assert.deepEqual(fromGrpc.browsers, { Chrome: 3 });
      assert.deepEqual(fromGrpc.operatingSystems, { Linux: 3 });
      assert.deepEqual(fromGrpc.entryPages, { '/': 2, '/a': 1 });
      assert.deepEqual([fromGrpc.utmMediums, fromGrpc.utmCampaigns], [{ email: 1 }, { launch: 1 }]);
      assert.deepEqual(fromGrpc.revenue, { EUR: { total: 42.5, purchases: 1 } });
      assert.deepEqual(fromGrpc.props, { plan: { pro: 1 }, seats: { '3': 1 }, trial: { true: 1 }, coupon: { null: 1 } });
      assert.equal(fromGrpc.compare?.sessions, 0);
      assert.equal(fromGrpc.compare?.daily.length, fromGrpc.daily.length);
      assert.deepEqual(withoutProjectId(fromGrpc), withoutProjectId(fromHttp));

      const message = await grpcUser.getMetrics({ from: todayUtc(t0 - 86_400_000), compare: 'previous' });
      assert.deepEqual(metricsFromMessage(message), fromGrpc, 'GetMetrics carries every field of GET /metrics');

      const realtimeHttp = await api(svc.url, '/metrics/realtime', { key: viaGrpc.keys.secret });
      assert.equal(realtimeHttp.status, 200, JSON.stringify(realtimeHttp.body));
      const rt = await grpcUser.getRealtime({});
      assert.deepEqual(
        {
          projectId: rt.projectId,
          visitors: Number(rt.visitors),
          pageviews: Number(rt.pageviews),
          // summed: the two reads may fall on either side of a minute's boundary, which shifts the array by one
          perMinute: rt.perMinute.map(Number).reduce((a, b) => a + b, 0),
          pages: breakdown(rt.pages),
          sources: breakdown(rt.sources),
        },
        { ...realtimeHttp.body, perMinute: (realtimeHttp.body.perMinute as number[]).reduce((a, b) => a + b, 0) },
        'GetRealtime carries every field of GET /metrics/realtime',
      );
      assert.equal(rt.perMinute.length, (realtimeHttp.body.perMinute as number[]).length);
      assert.equal(rt.visitors, 3n);
      assert.equal(rt.pageviews, 4n);

      const refused = await refusal(grpcUser.getMetrics({ compare: 'lastweek' }));
      assert.equal(refused.code, status.INVALID_ARGUMENT);
    } finally {
      grpcUser.close();
    }
  });
});

describe('IngestStream', () => {
  test('a stream of 100 batches gets 100 acknowledgements in order with the right counts', async () => {
    const project = await createProject(svc.url, svc.adminKey, { name: 'stream' });
    const sizes = Array.from({ length: 100 }, (_, i) => (i % 5) + 1);
    const batches = sizes.map((size, i) => ({
      batchId: BigInt(1000 + i),
      events: Array.from({ length: size }, (_, j) => ({ event: 'tick', sessionId: `b${i}e${j}` })),
    }));
    const { acks, error } = await streamBatches(client.ingestStream({ key: project.keys.secret }), batches);
    assert.equal(error, undefined);
    assert.equal(acks.length, 100);
    acks.forEach((ack, i) => {
      assert.equal(ack.sequence, BigInt(i + 1));
      assert.equal(ack.batchId, BigInt(1000 + i));
      assert.equal(ack.accepted, sizes[i]);
      assert.ok(ack.ts > 0n);
    });
    assert.equal((await metricsJson(project.keys.secret)).events.tick, sizes.reduce((a, b) => a + b, 0));
  });

  test('a refused batch ends the stream with its status after the earlier acknowledgements, and nothing later is stored', async () => {
    const project = await createProject(svc.url, svc.adminKey, { name: 'stream-refusal' });
    const { acks, error } = await streamBatches(client.ingestStream({ key: project.keys.secret }), [
      { batchId: 1n, events: [{ event: 'first' }] },
      { batchId: 2n, events: [{ event: 'second' }, { event: '' }] },
      { batchId: 3n, events: [{ event: 'third' }] },
    ]);
    assert.deepEqual(acks.map((a) => a.batchId), [1n]);
    assert.equal(error?.code, status.INVALID_ARGUMENT);
    assert.match(error?.details ?? '', /events\[1\]\.event/);
    assert.deepEqual((await metricsJson(project.keys.secret)).events, { first: 1 });
  });

  test('garbage bytes on a stream end it with INVALID_ARGUMENT', async () => {
    const project = await createProject(svc.url, svc.adminKey, { name: 'stream-garbage' });
    const raw = new Client(svc.grpcAddress, credentials.createInsecure());
    const metadata = new Metadata();
    metadata.set('authorization', `Bearer ${project.keys.secret}`);
    const call = raw.makeBidiStreamRequest('/analytics.v1.AnalyticsService/IngestStream', (b: Buffer) => b, (b: Buffer) => b, metadata);
    call.on('data', () => {});
    call.write(Buffer.from([0x12, 0x05, 0xff]));
    call.end();
    const [err] = (await once(call, 'error')) as [ServiceError];
    raw.close();
    assert.equal(err.code, status.INVALID_ARGUMENT);
  });

  test('a stream cancelled midway leaves no partial batch, and resending its unacknowledged batches counts nothing twice', async () => {
    const project = await createProject(svc.url, svc.adminKey, { name: 'stream-cancel' });
    const key = project.keys.secret;
    const batchCount = 60;
    const perBatch = 20;
    const batches = Array.from({ length: batchCount }, (_, i) => ({
      batchId: BigInt(i),
      events: Array.from({ length: perBatch }, (_, j) => ({ event: `batch_${i}`, sessionId: `c${i}`, eventId: `c-${i}-${j}` })),
    }));

    const stream = client.ingestStream({ key });
    const acked: bigint[] = [];
    const cancelled = new Promise<void>((resolve) => {
      stream.on('data', (ack: IngestStreamResponse) => {
        acked.push(ack.batchId);
        if (acked.length === 10) {
          stream.cancel();
          resolve();
        }
      });
    });
    stream.on('error', () => {});
    for (const batch of batches) stream.write(batch);
    await cancelled;
    // A batch in the engine when the cancel arrived still commits (atomically) or not at all; let it settle.
    await new Promise((resolve) => setTimeout(resolve, 300));

    const partial = await metricsJson(key);
    for (const [name, n] of Object.entries(partial.events)) assert.equal(n, perBatch, `${name} was stored whole or not at all`);
    const storedBatches = Object.keys(partial.events).length;
    assert.ok(storedBatches >= acked.length && storedBatches < batchCount, `stored ${storedBatches} batches`);

    const unacknowledged = batches.filter((b) => !acked.includes(b.batchId));
    const resent = await streamBatches(client.ingestStream({ key }), unacknowledged);
    assert.equal(resent.error, undefined);
    assert.equal(resent.acks.length, unacknowledged.length);

    const total = await metricsJson(key);
    assert.equal(Object.keys(total.events).length, batchCount);
    for (const n of Object.values(total.events)) assert.equal(n, perBatch);
  });

  test('closing the server ends an idle stream with UNAVAILABLE', async () => {
    const own = await startTestService();
    const project = await createProject(own.url, own.adminKey, { name: 'drain' });
    const drained = new AnalyticsClient(own.grpcAddress, { key: project.keys.secret });
    try {
      const stream = drained.ingestStream();
      const first = once(stream, 'data');
      stream.write({ batchId: 1n, events: [{ event: 'before_close' }] });
      await first;
      const ended = once(stream, 'error') as Promise<[ServiceError]>;
      const stopping = own.stop();
      const [err] = await ended;
      assert.equal(err.code, status.UNAVAILABLE);
      await stopping;
    } finally {
      drained.close();
      await own.destroy();
    }
  });
});

describe('shutdown', () => {
  test('health watchers see NOT_SERVING when the server closes, and closing does not wait for them', async () => {
    const own = await startTestService();
    const raw = new Client(own.grpcAddress, credentials.createInsecure());
    const watch = healthService.Watch;
    assert.ok(watch);
    try {
      const call = raw.makeServerStreamRequest(watch.path, watch.requestSerialize, watch.responseDeserialize, { service: '' });
      const seen: object[] = [];
      const ended = new Promise<void>((resolve) => {
        call.on('end', () => resolve());
        call.on('error', () => resolve());
      });
      call.on('data', (update: object) => seen.push(update));
      while (seen.length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
      const started = Date.now();
      await own.stop();
      await ended;
      assert.ok(Date.now() - started < 2_000, `stop took ${Date.now() - started} ms`);
      assert.deepEqual(seen, [{ status: 'SERVING' }, { status: 'NOT_SERVING' }]);
    } finally {
      raw.close();
      await own.destroy();
    }
  });
});

describe('projects over gRPC', () => {
  test('CreateProject returns the project and its keys, and ListProjects shows it to the admin and to its own key only', async () => {
    const created = await client.createProject(
      { name: 'grpc-made', allowedOrigins: ['https://shop.example'], allowedReferrers: ['shop.example'], timezone: 'Asia/Tokyo', monthlyQuota: 500n, trackedProps: ['plan'] },
      { key: svc.adminKey },
    );
    assert.equal(created.project?.name, 'grpc-made');
    assert.equal(created.project?.timezone, 'Asia/Tokyo');
    assert.equal(created.project?.monthlyQuota, 500n);
    assert.deepEqual(created.project?.allowedOrigins, ['https://shop.example']);
    assert.match(created.keys?.secret ?? '', /^sk_/);
    assert.match(created.keys?.publishable ?? '', /^pk_/);
    const id = created.project?.id;

    const all = await client.listProjects({ key: svc.adminKey });
    assert.ok(all.projects.some((p) => p.id === id));
    const own = await client.listProjects({ key: created.keys?.secret ?? '' });
    assert.deepEqual(own.projects.map((p) => p.id), [id]);
    const http = await api<{ projects: Array<{ id: string; created_at: string }> }>(svc.url, '/projects', { key: created.keys?.secret ?? '' });
    assert.equal(own.projects[0]?.createdAt, http.body.projects[0]?.created_at);
  });

  test('CreateProject with an invalid origin is refused with INVALID_ARGUMENT naming the field', async () => {
    const err = await refusal(client.createProject({ allowedOrigins: ['not an origin'] }, { key: svc.adminKey }));
    assert.equal(err.code, status.INVALID_ARGUMENT);
    assert.match(err.details, /allowed_origins\[0\]/);
    const tooMany = await refusal(client.createProject({ trackedProps: Array.from({ length: 11 }, (_, i) => `k${i}`) }, { key: svc.adminKey }));
    assert.equal(tooMany.code, status.INVALID_ARGUMENT);
    assert.match(tooMany.details, /tracked_props/);
  });
});

/** Calls grpc.reflection.v1 by hand: one request, its one response, encoded with the protobuf wire primitives. */
async function reflect(request: Uint8Array): Promise<Uint8Array> {
  const raw = new Client(svc.grpcAddress, credentials.createInsecure());
  try {
    const call = raw.makeBidiStreamRequest(
      '/grpc.reflection.v1.ServerReflection/ServerReflectionInfo',
      (b: Uint8Array) => Buffer.from(b),
      (b: Buffer) => new Uint8Array(b),
    );
    const answer = once(call, 'data') as Promise<[Uint8Array]>;
    call.write(request);
    call.end();
    const [response] = await answer;
    return response;
  } finally {
    raw.close();
  }
}

/** The length-delimited fields of a message, by field number. */
function lengthDelimited(bytes: Uint8Array): Map<number, Uint8Array[]> {
  const out = new Map<number, Uint8Array[]>();
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [no, type] = reader.tag();
    if (type === WireType.LengthDelimited) out.set(no, [...(out.get(no) ?? []), reader.bytes()]);
    else reader.skip(type);
  }
  return out;
}

describe('standard services', () => {
  test('health answers SERVING for the server and for AnalyticsService', async () => {
    const raw = new Client(svc.grpcAddress, credentials.createInsecure());
    const check = healthService.Check;
    assert.ok(check);
    try {
      for (const name of ['', 'analytics.v1.AnalyticsService']) {
        const answer = await new Promise<object>((resolve, reject) => {
          raw.makeUnaryRequest(check.path, check.requestSerialize, check.responseDeserialize, { service: name }, (err, value) =>
            err || value === undefined ? reject(err ?? new Error('no answer')) : resolve(value),
          );
        });
        assert.deepEqual(answer, { status: 'SERVING' });
      }
    } finally {
      raw.close();
    }
  });

  test('health answers NOT_FOUND to Check and SERVICE_UNKNOWN to Watch for a name it does not know', async () => {
    const raw = new Client(svc.grpcAddress, credentials.createInsecure());
    const check = healthService.Check;
    const watch = healthService.Watch;
    assert.ok(check && watch);
    try {
      const err = await refusal(
        new Promise((resolve, reject) => {
          raw.makeUnaryRequest(check.path, check.requestSerialize, check.responseDeserialize, { service: 'no.such.Service' }, (e, value) =>
            e ? reject(e) : resolve(value),
          );
        }),
      );
      assert.equal(err.code, status.NOT_FOUND);
      const call = raw.makeServerStreamRequest(watch.path, watch.requestSerialize, watch.responseDeserialize, { service: 'no.such.Service' });
      call.on('error', () => {});
      const [first] = (await once(call, 'data')) as [object];
      assert.deepEqual(first, { status: 'SERVICE_UNKNOWN' });
      call.cancel();
    } finally {
      raw.close();
    }
  });

  test('health List answers every name the server knows with its status', async () => {
    const raw = new Client(svc.grpcAddress, credentials.createInsecure());
    const list = healthService.List;
    assert.ok(list, 'the independent client knows List');
    try {
      const answer = await new Promise((resolve, reject) => {
        raw.makeUnaryRequest(list.path, list.requestSerialize, list.responseDeserialize, {}, (e, value) => (e ? reject(e) : resolve(value)));
      });
      assert.deepEqual(answer, { statuses: { '': { status: 'SERVING' }, 'analytics.v1.AnalyticsService': { status: 'SERVING' } } });
    } finally {
      raw.close();
    }
  });

  test('reflection lists AnalyticsService and Health and describes their methods', async () => {
    // ServerReflectionRequest { list_services = 7 }
    const listed = lengthDelimited(await reflect(new BinaryWriter().tag(7, WireType.LengthDelimited).string('*').finish()));
    // ServerReflectionResponse.list_services_response = 6 → ListServiceResponse.service = 1 → ServiceResponse.name = 1
    const names = (lengthDelimited(listed.get(6)?.[0] ?? new Uint8Array()).get(1) ?? []).map((s) =>
      new TextDecoder().decode(lengthDelimited(s).get(1)?.[0]),
    );
    assert.ok(names.includes('analytics.v1.AnalyticsService'), names.join(', '));
    assert.ok(names.includes('grpc.health.v1.Health'), names.join(', '));

    // ServerReflectionRequest { file_containing_symbol = 4 }
    const described = lengthDelimited(
      await reflect(new BinaryWriter().tag(4, WireType.LengthDelimited).string('analytics.v1.AnalyticsService').finish()),
    );
    // file_descriptor_response = 4 → FileDescriptorResponse.file_descriptor_proto = 1 (repeated bytes)
    const files = (lengthDelimited(described.get(4)?.[0] ?? new Uint8Array()).get(1) ?? []).map((b) =>
      fromBinary(FileDescriptorProtoSchema, b),
    );
    const file = files.find((f) => f.package === 'analytics.v1');
    assert.ok(file, files.map((f) => f.name).join(', '));
    const methods = file.service.find((s) => s.name === 'AnalyticsService')?.method ?? [];
    assert.deepEqual(methods.map((m) => m.name), ['Ingest', 'IngestStream', 'GetMetrics', 'GetRealtime', 'ListProjects', 'CreateProject', 'UpdateProject', 'DeleteProject', 'ListKeys', 'CreateKey', 'UpdateKey', 'RevokeKey', 'Query', 'QueryFunnel', 'ListGoals', 'CreateGoal', 'DeleteGoal']);
    const stream = methods.find((m) => m.name === 'IngestStream');
    assert.equal(stream?.clientStreaming, true);
    assert.equal(stream?.serverStreaming, true);
    const projectId = file.messageType.find((m) => m.name === 'Event')?.field.find((f) => f.name === 'project_id');
    assert.equal(projectId?.proto3Optional, true, 'presence of optional fields survives reflection');

    const health = (
      lengthDelimited(
        lengthDelimited(await reflect(new BinaryWriter().tag(4, WireType.LengthDelimited).string('grpc.health.v1.Health').finish())).get(4)?.[0] ??
          new Uint8Array(),
      ).get(1) ?? []
    ).map((b) => fromBinary(FileDescriptorProtoSchema, b));
    const healthFile = health.find((f) => f.package === 'grpc.health.v1');
    assert.equal(healthFile?.name, 'grpc/health/v1/health.proto');
    assert.deepEqual(healthFile?.service.find((s) => s.name === 'Health')?.method.map((m) => m.name), ['Check', 'Watch', 'List']);
  });
});
