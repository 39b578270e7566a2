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
  assert.ok(Object.isFrozen(c));
});

test('bad values stop startup with a message naming each setting', () => {
  for (const [env, name] of [
    [{ PORT: 'eighty' }, 'PORT'],
    [{ GRPC_PORT: '70000' }, 'GRPC_PORT'],
    [{ ANALYTICS_DURABILITY: 'sometimes' }, 'ANALYTICS_DURABILITY'],
    [{ ANALYTICS_ADMIN_KEY: 'short' }, 'ANALYTICS_ADMIN_KEY'],
    [{ TRUST_PROXY: 'maybe' }, 'TRUST_PROXY'],
  ] as const) {
    assert.throws(() => loadConfig(env), (err: unknown) => err instanceof ConfigError && err.message.includes(name), name);
  }
});
