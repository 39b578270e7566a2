import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { assertError, assertRateHeaders, ingest, pv, storedEvents } from './contract-helpers.ts';
import { api, createProject, startTestService, type ApiOptions, type CreatedProject, type TestService } from './helpers.ts';

/** CONTRACT "Keys and scopes", POST /projects validation, origins, referrers and CORS, over real HTTP. */

let svc: TestService;
let a: CreatedProject;
let b: CreatedProject;
/** allowed_origins (given with a trailing slash) and allowed_referrers set */
let shop: CreatedProject;

before(async () => {
  svc = await startTestService();
  a = await createProject(svc.url, svc.adminKey, { name: 'A' });
  b = await createProject(svc.url, svc.adminKey, { name: 'B' });
  shop = await createProject(svc.url, svc.adminKey, {
    name: 'Shop',
    allowed_origins: ['https://shop.example/', 'http://localhost:3000'],
    allowed_referrers: ['shop.example', 'WWW.Shop.Example'],
  });
});
after(() => svc.destroy());

const projectCount = async () => ((await api(svc.url, '/projects', { key: svc.adminKey })).body.projects as unknown[]).length;

describe('keys: a request without a valid key', () => {
  const routes: Array<{ route: string; method: string; body?: unknown }> = [
    { route: '/analytics', method: 'POST', body: pv('/401') },
    { route: '/metrics', method: 'GET' },
    { route: '/projects', method: 'GET' },
    { route: '/projects', method: 'POST', body: { allowed_origins: [], allowed_referrers: [] } },
  ];
  const keys: Array<{ name: string; headers: () => Record<string, string> }> = [
    { name: 'no Authorization header', headers: () => ({}) },
    { name: 'a Bearer without a key', headers: () => ({ authorization: 'Bearer ' }) },
    { name: 'a Basic scheme', headers: () => ({ authorization: `Basic ${Buffer.from('u:p').toString('base64')}` }) },
    { name: 'a key with an unknown prefix', headers: () => ({ authorization: `Bearer xk_${a.keys.secret.slice(3)}` }) },
    { name: 'a well-formed key that was never issued', headers: () => ({ authorization: `Bearer sk_${'A'.repeat(32)}` }) },
    { name: 'a truncated real key', headers: () => ({ authorization: `Bearer ${a.keys.secret.slice(0, -1)}` }) },
    { name: 'a real key with one more character', headers: () => ({ authorization: `Bearer ${a.keys.secret}x` }) },
    { name: 'two keys in one header', headers: () => ({ authorization: `Bearer ${a.keys.secret} ${b.keys.secret}` }) },
  ];
  for (const r of routes) {
    for (const k of keys) {
      test(`is refused on ${r.method} ${r.route} with 401 unauthorized when it sends ${k.name}`, async () => {
        const before = await storedEvents(svc.url, a.keys.secret);
        const projects = await projectCount();
        const opts: ApiOptions = { method: r.method, headers: k.headers() };
        if (r.body !== undefined) opts.body = r.body;
        const res = await api(svc.url, r.route, opts);
        assertError(res, 401, 'unauthorized');
        assertRateHeaders(res);
        assert.equal(await storedEvents(svc.url, a.keys.secret), before);
        assert.equal(await projectCount(), projects);
      });
    }
  }

  test('a lower-case "bearer" scheme is accepted (schemes are case-insensitive)', async () => {
    const res = await api(svc.url, '/metrics', { headers: { authorization: `bearer ${a.keys.secret}` } });
    assert.equal(res.status, 200);
  });
});

