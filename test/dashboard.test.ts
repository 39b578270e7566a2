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
 * the real ingest path. Every figure on the page is checked against GET /metrics for the same range.
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
  site = await createProject(service.url, service.adminKey, { name: 'acme.example' });
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

/** A fresh tab (its own sessionStorage) whose clock agrees with the service's, recording every request. */
async function open(origin = service.url, options: { locale?: string; width?: number; height?: number; dark?: boolean } = {}): Promise<Opened> {
  const context = await browser.newContext({
    locale: options.locale ?? 'en-US',
    viewport: { width: options.width ?? 1280, height: options.height ?? 800 },
    colorScheme: options.dark ? 'dark' : 'light',
  });
  const page = await context.newPage();
  await page.clock.setFixedTime(clock.now());
  const requests: Request[] = [];
  const problems: string[] = [];
  page.on('request', (r) => requests.push(r));
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/status of 4\d\d|status of 5\d\d/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  await page.goto(`${origin}/dashboard`);
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

/** Tiles and tables on the page, as text. */
async function shown(page: Page): Promise<{ tiles: Record<string, string>; tables: Record<string, Array<[string, string]>> }> {
  return page.evaluate(() => {
    const tiles: Record<string, string> = {};
    document.querySelectorAll<HTMLElement>('.tile[data-metric]').forEach((t) => (tiles[t.dataset['metric']!] = t.querySelector('.value')!.textContent!));
    const tables: Record<string, Array<[string, string]>> = {};
    document.querySelectorAll<HTMLElement>('table.bars[data-table]').forEach((t) => {
      tables[t.dataset['table']!] = [...t.querySelectorAll<HTMLElement>('tbody tr')].map((r) => [r.dataset['key']!, r.querySelector('td')!.textContent!]);
    });
    return { tiles, tables };
  });
}

async function figuresOnScreen(page: Page): Promise<void> {
  await page.locator('.tile[data-metric=users] .value').waitFor({ timeout: WAIT_MS });
}

/** The page's tiles and tables are exactly `m`, formatted in the page's locale. */
async function assertShows(page: Page, m: MetricsResponse & Record<string, any>): Promise<void> {
  const { tiles, tables } = await shown(page);
  const fmt = (n: number) => page.evaluate((x) => new Intl.NumberFormat(navigator.language).format(x), n);
  assert.deepEqual(tiles, { users: await fmt(m.users), sessions: await fmt(m.sessions), pageviews: await fmt(m.pageviews), bounceRate: m.bounceRate });
  for (const field of ['pages', 'trafficSources', 'countries', 'devices', 'events', 'entryPages', 'browsers', 'operatingSystems', 'utmMediums', 'utmCampaigns']) {
    if (m[field] === undefined) continue;
    const expected = await Promise.all(Object.entries(m[field] as Record<string, number>).map(async ([k, n]) => [k, await fmt(n)]));
    assert.deepEqual(tables[field], expected, `table ${field}`);
  }
}

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
  assert.deepEqual(problems, []);
  await context.close();
});

test('screenshots at 1280×800 and 390×844 are written to docs/, and nothing overflows a phone screen', async () => {
  mkdirSync(DOCS, { recursive: true });
  for (const [name, width, height, dark] of [['dashboard.png', 1280, 800, false], ['dashboard-mobile.png', 390, 844, false], ['dashboard-dark.png', 1280, 800, true]] as const) {
    const { page, context, problems } = await open(service.url, { width, height, dark });
    await signIn(page, site.keys.secret);
    await figuresOnScreen(page);
    await page.locator('#chart canvas').waitFor({ timeout: WAIT_MS });
    await page.locator('#live .value').waitFor({ timeout: WAIT_MS }).catch(() => undefined); // realtime, where the service has it
    await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur());
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.equal(overflow, 0, `${name}: no horizontal scrolling`);
    await page.screenshot({ path: new URL(name, DOCS).pathname });
    assert.deepEqual(problems, []);
    await context.close();
  }
});
