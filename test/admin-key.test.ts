import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { startService, type RunningService } from '../src/service.ts';
import { api } from './helpers.ts';

const dataDir = mkdtempSync(path.join(tmpdir(), 'analytics-admin-key-'));
after(() => rmSync(dataDir, { recursive: true, force: true }));

/** Starts the service on `dataDir` as `npm start` would (no quiet flag), capturing what it logs. */
async function start(adminKey?: string): Promise<{ svc: RunningService; lines: string[] }> {
  const lines: string[] = [];
  const env: Record<string, string> = { PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: dataDir };
  if (adminKey !== undefined) env.ANALYTICS_ADMIN_KEY = adminKey;
  const svc = await startService(loadConfig(env), { log: (line) => lines.push(line) });
  return { svc, lines };
}

const status = async (svc: RunningService, key: string) => (await api(svc.url, '/projects', { key })).status;
const newKey = () => `ak_${randomBytes(24).toString('base64url')}`;

test('a generated admin key is written to a 0600 file and logged only as a hint; a configured one then replaces it, also after restarts', async () => {
  // First start, no configured key: generated, written, logged as file + hint, never in full.
  let { svc, lines } = await start();
  const file = path.join(dataDir, 'admin.key');
  const generated = readFileSync(file, 'utf8').trim();
  assert.match(generated, /^ak_[A-Za-z0-9_-]{22,}$/);
  assert.equal(statSync(file).mode & 0o777, 0o600);
  const log = lines.join('\n');
  assert.ok(!log.includes(generated), `the log must not contain the key:\n${log}`);
  assert.ok(log.includes(file), `the log names the file:\n${log}`);
  assert.ok(log.includes(`ak_…${generated.slice(-4)}`), `the log shows the hint:\n${log}`);
  assert.equal(await status(svc, generated), 200);
  await svc.stop();

  // A restart without the variable keeps the generated key and generates nothing new.
  ({ svc, lines } = await start());
  assert.equal(await status(svc, generated), 200);
  assert.equal(readFileSync(file, 'utf8').trim(), generated);
  assert.ok(!lines.join('\n').includes('generated'), lines.join('\n'));
  await svc.stop();

  // ANALYTICS_ADMIN_KEY set: it is the only admin key; the generated one answers 401.
  const first = newKey();
  ({ svc, lines } = await start(first));
  assert.equal(await status(svc, first), 200);
  assert.equal(await status(svc, generated), 401);
  assert.ok(!lines.join('\n').includes(first), lines.join('\n'));
  assert.equal(existsSync(file), false, 'the file of the revoked generated key is removed');
  await svc.stop();

  // Rotation: restart with another configured key; the earlier configured and the generated key stay refused.
  const second = newKey();
  ({ svc } = await start(second));
  assert.equal(await status(svc, second), 200);
  assert.equal(await status(svc, first), 401);
  assert.equal(await status(svc, generated), 401);
  await svc.stop();

  // Back to no variable: the last configured key stays the admin key; nothing is generated.
  ({ svc, lines } = await start());
  assert.equal(await status(svc, second), 200);
  assert.equal(existsSync(file), false);
  await svc.stop();
});
