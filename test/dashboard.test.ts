// long because each test drives the real dashboard in Chromium through one flow a person follows (sign in, range,
// project switch, share link, realtime, errors), and they share the browser and page helpers at the top.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { type Browser, type BrowserContext, chromium, type Page, type Request } from 'playwright-core';
import type { MetricsResponse } from '../src/core/types.ts';
import { type Clock, movableClock, seedTraffic } from './dashboard-seed.ts';
import { api, type CreatedProject, createProject, startTestService, type TestService } from './helpers.ts';
import { type Proxy, startProxy } from './forwarding-proxy.ts';

/**
 * The dashboard in a real browser (Debian's chromium via playwright-core), against a real service seeded through
 * the real ingest path. Every figure on the page is checked against GET /metrics for the same range. Long because
 * every test shares one seeded service (seeding is the slow part), and the screenshots are taken here too.
 */

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
/** The seeded site's "now": a Friday afternoon, fixed so the screenshots only change when the dashboard does. */
const NOW = Date.parse('2026-11-20T16:30:00Z');
const DAY_MS = 86_400_000;
/** Generous for a loaded machine; waits return as soon as the page is there. */
const WAIT_MS = 15_000;
const DOCS = new URL('../docs/', import.meta.url);

let service: TestService;
let clock: Clock;
let browser: Browser;
let site: CreatedProject;
let other: CreatedProject;

