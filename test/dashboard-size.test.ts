import assert from 'node:assert/strict';
import { test } from 'node:test';
import { gunzipSync } from 'node:zlib';
import { buildDashboard } from '../src/dashboard/build.ts';
import { startTestService } from './helpers.ts';

/** The budget for everything a first visit downloads (page, script with uPlot, stylesheet), gzipped. */
const MAX_DASHBOARD_GZIP_BYTES = 60 * 1024;

test('the whole dashboard (page, script, stylesheet) is at most 60 KB gzipped', async () => {
  const { gzipBytes } = await buildDashboard();
  assert.ok(gzipBytes <= MAX_DASHBOARD_GZIP_BYTES, `dashboard is ${gzipBytes} bytes gzipped, limit ${MAX_DASHBOARD_GZIP_BYTES}`);
});

test('GET /dashboard is an HTML page whose every asset is served under /dashboard/, gzipped when asked', async () => {
  const service = await startTestService();
  try {
    const page = await fetch(`${service.url}/dashboard`);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
    assert.match(page.headers.get('content-security-policy') ?? '', /default-src 'none'/);
    const html = await page.text();
    assert.match(html, /<input id="key" type="password"/);
    const assets = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((x) => x[1]!).filter((u) => !u.startsWith('#') && !u.startsWith('data:'));
    assert.equal(assets.length, 2, `one script and one stylesheet: ${assets.join(', ')}`);
    const { assets: built } = await buildDashboard();
    for (const asset of assets) {
      const url = new URL(asset, `${service.url}/dashboard`);
      assert.equal(url.origin, service.url, 'nothing from another host');
      assert.match(url.pathname, /^\/dashboard\/app\.[0-9a-f]{16}\.(js|css)$/);
      const res = await fetch(url, { headers: { 'accept-encoding': 'gzip' } });
      assert.equal(res.status, 200);
      assert.match(res.headers.get('cache-control') ?? '', /immutable/);
      assert.deepEqual(Buffer.from(await res.arrayBuffer()), built.get(url.pathname.slice('/dashboard/'.length))!.body, 'fetch unpacks the gzip to the built file');
    }
    const tagged = await fetch(`${service.url}/dashboard?utm_source=newsletter`);
    assert.equal(tagged.status, 200, '/dashboard takes any query (it is no JSON endpoint)');
    await tagged.arrayBuffer();
    const unknown = await fetch(`${service.url}/dashboard/app.0000000000000000.js`);
    assert.equal(unknown.status, 404);
    assert.equal((await unknown.json()).error.code, 'not_found');
    const post = await fetch(`${service.url}/dashboard`, { method: 'POST' });
    assert.equal(post.status, 405);
    const slash = await fetch(`${service.url}/dashboard/`, { redirect: 'manual' });
    assert.equal(slash.status, 308);
    assert.equal(new URL(slash.headers.get('location')!, `${service.url}/dashboard/`).pathname, '/dashboard');
  } finally {
    await service.destroy();
  }
});

test('the dashboard script never touches cookies or localStorage', async () => {
  const { assets } = await buildDashboard();
  for (const a of assets.values()) {
    const text = gunzipSync(a.gzip).toString();
    assert.doesNotMatch(text, /document\.cookie|localStorage/);
  }
});
