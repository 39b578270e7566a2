import assert from 'node:assert/strict';
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { AnalyticsClient } from '../src/grpc/client.ts';
import { api, createProject, startTestService, type TestService } from './helpers.ts';

let svc: TestService;
before(async () => {
  svc = await startTestService({ METRICS_PORT: '0' });
});
after(() => svc.destroy());

async function scrape(): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${svc.service.metricsPort}/metrics`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  return res.text();
}

/** The value of one series, e.g. value(text, 'analytics_events_total{face="http",outcome="stored"}'). */
function value(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

test('METRICS_PORT serves Prometheus text with requests, events, latencies, snapshots, days, projects and RSS', async () => {
  const p = await createProject(svc.url, svc.adminKey);
  const pv = { event: 'page_view', url: 'https://a.example/', sessionId: 's', eventId: 'e1' };
  assert.equal((await api(svc.url, '/analytics', { key: p.keys.secret, body: [pv, { ...pv, eventId: 'e2' }] })).status, 200);
  assert.equal((await api(svc.url, '/analytics', { key: p.keys.secret, body: pv })).status, 200); // a repeat
  assert.equal((await api(svc.url, '/analytics', { key: p.keys.secret, body: { url: '/' } })).status, 400);
  assert.equal((await api(svc.url, '/metrics', { key: 'sk_AAAAAAAAAAAAAAAAAAAAAAAAAAAA' })).status, 401);
  const grpc = new AnalyticsClient(svc.grpcAddress, { key: p.keys.secret });
  await grpc.ingest({ events: [{ event: 'signup', eventId: 'g1' }] });
  await new Promise<void>((resolve, reject) => {
    const stream = grpc.ingestStream();
    stream.on('data', () => stream.end());
    stream.on('error', reject);
    stream.on('end', resolve);
    stream.write({ batchId: 1n, events: [{ event: 'signup', eventId: 'g2' }] });
  });
  grpc.close();
  await svc.service.engine.snapshotNow();

  const text = await scrape();
  for (const line of text.split('\n').filter((l) => l !== '' && !l.startsWith('#'))) assert.match(line, /^analytics_/, line);
  assert.equal(value(text, 'analytics_events_total{face="http",outcome="stored"}'), 2);
  assert.equal(value(text, 'analytics_events_total{face="http",outcome="duplicate"}'), 1);
  assert.equal(value(text, 'analytics_events_total{face="http",outcome="invalid_event"}'), 1);
  assert.equal(value(text, 'analytics_events_total{face="grpc",outcome="stored"}'), 2);
  assert.equal(value(text, 'analytics_requests_total{face="grpc",endpoint="IngestStream",outcome="ok"}'), 1);
  assert.equal(value(text, 'analytics_requests_total{face="http",endpoint="/analytics",outcome="ok"}'), 2);
  assert.equal(value(text, 'analytics_requests_total{face="http",endpoint="/analytics",outcome="invalid_event"}'), 1);
  assert.equal(value(text, 'analytics_requests_total{face="http",endpoint="/metrics",outcome="unauthorized"}'), 1);
  assert.equal(value(text, 'analytics_requests_total{face="grpc",endpoint="Ingest",outcome="ok"}'), 1);
  assert.equal(value(text, 'analytics_ingest_duration_seconds_count{face="http"}'), 3);
  assert.equal(value(text, 'analytics_log_commit_duration_seconds_count'), 3); // the repeat appends nothing
  assert.equal(value(text, 'analytics_snapshot_duration_seconds_count'), 1);
  assert.ok(value(text, 'analytics_snapshot_bytes')! > 40);
  assert.equal(value(text, 'analytics_projects'), 1);
  assert.equal(value(text, 'analytics_live_days'), 1);
  assert.equal(value(text, 'analytics_awake_days'), 1, 'today, just written');
  assert.equal(value(text, 'analytics_sealed_days'), 0);
  assert.ok(value(text, 'analytics_process_resident_memory_bytes')! > 1e6);
  assert.ok(value(text, 'analytics_nodejs_eventloop_lag_p99_seconds') !== undefined);
});

test('after a restart analytics_snapshot_bytes is the newest snapshot on disk before any new one is written', async () => {
  svc = await svc.restart({ METRICS_PORT: '0' });
  const text = await scrape();
  assert.equal(value(text, 'analytics_snapshot_duration_seconds_count'), 0, 'no snapshot written since the start');
  const newest = readdirSync(path.join(svc.dataDir, 'snapshots')).filter((f) => f.endsWith('.bin')).sort().at(-1)!;
  assert.equal(value(text, 'analytics_snapshot_bytes'), statSync(path.join(svc.dataDir, 'snapshots', newest)).size);
});

test('the main port is unchanged: GET /metrics there still wants a key', async () => {
  assert.equal((await api(svc.url, '/metrics')).status, 401);
});

test('without METRICS_PORT there is no metrics listener', async () => {
  const plain = await startTestService();
  try {
    assert.equal(plain.service.metricsPort, undefined);
  } finally {
    await plain.destroy();
  }
});
