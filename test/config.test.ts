import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../src/config.ts';

test('defaults match the contract when the environment is empty', () => {
  const c = loadConfig({});
  assert.deepEqual(
    [c.port, c.grpcPort, c.host, c.dataDir, c.durability, c.adminKey, c.trustProxy],
    [8080, 50051, '127.0.0.1', './storage', 'flush', undefined, false],
  );
  assert.deepEqual(c.rate, { perKey: 1000, burstPerKey: 2000, perIp: 50, burstPerIp: 100 });
  assert.equal(c.heapGrowingPercent, 25);
  assert.equal(loadConfig({ ANALYTICS_HEAP_GROWING_PERCENT: '0' }).heapGrowingPercent, 0, '0 hands the choice back to V8');
  assert.ok(Object.isFrozen(c));
});

test('bad values stop startup with a message naming each setting', () => {
  for (const [env, name] of [
    [{ PORT: 'eighty' }, 'PORT'],
    [{ GRPC_PORT: '70000' }, 'GRPC_PORT'],
    [{ ANALYTICS_DURABILITY: 'sometimes' }, 'ANALYTICS_DURABILITY'],
    [{ ANALYTICS_ADMIN_KEY: 'short' }, 'ANALYTICS_ADMIN_KEY'],
    [{ TRUST_PROXY: 'maybe' }, 'TRUST_PROXY'],
    [{ ANALYTICS_HEAP_GROWING_PERCENT: '-5' }, 'ANALYTICS_HEAP_GROWING_PERCENT'],
    [{ ANALYTICS_HEAP_GROWING_PERCENT: 'lots' }, 'ANALYTICS_HEAP_GROWING_PERCENT'],
  ] as const) {
    assert.throws(() => loadConfig(env), (err: unknown) => err instanceof ConfigError && err.message.includes(name), name);
  }
});

test('cluster mode is off by default and names every setting it is missing', () => {
  const c = loadConfig({});
  assert.equal(c.mode, 'lmdb');
  assert.equal(c.cluster, undefined);
  assert.throws(
    () => loadConfig({ ANALYTICS_MODE: 'cluster' }),
    (err: unknown) =>
      err instanceof ConfigError &&
      ['ANALYTICS_ADMIN_KEY', 'ANALYTICS_NATS', 'ANALYTICS_NODE_ID'].every((name) => err.message.includes(name)),
  );
  assert.throws(
    () => loadConfig({ ANALYTICS_MODE: 'cluster', ANALYTICS_ADMIN_KEY: 'ak_0123456789abcdefghijklmn', ANALYTICS_NODE_ID: 'a', ANALYTICS_NATS: 'http://x:1' }),
    (err: unknown) => err instanceof ConfigError && err.message.includes('is not nats://host:port'),
  );
  assert.throws(() => loadConfig({ ANALYTICS_FOLD: 'some' }), (err: unknown) => err instanceof ConfigError && err.message.includes('ANALYTICS_FOLD'));
  const ok = loadConfig({
    ANALYTICS_MODE: 'cluster',
    ANALYTICS_ADMIN_KEY: 'ak_0123456789abcdefghijklmn',
    ANALYTICS_NODE_ID: 'node-a',
    ANALYTICS_NATS: 'nats://127.0.0.1:4221, nats://127.0.0.1:4222',
  });
  assert.deepEqual(ok.cluster, {
    nodeId: 'node-a',
    natsUrls: ['nats://127.0.0.1:4221', 'nats://127.0.0.1:4222'],
    partitions: 16,
    fold: 'owner',
    publishDeadlineMs: 30_000,
    retentionDays: undefined,
    maxStreamBytes: undefined,
  });
});