describe('keys: pk_ keys only ingest', () => {
  const refusals: Array<{ name: string; route: string; method: string; body?: unknown }> = [
    { name: 'GET /metrics', route: '/metrics', method: 'GET' },
    { name: 'GET /metrics for its own project', route: '/metrics?projectId=__A__', method: 'GET' },
    { name: 'GET /projects', route: '/projects', method: 'GET' },
    { name: 'POST /projects', route: '/projects', method: 'POST', body: { allowed_origins: [], allowed_referrers: [] } },
  ];
  for (const r of refusals) {
    test(`a pk_ key is refused on ${r.name} with 403 forbidden and creates nothing`, async () => {
      const projects = await projectCount();
      const opts: ApiOptions = { method: r.method, key: a.keys.publishable };
      if (r.body !== undefined) opts.body = r.body;
      const res = await api(svc.url, r.route.replace('__A__', a.project.id), opts);
      assertError(res, 403, 'forbidden');
      assertRateHeaders(res);
      assert.equal(await projectCount(), projects);
    });
  }

  test('a pk_ key ingests into its own project', async () => {
    const before = await storedEvents(svc.url, a.keys.secret);
    const res = await ingest(svc.url, a.keys.publishable, pv('/pk'));
    assert.equal(res.status, 200);
    assert.equal(await storedEvents(svc.url, a.keys.secret), before + 1);
  });
});

describe('keys: sk_ keys see only their project', () => {
  const refusals: Array<{ name: string; send: () => Promise<import('./helpers.ts').ApiResponse> }> = [
    { name: "GET /metrics?projectId= of another project", send: () => api(svc.url, `/metrics?projectId=${b.project.id}`, { key: a.keys.secret }) },
    { name: 'GET /metrics?projectId= of a project that does not exist', send: () => api(svc.url, '/metrics?projectId=p_doesnotexist', { key: a.keys.secret }) },
    { name: "an event whose projectId is another project's", send: () => ingest(svc.url, a.keys.secret, pv('/x', { projectId: b.project.id })) },
    {
      name: 'a batch where only the third event names another project',
      send: () => ingest(svc.url, a.keys.secret, [pv('/1'), pv('/2', { projectId: a.project.id }), pv('/3', { projectId: b.project.id }), pv('/4')]),
    },
    { name: "a pk_ event whose projectId is another project's", send: () => ingest(svc.url, a.keys.publishable, pv('/x', { projectId: b.project.id })) },
  ];
  for (const r of refusals) {
    test(`refuses ${r.name} with 403 forbidden and stores nothing in either project`, async () => {
      const beforeA = await storedEvents(svc.url, a.keys.secret);
      const beforeB = await storedEvents(svc.url, b.keys.secret);
      const res = await r.send();
      assertError(res, 403, 'forbidden');
      assertRateHeaders(res);
      assert.equal(await storedEvents(svc.url, a.keys.secret), beforeA);
      assert.equal(await storedEvents(svc.url, b.keys.secret), beforeB);
    });
  }

  test('an event that names its own project, or none, is stored in the key\'s project', async () => {
    const before = await storedEvents(svc.url, a.keys.secret);
    const res = await ingest(svc.url, a.keys.secret, [pv('/own', { projectId: a.project.id }), pv('/none')]);
    assert.equal(res.status, 200);
    assert.equal(res.body.accepted, 2);
    assert.equal(await storedEvents(svc.url, a.keys.secret), before + 2);
  });

  test('GET /metrics?projectId= of its own project answers its own figures', async () => {
    const res = await api(svc.url, `/metrics?projectId=${a.project.id}`, { key: a.keys.secret });
    assert.equal(res.status, 200);
    assert.equal(res.body.projectId, a.project.id);
  });

  test('GET /projects with an sk_ key lists exactly its own project and never any key', async () => {
    const res = await api(svc.url, '/projects', { key: b.keys.secret });
    assert.equal(res.status, 200);
    assert.deepEqual(res.body.projects.map((p: { id: string }) => p.id), [b.project.id]);
    assert.doesNotMatch(JSON.stringify(res.body), /\b(sk|pk|ak)_/);
  });

  test('an sk_ key creates a project; its new sk_ lists only the new project and the creator still lists only its own', async () => {
    const created = await api(svc.url, '/projects', { key: a.keys.secret, body: { name: 'A child', allowed_origins: [], allowed_referrers: [] } });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    assertRateHeaders(created);
    const child = created.body as CreatedProject;
    assert.match(child.keys.secret, /^sk_/);
    assert.match(child.keys.publishable, /^pk_/);

    const mine = await api(svc.url, '/projects', { key: a.keys.secret });
    assert.deepEqual(mine.body.projects.map((p: { id: string }) => p.id), [a.project.id]);
    const theirs = await api(svc.url, '/projects', { key: child.keys.secret });
    assert.deepEqual(theirs.body.projects.map((p: { id: string }) => p.id), [child.project.id]);
    assert.equal(theirs.body.projects[0].name, 'A child');
    const all = await api(svc.url, '/projects', { key: svc.adminKey });
    assert.ok(all.body.projects.some((p: { id: string }) => p.id === child.project.id));

    // the keys are separate: the child's sk_ cannot read A, A's sk_ cannot read the child
    assertError(await api(svc.url, `/metrics?projectId=${a.project.id}`, { key: child.keys.secret }), 403, 'forbidden');
    assertError(await api(svc.url, `/metrics?projectId=${child.project.id}`, { key: a.keys.secret }), 403, 'forbidden');
    assert.equal((await ingest(svc.url, child.keys.publishable, pv('/child'))).status, 200);
    assert.equal(await storedEvents(svc.url, child.keys.secret), 1);
  });
});

