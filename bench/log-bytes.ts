import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/config.ts';
import { startService } from '../src/service.ts';
import { LogStore } from '../src/store/lmdb/log-store.ts';
import { wireEvents } from './state/generate-events.ts';

/**
 * Log bytes per event (issue 18's goal: ≤ 150): typical events from the bench generator, sent through the real
 * service single-event and in batches of 100, then the stored entry bytes and the log dictionaries' bytes summed, per
 * event (LMDB page overhead not counted).
 * Run: `npx tsx bench/log-bytes.ts`.
 */
async function measure(batch: number, total: number): Promise<{ perEvent: number; entries: number; dictionaryPerEvent: number }> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'analytics-logbytes-'));
  const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
  const config = loadConfig({ PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: dataDir, ANALYTICS_ADMIN_KEY: adminKey, ANALYTICS_QUIET: '1', ANALYTICS_DURABILITY: 'commit' });
  const svc = await startService(config);
  const post = (route: string, key: string, body: unknown) =>
    fetch(svc.url + route, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
  const created = await post('/projects', adminKey, { allowed_origins: [], allowed_referrers: [], monthly_quota: 0 });
  const events = wireEvents(total).map((e, i) => ({ ...e, eventId: `e-${i}` }));
  for (let i = 0; i < total; i += batch) await post('/analytics', created.keys.secret, events.slice(i, i + batch));
  await svc.stop();
  const store = LogStore.open(dataDir, 'commit');
  const size = store.logSize();
  await store.close();
  rmSync(dataDir, { recursive: true, force: true });
  return { perEvent: (size.bytes + size.dictionaryBytes) / size.records, entries: size.entries, dictionaryPerEvent: size.dictionaryBytes / size.records };
}

const single = await measure(1, 2000);
const batched = await measure(100, 20_000);
console.log(
  `log bytes per event (entries + dictionaries): single-event batches ${single.perEvent.toFixed(1)} (dictionaries ${single.dictionaryPerEvent.toFixed(1)}), batches of 100 ${batched.perEvent.toFixed(1)} (dictionaries ${batched.dictionaryPerEvent.toFixed(1)})`,
);
