import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { type Browser, type BrowserContext, chromium, type Page, type Request } from 'playwright-core';
import { tickIndexes } from '../src/dashboard/ranges.ts';
import { type Clock, movableClock, seedTraffic } from './dashboard-seed.ts';
import { api, type CreatedProject, createProject, startTestService, type TestService } from './helpers.ts';

/**
 * The dashboard that asks questions, in a real browser (Debian's chromium via playwright-core) against a real service
 * seeded through the real ingest path: every filtered figure, goal and funnel step on the page is checked against
 * POST /query, /query/funnel and the goals API for the same view. Long because every test shares one seeded service
 * (seeding is the slow part), as dashboard.test.ts does.
 */

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
/** The seeded site's "now", as in dashboard.test.ts. */
const NOW = Date.parse('2026-11-20T16:30:00Z');
const DAY_MS = 86_400_000;
const WAIT_MS = 15_000;

let service: TestService;
let clock: Clock;
let browser: Browser;
let site: CreatedProject;

before(async () => {
  clock = movableClock(NOW - 60 * DAY_MS);
  service = await startTestService({ ANALYTICS_DURABILITY: 'commit' }, { now: () => clock.now() });
  site = await createProject(service.url, service.adminKey, { name: 'acme.example', tracked_props: ['plan'] });
  await seedTraffic(service.url, site.keys.secret, clock, NOW);
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
});

after(async () => {
  await browser?.close();
  await service?.destroy();
});

interface Opened {
  page: Page;
  context: BrowserContext;
  requests: Request[];
  problems: string[];
}

async function open(path = '/dashboard', key = site.keys.secret): Promise<Opened> {
  const context = await browser.newContext({ locale: 'en-US', viewport: { width: 1280, height: 800 }, acceptDownloads: true });
  const page = await context.newPage();
  await page.clock.setFixedTime(clock.now());
  const requests: Request[] = [];
  const problems: string[] = [];
  page.on('request', (r) => requests.push(r));
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  // The key goes in by the form, so a test's address never carries it.
  await page.goto(`${service.url}${path}`);
  await page.getByLabel('API key').fill(key);
  await page.keyboard.press('Enter');
  await shownFigures(page);
  return { page, context, requests, problems };
}

async function shownFigures(page: Page): Promise<void> {
  await page.locator('#loading', { hasText: 'Showing' }).waitFor({ timeout: WAIT_MS });
}