before(async () => {
  clock = movableClock(NOW - 60 * DAY_MS);
  service = await startTestService({ ANALYTICS_DURABILITY: 'commit' }, { now: () => clock.now() });
  site = await createProject(service.url, service.adminKey, { name: 'acme.example', tracked_props: ['plan', 'file'] });
  other = await createProject(service.url, service.adminKey, { name: 'docs.acme.example', timezone: 'Europe/Berlin' });
  await seedTraffic(service.url, site.keys.secret, clock, NOW);
  await api(service.url, '/analytics', { key: other.keys.secret, body: [{ event: 'page_view', url: 'https://docs.acme.example/start', sessionId: 'o1' }] });
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

/** Every tab's requests, for assertShows to find the question a running period's comparison was asked with. */
const requestsOf = new WeakMap<Page, Request[]>();

/**
 * A range ending today is still running: the page compares it with the previous period until the same time of day,
 * asked of POST /query with `until` (GET /metrics compares whole days). That question, checked (the previous period,
 * until now in the project's zone) and asked again: what the tiles must show as the previous figures.
 */
async function runningCompare(page: Page, m: MetricsResponse): Promise<{ users: number; sessions: number; pageviews: number; bounceRate: string } | undefined> {
  const asked = (requestsOf.get(page) ?? [])
    .filter((r) => r.method() === 'POST' && new URL(r.url()).pathname === '/query')
    .map((r) => ({ body: JSON.parse(r.postData() ?? '{}') as Record<string, any>, key: r.headers()['authorization']!.slice('Bearer '.length) }))
    .filter((x) => x.body.until !== undefined && x.body.metrics?.includes('bounceRate') && x.body.to < m.from)
    .at(-1);
  if (!asked) return undefined;
  const n = Math.round((Date.parse(m.to) - Date.parse(m.from)) / DAY_MS) + 1;
  assert.deepEqual([asked.body.from, asked.body.to], [day(Date.parse(m.from) - n * DAY_MS), day(Date.parse(m.from) - DAY_MS)], 'the previous period');
  const now = new Intl.DateTimeFormat('en-GB', { timeZone: m.timezone, hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).format(clock.now());
  assert.equal(asked.body.until, now, 'until the time of day now');
  const r = await api(service.url, '/query', { key: asked.key, body: asked.body });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const t = r.body.totals as number[];
  const at = (name: string) => t[(asked.body.metrics as string[]).indexOf(name)]!;
  return { users: at('visitors'), sessions: at('visits'), pageviews: at('pageviews'), bounceRate: `${at('bounceRate').toFixed(1)}%` };
}

/** A fresh tab (its own sessionStorage) whose clock agrees with the service's, recording every request. */
async function open(origin = service.url, options: { locale?: string; width?: number; height?: number; dark?: boolean; path?: string } = {}): Promise<Opened> {
  const context = await browser.newContext({
    locale: options.locale ?? 'en-US',
    viewport: { width: options.width ?? 1280, height: options.height ?? 800 },
    colorScheme: options.dark ? 'dark' : 'light',
  });
  const page = await context.newPage();
  await page.clock.setFixedTime(clock.now());
  const requests: Request[] = [];
  requestsOf.set(page, requests);
  const problems: string[] = [];
  page.on('request', (r) => requests.push(r));
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/status of 4\d\d|status of 5\d\d/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  await page.goto(`${origin}${options.path ?? '/dashboard'}`);
  return { page, context, requests, problems };
}

async function signIn(page: Page, key: string): Promise<void> {
  await page.getByLabel('API key').fill(key);
  await page.keyboard.press('Enter');
}

async function metrics(key: string, query: string): Promise<MetricsResponse & Record<string, any>> {
  const res = await api(service.url, `/metrics?${query}`, { key });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

/** The /metrics answer the page asked for last (so its range is the one on screen). */
async function lastMetrics(requests: Request[]): Promise<URL> {
  const found = requests.filter((r) => new URL(r.url()).pathname === '/metrics' && new URL(r.url()).searchParams.has('from')).at(-1);
  assert.ok(found, 'the page asked for metrics');
  return new URL(found.url());
}

function day(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/** Tiles (value and, with a comparison, the change's arrow and previous figure) and tables on the page, as text. */
async function shown(page: Page): Promise<{ tiles: Record<string, string>; changes: Record<string, [string, string]>; tables: Record<string, Array<[string, string]>> }> {
  return page.evaluate(() => {
    const tiles: Record<string, string> = {};
    const changes: Record<string, [string, string]> = {};
    document.querySelectorAll<HTMLElement>('.tile[data-metric]').forEach((t) => {
      tiles[t.dataset['metric']!] = t.querySelector('.value')!.textContent!;
      const change = t.querySelector<HTMLElement>('.change');
      if (change) changes[t.dataset['metric']!] = [change.textContent!.charAt(0), change.title.split(': ')[1]!];
    });
    const tables: Record<string, Array<[string, string]>> = {};
    document.querySelectorAll<HTMLElement>('table.bars[data-table]').forEach((t) => {
      tables[t.dataset['table']!] = [...t.querySelectorAll<HTMLElement>('tbody tr')].map((r) => [r.dataset['key']!, r.querySelector('td')!.textContent!]);
    });
    return { tiles, changes, tables };
  });
}

async function figuresOnScreen(page: Page): Promise<void> {
  await page.locator('.tile[data-metric=users] .value').waitFor({ timeout: WAIT_MS });
}

/** The page's tiles and tables are exactly `m`, numbers formatted in the page's locale (one round trip). */
async function assertShows(page: Page, m: MetricsResponse & Record<string, any>): Promise<void> {
  const { tiles, changes, tables } = await shown(page);
  const fields = ['pages', 'trafficSources', 'countries', 'devices', 'events', 'entryPages', 'browsers', 'operatingSystems', 'utmMediums', 'utmCampaigns'].filter((f) => m[f] !== undefined);
  // The events card leaves out page_view (the tiles and the chart show page views).
  const rows = (f: string): Array<[string, number]> => Object.entries(m[f] as Record<string, number>).filter(([k]) => f !== 'events' || k !== 'page_view');
  const c = (m['compare'] as { users: number; sessions: number; pageviews: number; bounceRate: string } | undefined) ?? (m.to === day(clock.now()) ? await runningCompare(page, m) : undefined);
  const numbers = [m.users, m.sessions, m.pageviews, c?.users ?? 0, c?.sessions ?? 0, c?.pageviews ?? 0, ...fields.flatMap((f) => rows(f).map(([, n]) => n))];
  const text = await page.evaluate((xs) => xs.map((x) => new Intl.NumberFormat(navigator.language).format(x)), numbers);
  // The four figures GET /metrics has; views per visit and visit duration come from POST /query.
  const four = { users: tiles['users'], sessions: tiles['sessions'], pageviews: tiles['pageviews'], bounceRate: tiles['bounceRate'] };
  assert.deepEqual(four, { users: text[0], sessions: text[1], pageviews: text[2], bounceRate: m.bounceRate });
  if (c) {
    // The change against the previous period: its direction, and the previous figure itself.
    const arrow = (now: number, before: number) => (now > before ? '▲' : now < before ? '▼' : '●');
    const rate = (r: string) => parseFloat(r);
    const { viewsPerVisit: _v, visitDuration: _d, ...changed } = changes;
    assert.deepEqual(changed, {
      users: [arrow(m.users, c.users), text[3]],
      sessions: [arrow(m.sessions, c.sessions), text[4]],
      pageviews: [arrow(m.pageviews, c.pageviews), text[5]],
      bounceRate: [arrow(rate(m.bounceRate), rate(c.bounceRate)), c.bounceRate],
    });
  } else assert.deepEqual(changes, {});
  let i = 6;
  for (const field of fields) {
    const expected = rows(field).map(([k]) => [k, text[i++]]);
    assert.deepEqual(tables[field] ?? [], expected, `table ${field}`);
  }
  // Tracked properties, one tab per key; revenue, one row per currency.
  const props = (m['props'] ?? {}) as Record<string, Record<string, number>>;
  for (const [key, values] of Object.entries(props)) {
    const formatted = await page.evaluate((xs) => xs.map((x) => new Intl.NumberFormat(navigator.language).format(x)), Object.values(values));
    // (the page adds a (none) row for events without the key: dashboard-questions checks it against POST /query)
    assert.deepEqual((tables[`props.${key}`] ?? []).filter(([v]) => v !== '(none)'), Object.keys(values).map((v, j) => [v, formatted[j]]), `property ${key}`);
  }
  const revenue = (m['revenue'] ?? {}) as Record<string, { total: number; purchases: number }>;
  assert.deepEqual((tables['revenue'] ?? []).map(([c]) => c).sort(), Object.keys(revenue).sort());
}

// First, while the data is exactly the seed: later tests add events.
test('screenshots at 1280×800 and 390×844 are written to docs/, and nothing overflows a phone screen', async () => {
  mkdirSync(DOCS, { recursive: true });
  for (const goal of [{ name: 'Signed up', event: 'signup' }, { name: 'Read the docs', page: '/docs/*' }]) {
    const res = await api(service.url, `/projects/${site.project.id}/goals`, { key: site.keys.secret, body: goal });
    assert.equal(res.status, 200, JSON.stringify(res.body));
  }
  const shots = [
    ['dashboard.png', 1280, 800, false, '/dashboard'],
    ['dashboard-mobile.png', 390, 844, false, '/dashboard'],
    ['dashboard-dark.png', 1280, 800, true, '/dashboard'],
    ['dashboard-filtered.png', 1280, 800, false, '/dashboard?f.source=Google&f.device=mobile'],
    ['dashboard-funnel.png', 1280, 800, false, '/dashboard?step=page%3A%2F&step=page%3A%2Fpricing&step=page%3A%2Fsignup'],
  ] as const;
  for (const [name, width, height, dark, path] of shots) {
    const { page, context, problems } = await open(service.url, { width, height, dark, path });
    await signIn(page, site.keys.secret);
    await figuresOnScreen(page);
    await page.locator('#chart canvas').waitFor({ timeout: WAIT_MS });
    await page.locator('#live .value').waitFor({ timeout: WAIT_MS });
    if (path.includes('step=')) {
      await page.locator('table[data-table=funnel]').waitFor({ timeout: WAIT_MS });
      await page.locator('#funnel').evaluate((el) => el.scrollIntoView({ block: 'center' }));
    }
    await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur());
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.equal(overflow, 0, `${name}: no horizontal scrolling`);
    // what is wider than the screen scrolls in its own region, with a shadow cue and a keyboard stop: never cut silently
    const wide = await page.evaluate(() =>
      [...document.querySelectorAll<HTMLElement>('main *')]
        .filter((el) => el.scrollWidth > el.clientWidth + 1 && ['auto', 'scroll'].includes(getComputedStyle(el).overflowX) && !el.closest('.sr-only'))
        .map((el) => ({ what: el.getAttribute('aria-label') ?? el.getAttribute('aria-labelledby') ?? el.className, cue: getComputedStyle(el).backgroundImage.includes('radial-gradient'), focusable: el.tabIndex === 0 })),
    );
    for (const w of wide) assert.deepEqual(w, { ...w, cue: true, focusable: true }, `${name}: ${w.what} scrolls with a cue`);
    if (width < 500) assert.ok(wide.length > 0, 'on a phone the recent events scroll (the check above ran)');
    await page.screenshot({ path: new URL(name, DOCS).pathname });
    if (process.env['FULLPAGE']) await page.screenshot({ path: `/tmp/full-${name}`, fullPage: true });
    if (process.env['FULLPAGE'] && width < 500) {
      await page.locator('table.recent').scrollIntoViewIfNeeded();
      await page.screenshot({ path: `/tmp/recent-${name}` });
    }
    assert.deepEqual(problems, []);
    await context.close();
  }
});

test('signing in with a secret key shows the last 30 days exactly as GET /metrics answers them, in the browser locale', async () => {
  const { page, context, requests, problems } = await open(service.url, { locale: 'de-DE' });
  await signIn(page, site.keys.secret);
  await figuresOnScreen(page);
  const asked = await lastMetrics(requests);
  const today = day(NOW);
  assert.equal(asked.searchParams.get('from'), day(NOW - 29 * DAY_MS));
  assert.equal(asked.searchParams.get('to'), today);
  const m = await metrics(site.keys.secret, asked.searchParams.toString());
  assert.ok(m.pageviews > 1000, 'a busy site: the seed worked');
  await assertShows(page, m);
  // Locale grouping: a German reader sees 1.234, not 1,234.
  assert.match(await page.locator('.tile[data-metric=pageviews] .value').innerText(), /^\d{1,3}(\.\d{3})+$/);
  // Countries by name in the reader's language, with the code beside.
  assert.match(await page.locator('table[data-table=countries] tr[data-key=DE] th').innerText(), /Deutschland/);
  assert.match(await page.locator('#context').innerText(), /UTC/);
  assert.equal(await page.locator('#title').innerText(), 'acme.example');
  // For screen readers: every control has a name, ids are unique, the chart has a text alternative.
  const unnamed = await page.evaluate(() =>
    [...document.querySelectorAll<HTMLElement>('button, select, input, [role=tab], [tabindex="0"]')]
      .filter((el) => !el.closest('[hidden]'))
      .filter((el) => !(el.getAttribute('aria-label') || (el as HTMLInputElement).labels?.[0]?.textContent?.trim() || el.getAttribute('aria-labelledby') || el.textContent?.trim()))
      .map((el) => el.outerHTML.slice(0, 80)),
  );
  assert.deepEqual(unnamed, []);
  const ids = await page.evaluate(() => [...document.querySelectorAll('[id]')].map((el) => el.id));
  assert.equal(new Set(ids).size, ids.length, 'ids are unique');
  assert.match((await page.locator('#chart').getAttribute('aria-label')) ?? '', /page views in all/);
  assert.equal(await page.locator('#chart').getAttribute('role'), 'img');
  assert.deepEqual(problems, []);
  await context.close();
});

test('an admin key picks the project from a list; switching project refetches and shows its timezone', async () => {
  const { page, context, requests, problems } = await open();
  await signIn(page, service.adminKey);
  await figuresOnScreen(page);
  const picker = page.getByLabel('Project');
  assert.deepEqual(await picker.locator('option').allInnerTexts(), ['acme.example', 'docs.acme.example'], 'projects by name (an id only where two share a name)');
  let asked = await lastMetrics(requests);
  assert.equal(asked.searchParams.get('projectId'), site.project.id);
  await assertShows(page, await metrics(service.adminKey, asked.searchParams.toString()));

  await picker.selectOption(other.project.id);
  await page.locator('#context', { hasText: 'Europe/Berlin' }).waitFor({ timeout: WAIT_MS });
  await page.locator('table[data-table=pages] tr[data-key="/start"]').waitFor({ timeout: WAIT_MS });
  asked = await lastMetrics(requests);
  assert.equal(asked.searchParams.get('projectId'), other.project.id);
  assert.equal(await page.locator('#title').innerText(), 'docs.acme.example');
  await assertShows(page, await metrics(service.adminKey, asked.searchParams.toString()));
  assert.deepEqual(problems, []);
  await context.close();
});

test('changing the range (by keyboard) refetches, and a custom range shows exactly those days', async () => {
  const { page, context, requests, problems } = await open();
  await signIn(page, site.keys.secret);
  await figuresOnScreen(page);
  const before = requests.length;
  // Keyboard only: focus the range picker and choose "Last 7 days".
  await page.getByLabel('Date range').focus();
  await page.getByLabel('Date range').selectOption('7d');
  await page.locator('#context', { hasText: /Nov 14/ }).waitFor({ timeout: WAIT_MS });
  assert.ok(requests.length > before, 'a new request');
  let asked = await lastMetrics(requests);
  assert.deepEqual([asked.searchParams.get('from'), asked.searchParams.get('to')], [day(NOW - 6 * DAY_MS), day(NOW)]);
  await assertShows(page, await metrics(site.keys.secret, asked.searchParams.toString()));

  await page.getByLabel('Date range').selectOption('custom');
  await page.getByLabel('From', { exact: true }).fill('2026-11-01');
  await page.getByLabel('To', { exact: true }).fill('2026-11-05');
  await page.getByLabel('To', { exact: true }).press('Enter');
  // The context line starts with the range shown ("Nov 1 – 5, 2026"); /Nov 1/ alone would match the 7 days' "Nov 14".
  await page.locator('#context', { hasText: /^Nov 1\D/ }).waitFor({ timeout: WAIT_MS });
  asked = await lastMetrics(requests);
  assert.deepEqual([asked.searchParams.get('from'), asked.searchParams.get('to')], ['2026-11-01', '2026-11-05']);
  const m = await metrics(site.keys.secret, asked.searchParams.toString());
  await assertShows(page, m);
  assert.equal(await page.locator('table[data-table=daily] tbody tr').count(), 5, 'one row per day');

  // A year earlier, then no comparison at all.
  {
    assert.equal(asked.searchParams.get('compare'), 'previous', 'the default comparison');
    for (const mode of ['year', 'off']) {
      const count = requests.length;
      await page.getByLabel('Compare with').selectOption(mode);
      await waitFor(() => requests.slice(count).some((r) => r.url().includes('from=2026-11-01')), `the request without compare=${mode}`);
      await page.locator('#loading', { hasText: 'Showing' }).waitFor({ timeout: WAIT_MS });
      asked = await lastMetrics(requests);
      assert.equal(asked.searchParams.get('compare'), mode === 'off' ? null : mode);
      await assertShows(page, await metrics(site.keys.secret, asked.searchParams.toString()));
    }
    assert.match(await page.locator('#context').innerText(), /^[^·]+ · times in UTC$/, 'no comparison named');
    await page.getByLabel('Compare with').selectOption('previous');
  }

  // Every preset asks for the range it names, in the project's days.
  const presets: Record<string, [string, string]> = {
    today: [day(NOW), day(NOW)],
    yesterday: [day(NOW - DAY_MS), day(NOW - DAY_MS)],
    month: ['2026-11-01', day(NOW)],
    lastmonth: ['2026-10-01', '2026-10-31'],
    '12mo': [day(NOW - 364 * DAY_MS), day(NOW)],
  };
  for (const [preset, [from, to]] of Object.entries(presets)) {
    const count = requests.length;
    await page.getByLabel('Date range').selectOption(preset);
    await waitFor(() => requests.slice(count).some((r) => r.url().includes(`from=${from}&to=${to}`)), `the ${preset} request`);
  }
  await figuresOnScreen(page);
  assert.deepEqual(problems, []);
  await context.close();
});

test('a share link signs in from the fragment and removes it; the key is never in a URL, a cookie or localStorage', async () => {
  const key = await readKey();
  const { page, context, requests, problems } = await open(service.url, { path: `/dashboard#key=${key}` });
  await figuresOnScreen(page);
  assert.equal(new URL(page.url()).hash, '', 'the fragment is gone from the address bar');
  assert.equal(await page.evaluate(() => location.hash), '');
  await page.reload(); // the tab stays signed in (sessionStorage), and history holds no key either
  await figuresOnScreen(page);
  assert.equal(await page.evaluate(() => history.length), 2, 'the share URL was replaced, not pushed');

  assert.ok(requests.length > 3);
  for (const r of requests) assert.ok(!r.url().includes(key), `key in a requested URL: ${r.url()}`);
  const reads = requests.filter((r) => /\/metrics|\/projects/.test(new URL(r.url()).pathname));
  assert.ok(reads.length > 0);
  for (const r of reads) assert.equal((await r.allHeaders())['authorization'], `Bearer ${key}`);
  for (const r of requests) assert.equal((await r.allHeaders())['cookie'], undefined);
  assert.deepEqual(await context.cookies(), []);
  assert.equal(await page.evaluate(() => localStorage.length), 0);
  assert.equal(await page.evaluate(() => document.cookie), '');
  assert.equal(await page.evaluate(() => Object.values(sessionStorage).filter((v) => v.includes('_')).length >= 1), true);

  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('API key').waitFor();
  assert.equal(await page.evaluate((k) => Object.values(sessionStorage).includes(k), key), false, 'signing out forgets the key');
  // A share link pasted into a tab that already has the dashboard open (only the fragment changes).
  await page.evaluate((k) => (location.hash = `key=${k}`), key);
  await figuresOnScreen(page);
  assert.equal(await page.evaluate(() => location.hash), '');
  assert.deepEqual(problems, []);
  await context.close();
});

test('a project with allowed origins and referrers signs in on its own dashboard with sk_, rk_ and a #key= link; other sites stay refused', async () => {
  const locked = await createProject(service.url, service.adminKey, { name: 'locked.example', allowed_origins: ['https://locked.example'], allowed_referrers: ['locked.example'] });
  assert.equal((await api(service.url, '/analytics', { key: locked.keys.secret, body: { event: 'page_view', url: 'https://locked.example/', sessionId: 'l1' } })).status, 200);
  const rkRes = await api(service.url, `/projects/${locked.project.id}/keys`, { key: locked.keys.secret, body: { type: 'read' } });
  assert.equal(rkRes.status, 200, JSON.stringify(rkRes.body));
  const rk = rkRes.body.key as string;
  for (const how of ['sk_ typed', 'rk_ typed', '#key=rk_ link'] as const) {
    const { page, context, requests, problems } = await open(service.url, how === '#key=rk_ link' ? { path: `/dashboard#key=${rk}` } : {});
    if (how !== '#key=rk_ link') await signIn(page, how === 'sk_ typed' ? locked.keys.secret : rk);
    await figuresOnScreen(page);
    assert.equal(await page.locator('.tile[data-metric=pageviews] .value').innerText(), '1', how);
    const refused = [];
    for (const r of requests) if ((await r.response())?.status() === 403) refused.push(r.url());
    assert.deepEqual(refused, [], `${how}: nothing refused`);
    assert.deepEqual(problems, [], how);
    await context.close();
  }
  // another site's page, with the same keys, is still refused by the lists
  const other = await fetch(`${service.url}/metrics`, { headers: { authorization: `Bearer ${rk}`, origin: 'https://evil.example' } });
  assert.equal(other.status, 403);
  assert.match(((await other.json()) as { error: { message: string } }).error.message, /origin https:\/\/evil\.example is not allowed/);
  const referred = await fetch(`${service.url}/metrics`, { headers: { authorization: `Bearer ${locked.keys.secret}`, referer: 'https://evil.example/page' } });
  assert.equal(referred.status, 403);
});

test('Share turns a secret key into a read-only rk_ link, which signs in without listing projects and shows the same figures', async () => {
  const owner = await open();
  await signIn(owner.page, site.keys.secret);
  await figuresOnScreen(owner.page);
  await owner.page.getByRole('button', { name: 'Share' }).click();
  await owner.page.getByRole('button', { name: 'Create read-only link' }).click();
  const link = await owner.page.getByLabel('Read-only link').inputValue();
  assert.match(link, new RegExp(`^${service.url}/dashboard#key=rk_[A-Za-z0-9_-]{20,}$`));
  const rk = link.split('#key=')[1]!;
  assert.deepEqual(owner.problems, []);
  await owner.context.close();

  const { page, context, requests, problems } = await open(service.url, { path: `/dashboard#key=${rk}` });
  await figuresOnScreen(page);
  assert.equal(await page.evaluate(() => location.hash), '');
  const asked = await lastMetrics(requests);
  await assertShows(page, await metrics(rk, asked.searchParams.toString()));
  assert.deepEqual(requests.filter((r) => new URL(r.url()).pathname === '/projects'), [], 'a read-only key lists no projects');
  assert.equal(await page.getByRole('button', { name: 'Share' }).count(), 0, 'a read-only key cannot share further');
  assert.match(await page.locator('#title').innerText(), new RegExp(site.project.id));
  for (const r of requests) assert.ok(!r.url().includes(rk));
  // The same key typed into the form works too.
  await page.getByRole('button', { name: 'Sign out' }).click();
  await signIn(page, rk);
  await figuresOnScreen(page);
  assert.deepEqual(problems, []);
  await context.close();
});

test('visitors right now equal GET /metrics/realtime and refresh while the page is open; tabs switch with the arrow keys', async () => {
  const { page, context, problems } = await open();
  await signIn(page, site.keys.secret);
  await figuresOnScreen(page);
  const tile = page.locator('#live .value');
  await tile.waitFor({ timeout: WAIT_MS });
  const fmt = (n: number) => page.evaluate((x) => new Intl.NumberFormat(navigator.language).format(x), n);
  const before = (await api(service.url, '/metrics/realtime', { key: site.keys.secret })).body.visitors as number;
  assert.equal(await tile.innerText(), await fmt(before));
  // Three new visitors arrive; the tile catches up on its own (here: when the tab becomes visible again).
  const sent = await api(service.url, '/analytics', {
    key: site.keys.secret,
    body: ['rt1', 'rt2', 'rt3'].map((sessionId) => ({ event: 'page_view', url: 'https://acme.example/pricing', sessionId })),
  });
  assert.equal(sent.status, 200);
  const after = (await api(service.url, '/metrics/realtime', { key: site.keys.secret })).body.visitors as number;
  assert.equal(after, before + 3);
  await page.evaluate(() => document.dispatchEvent(new Event('visibilitychange')));
  await page.locator('#live .value', { hasText: await fmt(after) }).waitFor({ timeout: WAIT_MS });

  // Tabs: focus the selected one, then arrows move the selection and show its panel.
  const tabs = page.getByRole('tablist', { name: 'Devices by' }).getByRole('tab');
  await tabs.first().focus();
  await page.keyboard.press('ArrowRight');
  assert.equal(await tabs.nth(1).getAttribute('aria-selected'), 'true');
  assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Browsers');
  assert.equal(await page.locator('table[data-table=browsers]').isVisible(), true);
  assert.equal(await page.locator('table[data-table=devices]').isVisible(), false);
  await page.keyboard.press('End');
  assert.equal(await page.locator('table[data-table=operatingSystems]').isVisible(), true);
  await page.keyboard.press('ArrowRight'); // wraps around
  assert.equal(await page.locator('table[data-table=devices]').isVisible(), true);
  assert.deepEqual(problems, []);
  await context.close();
});

test('a wrong key says "invalid key", a publishable key says "not allowed", and the page never goes blank', async () => {
  const { page, context, problems } = await open();
  await signIn(page, 'sk_thisKeyDoesNotExist0000000000000');
  await page.locator('#signin-error', { hasText: 'invalid key' }).waitFor({ timeout: WAIT_MS });
  assert.equal(await page.getByLabel('API key').isVisible(), true, 'the form is still there to try again');
  await signIn(page, site.keys.publishable);
  await page.locator('#signin-error', { hasText: 'not allowed' }).waitFor({ timeout: WAIT_MS });
  assert.equal(await page.evaluate(() => sessionStorage.length), 0, 'a refused key is not kept');

  // A read-only key revoked while its dashboard is open: the next read sends the reader back to the form.
  const created = await api(service.url, `/projects/${site.project.id}/keys`, { key: site.keys.secret, body: { type: 'read' } });
  await signIn(page, created.body.key);
  await figuresOnScreen(page);
  const revoked = await api(service.url, `/projects/${site.project.id}/keys/${created.body.id}`, { key: site.keys.secret, method: 'DELETE' });
  assert.equal(revoked.status, 200);
  await page.getByLabel('Date range').selectOption('7d');
  await page.locator('#signin-error', { hasText: 'invalid key' }).waitFor({ timeout: WAIT_MS });
  assert.equal(await page.locator('#dash').count(), 0, 'the figures are gone with the key');
  assert.deepEqual(problems, []);
  await context.close();
});

test('429 and a service that does not answer show clear messages, and the page recovers by itself', async () => {
  let mode: 'limit' | 'down' | 'pass' = 'pass';
  let refused = 0;
  const proxy: Proxy = await startProxy(service.url, async (req, res, _body, forward) => {
    // 'down' lasts until the test ends it: the browser silently retries a GET whose reused connection dies, so a
    // fixed number of dropped connections may never reach the page.
    if (req.url?.startsWith('/metrics?') && (mode === 'down' || (mode === 'limit' && refused < 2))) {
      refused++;
      if (mode === 'down') return void res.destroy();
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '1' });
      return void res.end(JSON.stringify({ ok: false, error: { code: 'rate_limited', message: 'slow down' } }));
    }
    const a = await forward();
    res.writeHead(a.status, a.headers).end(a.body);
  });
  try {
    const { page, context, problems } = await open(proxy.origin);
    mode = 'limit';
    await signIn(page, site.keys.secret);
    await page.locator('#problem', { hasText: 'Too many requests' }).waitFor({ timeout: WAIT_MS });
    await figuresOnScreen(page);
    await page.locator('#problem').waitFor({ state: 'hidden', timeout: WAIT_MS });

    mode = 'down';
    refused = 0;
    await page.getByLabel('Date range').selectOption('7d');
    await page.locator('#problem', { hasText: 'not reachable' }).waitFor({ timeout: WAIT_MS });
    assert.equal(await page.locator('.tile[data-metric=users] .value').isVisible(), true, 'the last figures stay on screen');
    mode = 'pass';
    await page.getByRole('button', { name: 'Try now' }).click();
    await page.locator('#problem').waitFor({ state: 'hidden', timeout: 2 * WAIT_MS });
    assert.deepEqual(problems.filter((p) => !/Failed to load resource|ERR_EMPTY_RESPONSE|Failed to fetch/.test(p)), []);
    await context.close();
  } finally {
    await proxy.close();
  }
});

async function waitFor(ready: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + WAIT_MS;
  while (!ready()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A fresh read-only rk_ key for the seeded site. */
async function readKey(): Promise<string> {
  const res = await api(service.url, `/projects/${site.project.id}/keys`, { key: site.keys.secret, body: { type: 'read' } });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.match(res.body.key, /^rk_/);
  return res.body.key;
}
