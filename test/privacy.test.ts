import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { api, createProject, startTestService } from './helpers.ts';

const IP = '91.42.137.201'; // Deutsche Telekom range: the bundled database says DE
const UA = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36 Zx9DistinctiveToken/4.2';
const BOT_UA = 'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)';

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name);
    return statSync(full).isDirectory() ? filesUnder(full) : [full];
  });
}

test('derives country, device and session from the request, counts bots apart, and never stores the IP or User-Agent', async () => {
  const svc = await startTestService({ TRUST_PROXY: '1' });
  try {
    const { project, keys } = await createProject(svc.url, svc.adminKey);
    const headers = { 'user-agent': UA, 'x-forwarded-for': IP };
    for (const p of ['/a', '/b']) {
      const r = await api(svc.url, '/analytics', { key: keys.secret, headers, body: { event: 'page_view', url: `https://site.example${p}` } });
      assert.equal(r.status, 200);
    }
    const bot = await api(svc.url, '/analytics', { key: keys.secret, headers: { 'user-agent': BOT_UA, 'x-forwarded-for': IP }, body: { event: 'page_view', url: '/' } });
    assert.equal(bot.status, 200, 'bots are acknowledged');

    const m = (await api(svc.url, '/metrics', { key: keys.secret })).body;
    assert.equal(m.pageviews, 2, 'the bot hit is not counted');
    assert.equal(m.bots, 1);
    assert.deepEqual(m.countries, { DE: 1 });
    assert.deepEqual(m.devices, { desktop: 1 });
    assert.equal(m.sessions, 1, 'both page views share one derived session');
    assert.equal(m.bounceRate, '0.0%');
    const sessionId: string = m.recentEvents[0].sessionId;
    assert.ok(sessionId.length >= 16 && !sessionId.includes(IP));

    await svc.service.engine.snapshotNow();
    await svc.stop();
    const needles = [IP, 'Zx9DistinctiveToken', 'Googlebot'].flatMap((s) => [Buffer.from(s, 'latin1'), Buffer.from(s, 'utf16le')]);
    const files = filesUnder(svc.dataDir);
    assert.ok(files.some((f) => f.endsWith('.lmdb')) && files.some((f) => f.endsWith('.bin')), 'the log and a snapshot were scanned');
    for (const file of files) {
      const bytes = readFileSync(file);
      for (const needle of needles) assert.equal(bytes.indexOf(needle), -1, `${file} contains ${needle.toString()}`);
    }
    assert.ok(project.id);
  } finally {
    await svc.destroy();
  }
});

test('a raw User-Agent or address sent as a field of an event (a history line, page context) is read, never kept: not in any file, not in the export', async () => {
  const svc = await startTestService();
  try {
    const { project, keys } = await createProject(svc.url, svc.adminKey);
    const ua = 'Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1 Qv7HistoryToken';
    const history = await api(svc.url, `/projects/${project.id}/history`, {
      key: keys.secret,
      body: [{ event: 'page_view', url: 'https://site.example/old', sessionId: 'h1', timestamp: Date.now() - 86_400_000, userAgent: ua, ip: '203.0.113.77', title: 'Kept page context' }],
    });
    assert.equal(history.status, 200, JSON.stringify(history.body));
    const live = await api(svc.url, '/analytics', { key: keys.secret, body: { event: 'page_view', url: 'https://site.example/', user_agent: ua, ip_address: '203.0.113.77' } });
    assert.equal(live.status, 200);
    const yesterday = new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
    const m = (await api(svc.url, `/metrics?date=${yesterday}`, { key: keys.secret })).body;
    assert.deepEqual(m.devices, { mobile: 1 }, 'the history line\'s User-Agent still gives its device');
    const exported = await fetch(`${svc.url}/projects/${project.id}/export?from=${yesterday}`, { headers: { authorization: `Bearer ${keys.secret}` } }).then((r) => r.text());
    assert.match(exported, /Kept page context/, 'other page context is kept');
    assert.doesNotMatch(exported, /Qv7HistoryToken|203\.0\.113\.77/);
    await svc.service.engine.snapshotNow();
    await svc.stop();
    for (const file of filesUnder(svc.dataDir)) {
      const bytes = readFileSync(file);
      for (const needle of ['Qv7HistoryToken', '203.0.113.77']) assert.equal(bytes.indexOf(Buffer.from(needle, 'latin1')), -1, `${file} contains ${needle}`);
    }
  } finally {
    await svc.destroy();
  }
});