describe('keys: ak_ keys manage and read every project', () => {
  test('an ak_ key lists every project with the contract fields and no keys', async () => {
    const res = await api(svc.url, '/projects', { key: svc.adminKey });
    assert.equal(res.status, 200);
    assertRateHeaders(res);
    const ids = res.body.projects.map((p: { id: string }) => p.id);
    for (const p of [a, b, shop]) assert.ok(ids.includes(p.project.id));
    for (const p of res.body.projects) {
      assert.deepEqual(Object.keys(p).sort(), ['allowed_origins', 'allowed_referrers', 'created_at', 'id', 'monthly_quota', 'name', 'timezone', 'tracked_props']);
      assert.ok(!Number.isNaN(Date.parse(p.created_at)));
    }
    assert.doesNotMatch(JSON.stringify(res.body), /\b(sk|pk|ak)_/);
  });

  test('an ak_ key reads the metrics of any project by ?projectId=', async () => {
    await ingest(svc.url, b.keys.secret, pv('/for-admin'));
    for (const p of [a, b]) {
      const res = await api(svc.url, `/metrics?projectId=${p.project.id}`, { key: svc.adminKey });
      assert.equal(res.status, 200);
      assert.equal(res.body.projectId, p.project.id);
      assert.equal(res.body.pageviews, (await api(svc.url, '/metrics', { key: p.keys.secret })).body.pageviews);
    }
  });

  test('an ak_ key is refused on POST /analytics with 403 even when the event names a project', async () => {
    const before = await storedEvents(svc.url, a.keys.secret);
    const res = await ingest(svc.url, svc.adminKey, pv('/admin', { projectId: a.project.id }));
    assertError(res, 403, 'forbidden');
    assertRateHeaders(res);
    assert.equal(await storedEvents(svc.url, a.keys.secret), before);
  });
});

