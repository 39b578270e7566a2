import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { api, createProject, startTestService, type CreatedProject, type TestService } from './helpers.ts';

/**
 * Plausible's Events API over real HTTP: a project names its site's domain, and `POST /api/event` takes what
 * Plausible's script and server-side integrations send, in both spellings, with no key.
 */

const UA = 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36';

let svc: TestService;
let shop: CreatedProject;
let blog: CreatedProject;

before(async () => {
  svc = await startTestService();
  shop = await createProject(svc.url, svc.adminKey, { name: 'Shop', domain: 'Shop.Example' });
  blog = await createProject(svc.url, svc.adminKey, { name: 'Blog', domain: 'blog.example' });
});
after(() => svc.destroy());

/** Sends a Plausible event as a browser would (its User-Agent and address make the session). */
async function send(body: unknown, opts: { ip?: string; type?: string; ua?: string; origin?: string } = {}): Promise<Response> {
  return fetch(`${svc.url}/api/event`, {
    method: 'POST',
    headers: { 'content-type': opts.type ?? 'application/json', 'user-agent': opts.ua ?? UA, 'x-forwarded-for': opts.ip ?? '198.51.100.7', ...(opts.origin ? { origin: opts.origin } : {}) },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

async function metrics(p: CreatedProject): Promise<Record<string, any>> {
  const r = await api(svc.url, '/metrics', { key: p.keys.secret });
  assert.equal(r.status, 200);
  return r.body;
}

describe('a project\'s domain', () => {
  test('is set at creation (lower case), shown, unique in the service (409), and removed with null', async () => {
    const list = await api(svc.url, '/projects', { key: svc.adminKey });
    assert.equal(list.body.projects.find((p: { id: string }) => p.id === shop.project.id).domain, 'shop.example');
    const again = await api(svc.url, '/projects', { key: svc.adminKey, body: { allowed_origins: [], allowed_referrers: [], domain: 'shop.example' } });
    assert.equal(again.status, 409);
    assert.match(again.body.error.message, /shop\.example is already another project's/);
    const bad = await api(svc.url, '/projects', { key: svc.adminKey, body: { allowed_origins: [], allowed_referrers: [], domain: 'not a host' } });
    assert.equal(bad.status, 400);
    const other = await createProject(svc.url, svc.adminKey, { name: 'Spare' });
    assert.equal((await api(svc.url, `/projects/${other.project.id}`, { method: 'PATCH', key: svc.adminKey, body: { domain: 'blog.example' } })).status, 409);
    const set = await api(svc.url, `/projects/${other.project.id}`, { method: 'PATCH', key: svc.adminKey, body: { domain: 'spare.example' } });
    assert.equal(set.body.project.domain, 'spare.example');
    const cleared = await api(svc.url, `/projects/${other.project.id}`, { method: 'PATCH', key: svc.adminKey, body: { domain: null } });
    assert.equal(cleared.status, 200);
    assert.equal(cleared.body.project.domain, undefined);
  });
});

describe('POST /api/event', () => {
  test('the API\'s spelling: a pageview counts as a page view with its source, 202 and an empty body', async () => {
    const r = await send({ name: 'pageview', url: 'https://shop.example/pricing?utm_medium=email', domain: 'shop.example', referrer: 'https://www.google.com/' });
    assert.equal(r.status, 202);
    assert.equal(await r.text(), '');
    assert.equal(r.headers.get('x-plausible-dropped'), null);
    const m = await metrics(shop);
    assert.equal(m.pageviews, 1);
    assert.equal(m.pages['/pricing'], 1);
    assert.equal(m.trafficSources.Google, 1);
  });

  test('the script\'s spelling, as text/plain, with props as JSON: a custom event with its property, in the same visit', async () => {
    const r = await send(JSON.stringify({ n: 'Signup', u: 'https://shop.example/signup', d: 'shop.example', r: null, p: JSON.stringify({ plan: 'pro', seats: 3 }) }), { type: 'text/plain' });
    assert.equal(r.status, 202);
    const m = await metrics(shop);
    assert.equal(m.events.Signup, 1);
    assert.equal(m.sessions, 1, 'the same browser: the same visit, no sessionId needed');
    const q = await api(svc.url, '/query', { key: shop.keys.secret, body: { metrics: ['events'], dimensions: ['prop:plan'], filters: [['is', 'event', ['Signup']]] } });
    assert.deepEqual(q.body.results, [{ dimensions: ['pro'], metrics: [1] }]);
  });

  test('revenue becomes the event\'s value and currency, and counts as a purchase\'s whatever the event\'s name', async () => {
    const r = await send({ name: 'purchase', url: 'https://shop.example/thanks', domain: 'shop.example', revenue: { currency: 'EUR', amount: '12.50' } });
    assert.equal(r.status, 202);
    assert.deepEqual((await metrics(shop)).revenue, { EUR: { total: 12.5, purchases: 1 } });
    // Plausible's revenue goals are custom events: "Order" with revenue counts too, in GET /metrics and POST /query
    assert.equal((await send({ name: 'Order', url: 'https://shop.example/thanks', domain: 'shop.example', revenue: { currency: 'EUR', amount: 30 } })).status, 202);
    assert.deepEqual((await metrics(shop)).revenue, { EUR: { total: 42.5, purchases: 2 } });
    const q = await api(svc.url, '/query', { key: shop.keys.secret, body: { metrics: ['revenue:EUR'], dimensions: ['event'] } });
    assert.deepEqual(q.body.totals, [42.5]);
    const byEvent = Object.fromEntries(q.body.results.map((row: { dimensions: string[]; metrics: number[] }) => [row.dimensions[0], row.metrics[0]]));
    assert.equal(byEvent.Order, 30);
    assert.equal(byEvent.purchase, 12.5);
    // exported and imported into another project, it still counts as a purchase
    const lines = (await fetch(`${svc.url}/projects/${shop.project.id}/export`, { headers: { authorization: `Bearer ${shop.keys.secret}` } }).then((x) => x.text())).trim().split('\n').map((l) => JSON.parse(l));
    const order = lines.find((l) => l.event === 'Order');
    assert.equal(order.revenue, true);
    const copy = await createProject(svc.url, svc.adminKey, { name: 'Copy' });
    assert.equal((await api(svc.url, `/projects/${copy.project.id}/history`, { key: copy.keys.secret, body: lines })).status, 200);
    assert.deepEqual((await metrics(copy)).revenue, { EUR: { total: 42.5, purchases: 2 } });
    // an event that sends value and currency by itself is no purchase unless it is named one
    assert.equal((await api(svc.url, '/analytics', { key: shop.keys.secret, body: { event: 'Order', eventParams: { value: 99, currency: 'EUR' } } })).status, 200);
    assert.deepEqual((await api(svc.url, '/query', { key: shop.keys.secret, body: { metrics: ['revenue:EUR'] } })).body.totals, [42.5]);
  });

  test('a comma-separated domain sends to each site; an unknown one is dropped with x-plausible-dropped', async () => {
    const before = (await metrics(blog)).pageviews as number;
    const both = await send({ name: 'pageview', url: 'https://blog.example/post', domain: 'blog.example, shop.example' });
    assert.equal(both.status, 202);
    assert.equal(both.headers.get('x-plausible-dropped'), null);
    assert.equal((await metrics(blog)).pageviews, before + 1);
    const unknown = await send({ name: 'pageview', url: 'https://nobody.example/', domain: 'nobody.example' });
    assert.equal(unknown.status, 202);
    assert.equal(unknown.headers.get('x-plausible-dropped'), '1');
    const partly = await send({ name: 'pageview', url: 'https://blog.example/', domain: 'blog.example,nobody.example' });
    assert.equal(partly.headers.get('x-plausible-dropped'), '1', 'one site did not take it');
    assert.equal((await metrics(blog)).pageviews, before + 2, 'the known site did');
  });

  test('an event the site\'s rules refuse is dropped, not an error: an origin outside allowed_origins, a bot', async () => {
    const locked = await createProject(svc.url, svc.adminKey, { name: 'Locked', domain: 'locked.example', allowed_origins: ['https://locked.example'] });
    const elsewhere = await fetch(`${svc.url}/api/event`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain', 'user-agent': UA, origin: 'https://evil.example' },
      body: JSON.stringify({ n: 'pageview', u: 'https://locked.example/', d: 'locked.example' }),
    });
    assert.equal(elsewhere.status, 202);
    assert.equal(elsewhere.headers.get('x-plausible-dropped'), '1');
    const fromSite = await fetch(`${svc.url}/api/event`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain', 'user-agent': UA, origin: 'https://locked.example' },
      body: JSON.stringify({ n: 'pageview', u: 'https://locked.example/', d: 'locked.example' }),
    });
    assert.equal(fromSite.headers.get('x-plausible-dropped'), null);
    const bot = await send({ name: 'pageview', url: 'https://locked.example/', domain: 'locked.example' }, { ua: 'Googlebot/2.1 (+http://www.google.com/bot.html)', origin: 'https://locked.example' });
    assert.equal(bot.status, 202);
    const m = await metrics(locked);
    assert.equal(m.pageviews, 1);
    assert.equal(m.bots, 1);
  });

  test('a body that is no event is 400 naming what is missing', async () => {
    for (const [body, word] of [[{ url: 'https://shop.example/', domain: 'shop.example' }, 'name'], [{ name: 'pageview', domain: 'shop.example' }, 'url'], [{ name: 'x', url: '/' }, 'domain'], [[1, 2], 'one event']] as const) {
      const r = await send(body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(((await r.json()) as { error: { message: string } }).error.message, new RegExp(word));
    }
    assert.equal((await metrics(shop)).events.Signup, 1, 'nothing more stored');
  });
});

describe('POST /api/v2/query (Plausible\'s Stats API v2)', () => {
  const stats = (body: unknown, key = shop.keys.secret) => api(svc.url, '/api/v2/query', { key, body });

  test('answers what POST /query answers, in Plausible\'s names and shape, with its query echoed', async () => {
    const r = await stats({ site_id: 'shop.example', metrics: ['visitors', 'pageviews', 'events', 'bounce_rate'], date_range: 'day' });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const ours = await api(svc.url, '/query', { key: shop.keys.secret, body: { metrics: ['visitors', 'pageviews', 'events', 'bounceRate'] } });
    assert.deepEqual(r.body.results, [{ metrics: ours.body.totals, dimensions: [] }]);
    assert.deepEqual(r.body.meta, {});
    assert.equal(r.body.query.site_id, 'shop.example');
    assert.deepEqual(r.body.query.metrics, ['visitors', 'pageviews', 'events', 'bounce_rate']);
    const today = new Date().toISOString().slice(0, 10);
    assert.deepEqual(r.body.query.date_range, [`${today}T00:00:00+00:00`, `${today}T23:59:59+00:00`]);
  });

  test('dimensions, filters, order_by, total_rows and pagination; times as Plausible writes them', async () => {
    const bySource = await stats({
      site_id: 'shop.example', metrics: ['visitors', 'visits'], date_range: '7d', dimensions: ['visit:source'],
      filters: [['is', 'event:page', ['/pricing']]], order_by: [['visitors', 'desc']], include: { total_rows: true }, pagination: { limit: 5, offset: 0 },
    });
    assert.equal(bySource.status, 200, JSON.stringify(bySource.body));
    assert.deepEqual(bySource.body.results, [{ metrics: [1, 1], dimensions: ['Google'] }]);
    assert.deepEqual(bySource.body.meta, { total_rows: 1 });
    const hours = await stats({ site_id: 'shop.example', metrics: ['pageviews'], date_range: 'day', dimensions: ['time:hour'] });
    assert.equal(hours.body.results.length, 24);
    assert.match(hours.body.results[0].dimensions[0], /^\d{4}-\d{2}-\d{2} 00:00:00$/);
    const months = await stats({ site_id: 'shop.example', metrics: ['visitors'], date_range: 'month', dimensions: ['time:month'] });
    assert.match(months.body.results[0].dimensions[0], /^\d{4}-\d{2}-01$/);
    const plans = await stats({ site_id: 'shop.example', metrics: ['events'], date_range: '30d', dimensions: ['event:props:plan'] });
    assert.deepEqual(plans.body.results, [{ metrics: [1], dimensions: ['pro'] }]);
    const custom = await stats({ site_id: 'shop.example', metrics: ['visits'], date_range: ['2026-01-01', '2026-12-31'], filters: [['contains_not', 'visit:source', ['Goo']]] });
    assert.equal(custom.status, 200, JSON.stringify(custom.body));
  });

  test('what it cannot answer is a 400 { error } naming it; keys as POST /query has them; an unknown site 404', async () => {
    for (const [body, word] of [
      [{ site_id: 'shop.example', metrics: ['time_on_page'], date_range: 'day' }, 'time_on_page'],
      [{ site_id: 'shop.example', metrics: ['visitors'], date_range: 'day', filters: [['and', [['is', 'visit:country', ['DE']]]]] }, 'and'],
      [{ site_id: 'shop.example', metrics: ['visitors'], date_range: 'day', dimensions: ['visit:city'] }, 'visit:city'],
      [{ site_id: 'shop.example', metrics: ['visitors'], date_range: 'forever' }, 'forever'],
    ] as const) {
      const r = await stats(body);
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.equal(typeof r.body.error, 'string');
      assert.ok(r.body.error.includes(word), r.body.error);
    }
    assert.equal((await stats({ site_id: 'nobody.example', metrics: ['visitors'], date_range: 'day' })).status, 404);
    assert.equal((await stats({ site_id: 'shop.example', metrics: ['visitors'], date_range: 'day' }, blog.keys.secret)).status, 403, 'another site\'s key');
    assert.equal((await stats({ site_id: 'shop.example', metrics: ['visitors'], date_range: 'day' }, svc.adminKey)).status, 200, 'an admin key names the site');
    assert.equal((await stats({ site_id: 'shop.example', metrics: ['visitors'], date_range: 'day' }, 'sk_AAAAAAAAAAAAAAAAAAAAAAAA')).status, 401);
  });
});