async function query(body: object, key = site.keys.secret): Promise<{ results: Array<{ dimensions: string[]; metrics: number[] }>; totals: number[] }> {
  const res = await api(service.url, '/query', { key, body });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

function day(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

const fmt = (page: Page, xs: number[]) => page.evaluate((v) => v.map((x) => new Intl.NumberFormat(navigator.language).format(x)), xs);

async function tile(page: Page, metric: string): Promise<string> {
  return page.locator(`.tile[data-metric=${metric}] .value`).innerText();
}

async function rows(page: Page, table: string): Promise<Array<[string, string]>> {
  return page.locator(`table[data-table="${table}"] tbody tr`).evaluateAll((trs) => trs.map((tr) => [(tr as HTMLElement).dataset['key']!, tr.querySelector('td')!.textContent!] as [string, string]));
}

/** A one-dimension answer as the table shows it: value and figure in the page's locale. */
async function expected(page: Page, q: { results: Array<{ dimensions: string[]; metrics: number[] }> }): Promise<Array<[string, string]>> {
  const text = await fmt(page, q.results.map((r) => r.metrics[0]!));
  return q.results.map((r, i) => [r.dimensions[0]!, text[i]!]);
}

/** The POST /query bodies the page sent since `from`. */
function asked(requests: Request[], from = 0): Array<Record<string, any>> {
  return requests.slice(from).filter((r) => r.method() === 'POST' && new URL(r.url()).pathname === '/query').map((r) => JSON.parse(r.postData() ?? '{}'));
}

test('a click on a page row shows the figures POST /query gives for that filter; reload, back and forward keep the view; the key is never in the address', async () => {
  const { page, context, requests, problems } = await open();
  const range = { from: day(NOW - 29 * DAY_MS), to: day(NOW) };
  const before = requests.length;
  await page.getByRole('button', { name: 'Filter by page: /pricing' }).first().click();
  await page.locator('.chip[data-dimension=page]').waitFor({ timeout: WAIT_MS });
  await shownFigures(page);
  const filters = [['is', 'page', ['/pricing']]];
  // (the revenue card's purchases add `is event purchase` after the view's filters)
  assert.ok(asked(requests, before).every((b) => JSON.stringify(b.filters.slice(0, filters.length)) === JSON.stringify(filters)), 'every question carries the filter');
  assert.equal(new URL(page.url()).searchParams.get('f.page'), '/pricing');

  const check = async () => {
    const t = await query({ ...range, metrics: ['visitors', 'visits', 'pageviews'], filters });
    assert.deepEqual([await tile(page, 'users'), await tile(page, 'sessions'), await tile(page, 'pageviews')], await fmt(page, t.totals));
    const pages = await query({ ...range, metrics: ['pageviews'], dimensions: ['page'], filters, limit: 200 });
    assert.deepEqual(await rows(page, 'pages'), await expected(page, pages));
    const sources = await query({ ...range, metrics: ['visits'], dimensions: ['source'], filters, limit: 200 });
    assert.deepEqual(await rows(page, 'trafficSources'), await expected(page, sources));
  };
  await check();

  // A second filter from another table, then a reload: the same view, asked again.
  await page.getByRole('button', { name: 'Filter by country: United States' }).click();
  await page.locator('.chip[data-dimension=country]').waitFor({ timeout: WAIT_MS });
  await shownFigures(page);
  await page.reload();
  await shownFigures(page);
  assert.equal(await page.locator('.chip').count(), 2, 'both filters survive a reload');
  const both = [['is', 'page', ['/pricing']], ['is', 'country', ['US']]];
  const t = await query({ ...range, metrics: ['visitors', 'visits', 'pageviews'], filters: both });
  assert.deepEqual([await tile(page, 'users'), await tile(page, 'sessions'), await tile(page, 'pageviews')], await fmt(page, t.totals));

  // Back: only the page filter again; Forward: both.
  await page.goBack();
  await page.locator('.chip').nth(1).waitFor({ state: 'detached', timeout: WAIT_MS });
  await shownFigures(page);
  await check();
  await page.goForward();
  await page.locator('.chip').nth(1).waitFor({ timeout: WAIT_MS });

  // Removing a chip by keyboard.
  await page.getByRole('button', { name: 'Remove filter country US' }).focus();
  await page.keyboard.press('Enter');
  await page.locator('.chip[data-dimension=country]').waitFor({ state: 'detached', timeout: WAIT_MS });
  for (const r of requests) assert.ok(!r.url().includes(site.keys.secret), `key in a URL: ${r.url()}`);
  assert.ok(!page.url().includes(site.keys.secret));
  assert.deepEqual(problems, []);
  await context.close();
});

test('the revenue card follows the filters: a filtered view shows what POST /query revenue:<CUR> answers', async () => {
  const { page, context, problems } = await open();
  const range = { from: day(NOW - 29 * DAY_MS), to: day(NOW) };
  const card = async (filters: unknown[]): Promise<Array<[string, string]>> => {
    const sums = await query({ ...range, metrics: ['revenue:USD', 'revenue:EUR'], filters });
    const purchases = await query({ ...range, metrics: ['events'], dimensions: ['prop:currency'], filters: [...filters, ['is', 'event', ['purchase']]] });
    const n = (c: string) => purchases.results.filter((r) => r.dimensions[0]!.toUpperCase() === c).reduce((a, r) => a + r.metrics[0]!, 0);
    const want = [['USD', sums.totals[0]!, n('USD')], ['EUR', sums.totals[1]!, n('EUR')]].filter(([, , k]) => (k as number) > 0).sort((a, b) => (b[1] as number) - (a[1] as number));
    return page.evaluate((w) => w.map(([c, total, k]) => [c as string, `${new Intl.NumberFormat(undefined, { style: 'currency', currency: c as string }).format(total as number)} · ${new Intl.NumberFormat().format(k as number)}`] as [string, string]), want);
  };
  const all = await card([]);
  assert.ok(all.length === 2, `the seed has purchases in two currencies: ${JSON.stringify(all)}`);
  assert.deepEqual(await rows(page, 'revenue'), all);
  await page.getByRole('button', { name: 'Filter by country: Germany' }).click();
  await page.locator('.chip[data-dimension=country]').waitFor({ timeout: WAIT_MS });
  await shownFigures(page);
  const filtered = await card([['is', 'country', ['DE']]]);
  assert.notDeepEqual(filtered, all, 'the filter changes the revenue');
  assert.deepEqual(await rows(page, 'revenue'), filtered);
  // visitors right now cannot follow a filter, and says so while one is active
  await page.locator('#live .value').waitFor({ timeout: WAIT_MS });
  assert.equal(await page.locator('#live .all-traffic').isVisible(), true);
  await page.getByRole('button', { name: 'Remove filter country DE' }).click();
  await page.locator('.chip[data-dimension=country]').waitFor({ state: 'detached', timeout: WAIT_MS });
  assert.equal(await page.locator('#live .all-traffic').isVisible(), false);
  assert.deepEqual(problems, []);
  await context.close();
});

test('a single day charts its 24 hours (time:hour) and the legend agrees with the tiles; 7 days label each day once; 12 months chart months', async () => {
  const { page, context, requests, problems } = await open('/dashboard?range=today');
  const hourly = asked(requests).find((b) => b.dimensions?.[0] === 'time:hour');
  assert.ok(hourly, 'a single-day range asks for time:hour');
  assert.equal(await page.locator('table[data-table=daily] tbody tr').count(), 24);
  assert.equal(await page.locator('#chart').getAttribute('data-unit'), 'hour');
  // The legend at rest shows the range's totals: the tiles' figures, not two weeks of them.
  assert.equal(await page.locator('.legend [data-series="0"] b').innerText(), await tile(page, 'pageviews'));
  assert.equal(await page.locator('.legend [data-series="1"] b').innerText(), await tile(page, 'users'));
  const h = await query({ date: day(NOW), metrics: ['pageviews'], dimensions: ['time:hour'], limit: 24 });
  assert.equal(h.results.length, 24);
  assert.deepEqual(await page.locator('table[data-table=daily] tbody td:nth-child(3)').allTextContents(), await fmt(page, h.results.map((r) => r.metrics[0]!)));

  await page.getByLabel('Date range').selectOption('7d');
  await page.locator('#chart[data-unit=day]').waitFor({ timeout: WAIT_MS });
  const ticks = JSON.parse((await page.locator('#chart').getAttribute('data-ticks')) ?? '[]') as string[];
  assert.equal(ticks.length, 7, `one label per day: ${ticks.join(', ')}`);
  assert.equal(new Set(ticks).size, ticks.length, `no day labelled twice: ${ticks.join(', ')}`);

  await page.getByLabel('Date range').selectOption('12mo');
  await page.locator('#chart[data-unit=month]').waitFor({ timeout: WAIT_MS });
  assert.ok(asked(requests).some((b) => b.dimensions?.[0] === 'time:month'));
  assert.equal(new URL(page.url()).searchParams.get('range'), '12mo');
  assert.deepEqual(problems, []);
  await context.close();
});

test('x-axis labels: at most one per bucket, evenly spaced, the last always shown', () => {
  assert.deepEqual(tickIndexes(7, 18), [0, 1, 2, 3, 4, 5, 6]);
  assert.deepEqual(tickIndexes(30, 10), [2, 5, 8, 11, 14, 17, 20, 23, 26, 29]);
  assert.deepEqual(tickIndexes(24, 6), [3, 7, 11, 15, 19, 23]);
  assert.deepEqual(tickIndexes(0, 5), []);
});

test('goals: a secret key adds and deletes them, the table equals POST /query, a read-only key sees them without the form', async () => {
  const { page, context, problems } = await open();
  await page.getByLabel('Goal name').fill('Signed up');
  await page.getByLabel('Goal is completed by').selectOption('event');
  await page.getByLabel('Event name or page path').fill('signup');
  await page.getByRole('button', { name: 'Add goal' }).click();
  await page.locator('table[data-table=goals] tr[data-key="Signed up"]').waitFor({ timeout: WAIT_MS });
  await page.getByLabel('Goal name').fill('Saw pricing');
  await page.getByLabel('Goal is completed by').selectOption('page');
  await page.getByLabel('Event name or page path').fill('/pricing*');
  await page.getByRole('button', { name: 'Add goal' }).click();
  await page.locator('table[data-table=goals] tr[data-key="Saw pricing"]').waitFor({ timeout: WAIT_MS });
  await shownFigures(page);
  const list = await api(service.url, `/projects/${site.project.id}/goals`, { key: site.keys.secret });
  assert.deepEqual(list.body.goals.map((g: { name: string }) => g.name).sort(), ['Saw pricing', 'Signed up']);
  const range = { from: day(NOW - 29 * DAY_MS), to: day(NOW) };
  const g = await query({ ...range, metrics: ['visitors', 'conversionRate'], dimensions: ['goal'] });
  const shown = await page.locator('table[data-table=goals] tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('th, td')].slice(0, 3).map((c) => c.textContent!.replace('Filter by goal: ', ''))));
  assert.deepEqual(shown, await Promise.all(g.results.map(async (r) => [r.dimensions[0]!, (await fmt(page, [r.metrics[0]!]))[0]!, `${r.metrics[1]!.toFixed(1)}%`])));

  // A goal row is a filter too.
  await page.getByRole('button', { name: 'Filter by goal: Signed up' }).click();
  await page.locator('.chip[data-dimension=goal]').waitFor({ timeout: WAIT_MS });
  await shownFigures(page);
  const t = await query({ ...range, metrics: ['visitors'], filters: [['is', 'goal', ['Signed up']]] });
  assert.equal(await tile(page, 'convertedVisitors'), (await fmt(page, t.totals))[0], 'a goal filter shows the goal\'s converted visitors');

  // Read-only: the same rows, no form, no delete buttons.
  const rk = (await api(service.url, `/projects/${site.project.id}/keys`, { key: site.keys.secret, body: { type: 'read' } })).body.key as string;
  const reader = await open('/dashboard', rk);
  await reader.page.locator('table[data-table=goals]').waitFor({ timeout: WAIT_MS });
  assert.equal(await reader.page.locator('table[data-table=goals] tbody tr').count(), 2);
  assert.equal(await reader.page.getByLabel('Goal name').count(), 0);
  assert.equal(await reader.page.getByRole('button', { name: /Delete goal/ }).count(), 0);
  await reader.context.close();

  // Delete one; it is gone from the API and the page.
  // one press asks, a second deletes: a goal is never gone at one click
  await page.getByRole('button', { name: 'Delete goal Saw pricing' }).click();
  await page.getByRole('button', { name: 'Confirm: delete goal Saw pricing' }).waitFor({ timeout: WAIT_MS });
  assert.equal(await page.locator('table[data-table=goals] tr[data-key="Saw pricing"]').count(), 1, 'still there after one press');
  await page.getByRole('button', { name: 'Confirm: delete goal Saw pricing' }).click();
  await page.locator('table[data-table=goals] tr[data-key="Saw pricing"]').waitFor({ state: 'detached', timeout: WAIT_MS });
  const after = await api(service.url, `/projects/${site.project.id}/goals`, { key: site.keys.secret });
  assert.deepEqual(after.body.goals.map((x: { name: string }) => x.name), ['Signed up']);
  assert.deepEqual(problems, []);
  await context.close();
});

test('a funnel of chosen steps draws exactly what POST /query/funnel answers, and its steps live in the address', async () => {
  const { page, context, problems } = await open();
  const steps = page.locator('#funnel select');
  await steps.nth(0).selectOption('page:/');
  await steps.nth(1).selectOption('page:/pricing');
  await page.getByRole('button', { name: 'Add step' }).click();
  await steps.nth(2).selectOption('page:/signup');
  await page.getByRole('button', { name: 'Show funnel' }).click();
  await page.locator('table[data-table=funnel] tbody tr').nth(2).waitFor({ timeout: WAIT_MS });
  const range = { from: day(NOW - 29 * DAY_MS), to: day(NOW) };
  const res = await api(service.url, '/query/funnel', { key: site.keys.secret, body: { ...range, steps: [{ page: '/' }, { page: '/pricing' }, { page: '/signup' }] } });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const expected = await Promise.all(
    (res.body.steps as Array<{ label: string; visits: number; conversionRate: number; dropoff: number }>).map(async (s, i) => [
      `${i + 1}. ${s.label}`, (await fmt(page, [s.visits]))[0]!, `${s.conversionRate.toFixed(1)}%`, i === 0 ? '—' : `−${(await fmt(page, [s.dropoff]))[0]}`,
    ]),
  );
  const drawn = await page.locator('table[data-table=funnel] tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('th, td')].map((c) => c.textContent!)));
  assert.deepEqual(drawn, expected);
  assert.deepEqual(new URL(page.url()).searchParams.getAll('step'), ['page:/', 'page:/pricing', 'page:/signup']);
  await page.reload();
  await page.locator('table[data-table=funnel] tbody tr').nth(2).waitFor({ timeout: WAIT_MS });
  assert.deepEqual(await page.locator('table[data-table=funnel] tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('th, td')].map((c) => c.textContent!))), expected);
  assert.deepEqual(problems, []);
  await context.close();
});

test('Download CSV holds the view\'s figures; every control is named in the accessibility tree and a row filters by keyboard', async () => {
  const { page, context, problems } = await open('/dashboard?range=7d&f.device=mobile');
  const download = page.waitForEvent('download');
  await page.getByRole('button', { name: 'Download CSV' }).click();
  const file = await download;
  const csv = readFileSync((await file.path())!, 'utf8');
  const range = { from: day(NOW - 6 * DAY_MS), to: day(NOW) };
  const pages = await query({ ...range, metrics: ['pageviews'], dimensions: ['page'], filters: [['is', 'device', ['mobile']]], limit: 200 });
  for (const r of pages.results) assert.ok(csv.includes(`\r\npages,${r.dimensions[0]},pageviews,${r.metrics[0]}\r\n`), `CSV row for ${r.dimensions[0]}`);
  assert.match(csv, /^section,name,measure,value\r\n/);
  assert.match(csv, /filters,device is mobile/);
  assert.match(csv, /\r\nrevenue,(USD|EUR),total,[\d.]+\r\nrevenue,\1,purchases,\d+\r\n/, 'the revenue card is in the CSV');

  // Every button, link, box and tab in the tree has a name (an unnamed one shows without quotes).
  const tree = await page.locator('body').ariaSnapshot();
  const unnamed = tree.split('\n').filter((l) => /^\s*- (button|link|combobox|textbox|tab|checkbox)\s*(\[|:|$)/.test(l));
  assert.deepEqual(unnamed, [], 'unnamed controls');
  assert.match(tree, /button "Filter by page: \/pricing"/);
  assert.match(tree, /button "Remove filter device mobile"/);

  // Keyboard only: Tab reaches a row's button, Enter adds its filter.
  await page.getByRole('button', { name: 'Filter by country: Germany' }).focus();
  await page.keyboard.press('Shift+Tab');
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Filter by country: Germany DE');
  await page.keyboard.press('Enter');
  await page.locator('.chip[data-dimension=country]').waitFor({ timeout: WAIT_MS });
  assert.deepEqual(problems, []);
  await context.close();
});

test('bugs: a custom event without a url shows no page; one property shows its key; a project over its allowance says so', async () => {
  const small = await createProject(service.url, service.adminKey, { name: 'small', monthly_quota: 5, tracked_props: ['plan'] });
  const sent = await api(service.url, '/analytics', {
    key: small.keys.secret,
    body: [
      { event: 'page_view', url: 'https://small.example/', sessionId: 's1' },
      { event: 'signup', sessionId: 's1', eventParams: { plan: 'pro' } },
      { event: 'signup', sessionId: 's2', eventParams: { plan: 'starter' } },
      { event: 'page_view', url: 'https://small.example/a', sessionId: 's2' },
      { event: 'page_view', url: 'https://small.example/b', sessionId: 's2' },
    ],
  });
  assert.equal(sent.status, 200);
  const refused = await api(service.url, '/analytics', { key: small.keys.secret, body: { event: 'page_view', url: '/', sessionId: 's3' } });
  assert.equal(refused.status, 429);
  const { page, context, problems } = await open('/dashboard?range=today', small.keys.secret);
  const signups = page.locator('table[data-table=recentEvents] tbody tr', { hasText: 'signup' });
  assert.equal(await signups.count(), 2);
  assert.deepEqual(await signups.locator('td.path').allInnerTexts(), ['—', '—']);
  const props = page.locator('[data-card=Properties]');
  assert.equal(await props.locator('[data-tab-name]').innerText(), 'plan');
  // the three page views carry no plan: a (none) row, as Plausible shows, in its place by count and not a filter
  assert.deepEqual(await rows(page, 'props.plan'), [['(none)', '3'], ['pro', '1'], ['starter', '1']]);
  assert.equal(await page.getByRole('button', { name: 'Filter by property plan: (none)' }).count(), 0);
  assert.equal(await page.getByRole('button', { name: /Filter by .*: pro/ }).count(), 1);
  await page.locator('#quota', { hasText: 'over its monthly allowance' }).waitFor({ timeout: WAIT_MS });
  assert.match(await page.locator('#quota').innerText(), /5 of 5 events/);
  assert.deepEqual(problems, []);
  await context.close();
});

test('a goal filter turns the tiles into the goal\'s figures: converted visitors, conversions, conversion rate, revenue', async () => {
  const made = await api(service.url, `/projects/${site.project.id}/goals`, { key: site.keys.secret, body: { name: 'Purchased', event: 'purchase' } });
  assert.equal(made.status, 200, JSON.stringify(made.body));
  try {
    const { page, context, problems } = await open('/dashboard?f.goal=Purchased');
    await page.locator('.tile[data-metric=conversions]').waitFor({ timeout: WAIT_MS });
    const range = { from: day(NOW - 29 * DAY_MS), to: day(NOW) };
    const filters = [['is', 'goal', ['Purchased']]];
    const g = await query({ ...range, metrics: ['visitors', 'events', 'conversionRate', 'revenue:USD', 'revenue:EUR'], filters });
    assert.ok(g.totals[1]! > 0, 'the seed has purchases');
    const [visitors, conversions] = await fmt(page, [g.totals[0]!, g.totals[1]!]);
    assert.equal(await tile(page, 'convertedVisitors'), visitors);
    assert.equal(await tile(page, 'conversions'), conversions);
    assert.equal(await tile(page, 'conversionRate'), `${g.totals[2]!.toFixed(1)}%`);
    const money = await page.evaluate((t) => [new Intl.NumberFormat(undefined, { style: 'currency', currency: 'USD' }).format(t[0]!), new Intl.NumberFormat(undefined, { style: 'currency', currency: 'EUR' }).format(t[1]!)], [g.totals[3]!, g.totals[4]!]);
    assert.equal(await tile(page, 'revenue-USD'), money[0]);
    assert.equal(await tile(page, 'revenue-EUR'), money[1]);
    assert.equal(await page.locator('.tile[data-metric=pageviews]').count(), 0, 'no page views tile under a goal filter');
    assert.match(await page.locator('#chart-h').innerText(), /^Conversions and visitors per day/);
    assert.equal(await page.locator('.legend [data-series="0"] b').innerText(), conversions);
    assert.deepEqual(problems, []);
    await context.close();
  } finally {
    await api(service.url, `/projects/${site.project.id}/goals/${made.body.goal.id}`, { method: 'DELETE', key: site.keys.secret });
  }
});

test('"All time" starts at the project\'s first day of an imported two-year history, charts months, and every tile equals POST /query', async () => {
  const old = await createProject(service.url, service.adminKey, { name: 'two-years.example' });
  const first = NOW - 730 * DAY_MS + 3 * 3_600_000;
  const history = Array.from({ length: 146 }, (_, i) => ({
    event: 'page_view', url: `https://two-years.example/p${i % 4}`, sessionId: `h${Math.floor(i / 2)}`, timestamp: first + i * 5 * DAY_MS + (i % 2) * 60_000,
  }));
  const imported = await api(service.url, `/projects/${old.project.id}/history`, { key: old.keys.secret, body: history });
  assert.equal(imported.status, 200, JSON.stringify(imported.body));
  const { page, context, problems } = await open('/dashboard?range=all', old.keys.secret);
  await page.locator('#chart[data-unit=month]').waitFor({ timeout: WAIT_MS });
  const range = { from: day(first), to: day(NOW) };
  assert.match(await page.locator('#loading').innerText(), /Showing/);
  assert.equal(await page.getByLabel('Date range').inputValue(), 'all');
  const t = await query({ ...range, metrics: ['visitors', 'visits', 'pageviews'] }, old.keys.secret);
  assert.equal(t.totals[2], 146);
  assert.deepEqual([await tile(page, 'users'), await tile(page, 'sessions'), await tile(page, 'pageviews')], await fmt(page, t.totals));
  const months = await query({ ...range, metrics: ['pageviews'], dimensions: ['time:month'], limit: 100 }, old.keys.secret);
  assert.equal(await page.locator('table[data-table=daily] tbody tr').count(), months.results.length, 'one row a month, from the first');
  assert.equal(months.results[0]!.dimensions[0], range.from.slice(0, 7));
  const pages = await query({ ...range, metrics: ['pageviews'], dimensions: ['page'], limit: 200 }, old.keys.secret);
  assert.deepEqual(await rows(page, 'pages'), await expected(page, pages));
  assert.equal(await page.locator('.change').count(), 0, 'all time compares with nothing');
  assert.deepEqual(problems, []);
  await context.close();
});

test('Today before noon compares with yesterday until the same time, says so, and draws no hour after now', async () => {
  // 16:30 UTC is 11:30 in New York: a morning there
  const ny = await createProject(service.url, service.adminKey, { name: 'morning.example', timezone: 'America/New_York' });
  const today = new Intl.DateTimeFormat('en-CA', { timeZone: 'America/New_York' }).format(NOW);
  const local = (dayOffset: number, h: number) => Date.parse(`${today}T${String(h).padStart(2, '0')}:10:00-05:00`) + dayOffset * DAY_MS;
  // yesterday: a visit every hour of the day; today: one each hour until 11
  const events = [...Array.from({ length: 24 }, (_, h) => local(-1, h)), ...Array.from({ length: 12 }, (_, h) => local(0, h))].map((t, i) => ({ event: 'page_view', url: 'https://morning.example/', sessionId: `m${i}`, timestamp: t }));
  const imported = await api(service.url, `/projects/${ny.project.id}/history`, { key: ny.keys.secret, body: events });
  assert.equal(imported.status, 200, JSON.stringify(imported.body));
  const { page, context, problems } = await open('/dashboard?range=today', ny.keys.secret);
  await page.locator('#chart[data-unit=hour]').waitFor({ timeout: WAIT_MS });
  assert.match(await page.locator('#context').innerText(), /until 11:30 \(the same part of a period still running\)/);
  const yesterday = new Intl.DateTimeFormat('en-CA', { timeZone: 'America/New_York' }).format(NOW - DAY_MS);
  const same = await query({ date: yesterday, until: '11:30', metrics: ['visitors', 'visits', 'pageviews'] }, ny.keys.secret);
  assert.deepEqual(same.totals, [12, 12, 12], 'yesterday until 11:30: twelve of its 24 visits');
  const previous = await page.locator('.tile[data-metric=pageviews] .change').getAttribute('title');
  assert.equal(previous, `Previous period: ${(await fmt(page, [same.totals[2]!]))[0]}`);
  assert.match(await page.locator('.tile[data-metric=pageviews] .change').innerText(), /^● 0%/, 'twelve against twelve, not against 24');
  assert.equal(await page.locator('#chart').getAttribute('data-drawn'), '12', 'hours 00–11 drawn, none after now');
  assert.deepEqual(problems, []);
  await context.close();
});