describe('POST /projects validation', () => {
  const base = { allowed_origins: [], allowed_referrers: [] };
  const invalid: Array<{ name: string; body: unknown; path?: string }> = [
    { name: 'a body that is an array', body: [base] },
    { name: 'a body that is a string', body: 'project' },
    { name: 'no allowed_origins', body: { allowed_referrers: [] }, path: 'allowed_origins' },
    { name: 'no allowed_referrers', body: { allowed_origins: [] }, path: 'allowed_referrers' },
    { name: 'allowed_origins that is a string', body: { ...base, allowed_origins: 'https://a.example' }, path: 'allowed_origins' },
    { name: 'an origin that is not a URL', body: { ...base, allowed_origins: ['a.example'] }, path: 'allowed_origins.0' },
    { name: 'an origin with a path', body: { ...base, allowed_origins: ['https://a.example/app'] }, path: 'allowed_origins.0' },
    { name: 'an origin with a query', body: { ...base, allowed_origins: ['https://a.example?x=1'] }, path: 'allowed_origins.0' },
    { name: 'an origin with a fragment', body: { ...base, allowed_origins: ['https://a.example#x'] }, path: 'allowed_origins.0' },
    { name: 'an origin with credentials', body: { ...base, allowed_origins: ['https://u:p@a.example'] }, path: 'allowed_origins.0' },
    { name: 'an origin with a non-http scheme', body: { ...base, allowed_origins: ['ftp://a.example'] }, path: 'allowed_origins.0' },
    { name: 'an origin that is not a string', body: { ...base, allowed_origins: [42] }, path: 'allowed_origins.0' },
    { name: 'a referrer that is a URL', body: { ...base, allowed_referrers: ['https://a.example'] }, path: 'allowed_referrers.0' },
    { name: 'a referrer with a path', body: { ...base, allowed_referrers: ['a.example/x'] }, path: 'allowed_referrers.0' },
    { name: 'a referrer with a space', body: { ...base, allowed_referrers: ['a example'] }, path: 'allowed_referrers.0' },
    { name: 'an empty referrer', body: { ...base, allowed_referrers: [''] }, path: 'allowed_referrers.0' },
    { name: 'an unknown timezone', body: { ...base, timezone: 'Mars/Olympus_Mons' }, path: 'timezone' },
    { name: 'a timezone that is a number', body: { ...base, timezone: 1 }, path: 'timezone' },
    { name: 'a negative monthly_quota', body: { ...base, monthly_quota: -1 }, path: 'monthly_quota' },
    { name: 'a fractional monthly_quota', body: { ...base, monthly_quota: 1.5 }, path: 'monthly_quota' },
    { name: 'a monthly_quota given as a string', body: { ...base, monthly_quota: '100' }, path: 'monthly_quota' },
    { name: 'an empty name', body: { ...base, name: '  ' }, path: 'name' },
    { name: 'a name of 101 characters', body: { ...base, name: 'n'.repeat(101) }, path: 'name' },
    { name: 'a zero per-key rate', body: { ...base, rate_limit: { per_key: 0 } }, path: 'rate_limit.per_key' },
    { name: 'an unknown field', body: { ...base, owner: 'someone-else' } },
  ];
  for (const r of invalid) {
    test(`refuses ${r.name} with 400 invalid_request${r.path ? ` naming ${r.path}` : ''} and creates nothing`, async () => {
      const projects = await projectCount();
      const res = await api(svc.url, '/projects', { key: svc.adminKey, body: r.body });
      assertError(res, 400, 'invalid_request');
      assertRateHeaders(res);
      if (r.path !== undefined) {
        assert.ok(res.body.error.details.some((d: { path: string }) => d.path === r.path), JSON.stringify(res.body.error.details));
      }
      assert.equal(await projectCount(), projects);
    });
  }

  test('fills in the defaults: a name, timezone UTC and the 100,000 monthly quota', async () => {
    const res = await api(svc.url, '/projects', { key: svc.adminKey, body: base });
    assert.equal(res.status, 200);
    assert.equal(res.body.project.timezone, 'UTC');
    assert.equal(res.body.project.monthly_quota, 100_000);
    assert.equal(typeof res.body.project.name, 'string');
    const listed = (await api(svc.url, '/projects', { key: res.body.keys.secret })).body.projects[0];
    assert.equal(listed.monthly_quota, 100_000);
    assert.equal(listed.timezone, 'UTC');
  });

  test('normalizes origins (trailing slash, default port, case) and referrers (case) and keeps the rest', async () => {
    const res = await api(svc.url, '/projects', {
      key: svc.adminKey,
      body: {
        name: 'Normalized',
        allowed_origins: ['https://A.Example/', 'https://a.example:443', 'http://b.example:8080'],
        allowed_referrers: ['News.Example.COM'],
        timezone: 'Asia/Kolkata',
        monthly_quota: 0,
      },
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.project.allowed_origins, ['https://a.example', 'http://b.example:8080']);
    assert.deepEqual(res.body.project.allowed_referrers, ['news.example.com']);
    assert.equal(res.body.project.timezone, 'Asia/Kolkata');
    assert.equal(res.body.project.monthly_quota, 0);
    assert.equal(res.body.project.name, 'Normalized');
  });
});

describe('origins and referrers', () => {
  const site = 'https://shop.example';
  type Case = { name: string; key: () => string; headers: Record<string, string>; route?: string };
  const refused: Case[] = [
    { name: 'a pk_ request from a foreign Origin', key: () => shop.keys.publishable, headers: { origin: 'https://evil.example' } },
    { name: 'a pk_ request whose Origin differs only in scheme', key: () => shop.keys.publishable, headers: { origin: 'http://shop.example' } },
    { name: 'a pk_ request whose Origin differs only in port', key: () => shop.keys.publishable, headers: { origin: 'https://shop.example:8443' } },
    { name: 'a pk_ request from a subdomain of an allowed origin', key: () => shop.keys.publishable, headers: { origin: 'https://www.shop.example' } },
    { name: 'a pk_ request with Origin "null" (sandboxed frame, file://)', key: () => shop.keys.publishable, headers: { origin: 'null' } },
    { name: 'a pk_ request without Origin', key: () => shop.keys.publishable, headers: {} },
    { name: 'a pk_ request without Origin but with an allowed Referer', key: () => shop.keys.publishable, headers: { referer: `${site}/cart` } },
    { name: 'a pk_ request whose Referer host is not allowed', key: () => shop.keys.publishable, headers: { origin: site, referer: 'https://evil.example/x' } },
    { name: 'a pk_ request whose Referer is not a URL', key: () => shop.keys.publishable, headers: { origin: site, referer: 'shop.example' } },
    { name: 'an sk_ request from a foreign Origin', key: () => shop.keys.secret, headers: { origin: 'https://evil.example' } },
    { name: 'an sk_ request whose Referer host is not allowed', key: () => shop.keys.secret, headers: { referer: 'https://evil.example/' } },
  ];
  for (const c of refused) {
    test(`refuses ${c.name} with 403 forbidden and counts nothing`, async () => {
      const before = await storedEvents(svc.url, shop.keys.secret);
      const res = await ingest(svc.url, c.key(), pv('/refused'), { headers: c.headers });
      assertError(res, 403, 'forbidden');
      assertRateHeaders(res);
      assert.equal(await storedEvents(svc.url, shop.keys.secret), before);
    });
  }

  const allowed: Case[] = [
    { name: 'a pk_ request from an allowed Origin (configured with a trailing slash)', key: () => shop.keys.publishable, headers: { origin: site } },
    { name: 'a pk_ request from an allowed Origin with a port', key: () => shop.keys.publishable, headers: { origin: 'http://localhost:3000' } },
    { name: 'a pk_ request from an allowed Origin sent with a trailing slash', key: () => shop.keys.publishable, headers: { origin: `${site}/` } },
    { name: 'a pk_ request from an allowed Origin in upper case', key: () => shop.keys.publishable, headers: { origin: 'HTTPS://SHOP.EXAMPLE' } },
    { name: 'a pk_ request with an allowed Origin and an allowed Referer host', key: () => shop.keys.publishable, headers: { origin: site, referer: `${site}/p?q=1` } },
    { name: 'a pk_ request whose Referer host matches a referrer configured in upper case', key: () => shop.keys.publishable, headers: { origin: site, referer: 'https://www.shop.example/' } },
    { name: 'an sk_ request without Origin (server to server)', key: () => shop.keys.secret, headers: {} },
    { name: 'an sk_ request from an allowed Origin', key: () => shop.keys.secret, headers: { origin: site } },
  ];
  for (const c of allowed) {
    test(`accepts ${c.name} and counts it once`, async () => {
      const before = await storedEvents(svc.url, shop.keys.secret);
      const res = await ingest(svc.url, c.key(), pv('/allowed'), { headers: c.headers });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(await storedEvents(svc.url, shop.keys.secret), before + 1);
    });
  }

  test('an sk_ read from a foreign Origin is refused with 403; from an allowed one or none it answers', async () => {
    assertError(await api(svc.url, '/metrics', { key: shop.keys.secret, headers: { origin: 'https://evil.example' } }), 403, 'forbidden');
    assert.equal((await api(svc.url, '/metrics', { key: shop.keys.secret, headers: { origin: site } })).status, 200);
    assert.equal((await api(svc.url, '/metrics', { key: shop.keys.secret })).status, 200);
  });

  test('a project without allowed origins or referrers takes pk_ requests from anywhere, with or without Origin', async () => {
    const before = await storedEvents(svc.url, a.keys.secret);
    const variants: Array<Record<string, string>> = [{}, { origin: 'https://anything.example' }, { origin: 'null' }, { referer: 'https://x.example/' }];
    for (const headers of variants) {
      const res = await ingest(svc.url, a.keys.publishable, pv('/open'), { headers });
      assert.equal(res.status, 200, JSON.stringify(headers));
    }
    assert.equal(await storedEvents(svc.url, a.keys.secret), before + 4);
  });
});

describe('CORS', () => {
  const origin = 'https://cors.example';
  const exposed = ['retry-after', 'ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset'];
  const requests: Array<{ name: string; route: string; opts: () => ApiOptions; status: number }> = [
    { name: 'an accepted event', route: '/analytics', opts: () => ({ key: a.keys.publishable, body: pv('/cors') }), status: 200 },
    { name: 'an invalid event', route: '/analytics', opts: () => ({ key: a.keys.publishable, body: { url: '/' } }), status: 400 },
    { name: 'a request without a key', route: '/analytics', opts: () => ({ body: pv('/cors') }), status: 401 },
    { name: 'a refused origin', route: '/analytics', opts: () => ({ key: shop.keys.publishable, body: pv('/cors') }), status: 403 },
    { name: 'a metrics read', route: '/metrics', opts: () => ({ key: a.keys.secret }), status: 200 },
    { name: 'a health check', route: '/health', opts: () => ({}), status: 200 },
    { name: 'an unknown path', route: '/nope', opts: () => ({}), status: 404 },
    { name: 'a wrong method', route: '/metrics', opts: () => ({ method: 'DELETE' }), status: 405 },
    { name: 'a wrong content type', route: '/analytics', opts: () => ({ key: a.keys.publishable, raw: 'x', headers: { 'content-type': 'image/png' } }), status: 415 },
  ];
  for (const r of requests) {
    test(`the answer to ${r.name} (${r.status}) reflects the Origin and exposes Retry-After and RateLimit-*`, async () => {
      const o = r.opts();
      const res = await api(svc.url, r.route, { ...o, headers: { ...o.headers, origin } });
      assert.equal(res.status, r.status, JSON.stringify(res.body));
      assert.equal(res.headers.get('access-control-allow-origin'), origin);
      const expose = (res.headers.get('access-control-expose-headers') ?? '').toLowerCase().split(/\s*,\s*/);
      for (const h of exposed) assert.ok(expose.includes(h), `${h} not in ${expose.join(', ')}`);
      assert.match(res.headers.get('vary') ?? '', /origin/i);
      assert.equal(res.headers.get('access-control-allow-credentials'), null);
    });
  }

  for (const route of ['/analytics', '/metrics', '/projects', '/health', '/script.js', '/no/such/path', '/']) {
    test(`answers a preflight on ${route} with 2xx, the reflected Origin, Authorization and Content-Type, and max-age of at least 600`, async () => {
      const res = await fetch(svc.url + route, {
        method: 'OPTIONS',
        headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type' },
      });
      await res.arrayBuffer();
      assert.ok(res.status >= 200 && res.status < 300, String(res.status));
      assert.equal(res.headers.get('access-control-allow-origin'), origin);
      const allowHeaders = (res.headers.get('access-control-allow-headers') ?? '').toLowerCase();
      assert.match(allowHeaders, /authorization/);
      assert.match(allowHeaders, /content-type/);
      const methods = res.headers.get('access-control-allow-methods') ?? '';
      assert.match(methods, /POST/);
      assert.match(methods, /GET/);
      assert.ok(Number(res.headers.get('access-control-max-age')) >= 600);
      assert.equal(res.headers.get('set-cookie'), null);
    });
  }

  test('a response to a request without Origin carries no Access-Control-Allow-Origin', async () => {
    const res = await api(svc.url, '/health');
    assert.equal(res.headers.get('access-control-allow-origin'), null);
  });
});
