import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import { type Browser, chromium, type Page } from 'playwright-core';
import type { MetricsResponse } from '../src/core/types.ts';
import { buildTracker } from '../src/tracker/build.ts';
import { closeServer, type Exchange, listen, type Proxy, startProxy } from './forwarding-proxy.ts';
import { api, type CreatedProject, createProject, startTestService, type TestService } from './helpers.ts';

/**
 * The script tag in a real browser (Debian's chromium, driven by playwright-core). The page is served from one
 * origin and loads the script from the service on another, through a pass-through proxy that records every
 * exchange (so the CORS preflight is observable). Every figure is read back from GET /metrics.
 */

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--no-sandbox', // CI containers run as root, where the sandbox cannot start
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
/** Long enough for a keepalive fetch on a loaded CI machine; the loop returns as soon as the figure is there. */
const WAIT_MS = 10_000;
const POLL_MS = 50;
/** The tracker's sessionStorage key and idle rule (src/tracker/tracker.ts). */
const SESSION_KEY = '_a_sid';
const SESSION_IDLE_MS = 30 * 60 * 1000;

let service: TestService;
let browser: Browser;
let proxy: Proxy;
let site: { origin: string; pages: Map<string, string>; close(): Promise<void> };

before(async () => {
  service = await startTestService();
  proxy = await startProxy(service.url);
  site = await startSite();
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
});

after(async () => {
  await browser?.close();
  await site?.close();
  await proxy?.close();
  await service?.destroy();
});

/** Serves `pages` by first path segment, so an SPA's deep links all return its one HTML document. */
async function startSite(): Promise<typeof site> {
  const pages = new Map<string, string>();
  const server = http.createServer((req, res) => {
    const app = (req.url ?? '/').split('/')[1]?.split(/[?#]/)[0] ?? '';
    const html = pages.get(app);
    res.writeHead(html === undefined ? 404 : 200, { 'Content-Type': 'text/html; charset=utf-8' }).end(html ?? 'not found');
  });
  const origin = await listen(server);
  return { origin, pages, close: () => closeServer(server) };
}

/** The documented queue stub, so calls made before the deferred script runs are kept. */
const QUEUE_STUB = 'window.analytics=window.analytics||{q:[],track:function(){this.q.push(arguments)}};';

function scriptTag(project: CreatedProject, attributes = 'data-allow-local'): string {
  return `<script defer src="${proxy.origin}/script.js" data-key="${project.keys.publishable}" data-project="${project.project.id}" ${attributes}></script>`;
}

/** Registers an app under a fresh path segment and returns its address. */
function serve(app: string, head: string, body = ''): string {
  site.pages.set(app, `<!doctype html><html><head><meta charset="utf-8">${head}</head><body>${body}</body></html>`);
  return `${site.origin}/${app}/`;
}

async function newProject(name: string, allowedOrigins = [site.origin]): Promise<CreatedProject> {
  return createProject(service.url, service.adminKey, { name, allowed_origins: allowedOrigins });
}

async function metrics(project: CreatedProject): Promise<MetricsResponse> {
  const res = await api<MetricsResponse>(service.url, '/metrics', { key: project.keys.secret });
  assert.equal(res.status, 200);
  return res.body;
}

/** Reads /metrics until `ready` holds; on timeout shows what was there. */
async function metricsWhen(project: CreatedProject, ready: (m: MetricsResponse) => boolean): Promise<MetricsResponse> {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const m = await metrics(project);
    if (ready(m)) return m;
    if (Date.now() > deadline) assert.fail(`metrics never got there: ${JSON.stringify({ events: m.events, pages: m.pages })}`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

async function until(what: string, ready: () => boolean): Promise<void> {
  const deadline = Date.now() + WAIT_MS;
  while (!ready()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

/** A page in a fresh context (its own sessionStorage), failing the test on any error thrown into it. */
async function openPage(): Promise<{ page: Page; errors: Error[]; sent: Array<{ event: string; eventParams?: unknown }> }> {
  // Headless Chromium says "HeadlessChrome" in its User-Agent, which the service rightly files under bots;
  // a visitor's browser says "Chrome".
  const userAgent = `Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/${browser.version()} Safari/537.36`;
  const context = await browser.newContext({ userAgent });
  const page = await context.newPage();
  const errors: Error[] = [];
  const sent: Array<{ event: string; eventParams?: unknown }> = [];
  page.on('pageerror', (e) => errors.push(e));
  // 'request' fires in the order the page issued its fetches, whatever order they reach the service in.
  page.on('request', (r) => {
    if (r.method() === 'POST' && r.url().endsWith('/analytics')) sent.push(JSON.parse(r.postData() ?? '{}'));
  });
  return { page, errors, sent };
}

function analyticsPosts(projectKey: string): Exchange[] {
  return proxy.log.filter((x) => x.method === 'POST' && x.path === '/analytics' && x.headers.authorization === `Bearer ${projectKey}`);
}

test('the script tag sends a page view on load with url, referrer, session id, screen and language', async () => {
  const project = await newProject('landing');
  const url = serve('landing', scriptTag(project));
  const { page, errors, sent } = await openPage();
  await page.goto(`${url}?utm_campaign=x`, { referer: 'https://news.ycombinator.com/item?id=1' });

  const m = await metricsWhen(project, (x) => x.pageviews === 1);
  assert.deepEqual(m.pages, { '/landing/': 1 });
  assert.deepEqual(m.trafficSources, { 'Hacker News': 1 });
  assert.equal(m.recentEvents[0]?.url, `${url}?utm_campaign=x`);
  const body = sent[0] as Record<string, unknown>;
  assert.equal(body['referrer'], 'https://news.ycombinator.com/item?id=1', 'document.referrer, as the page saw it');
  assert.match(m.recentEvents[0]?.referrer ?? '', /^https:\/\/news\.ycombinator\.com\//); // the service may trim the query
  assert.match(String(body['screen']), /^\d+x\d+$/);
  assert.equal(body['language'], await page.evaluate(() => navigator.language));
  assert.equal(body['projectId'], project.project.id);
  assert.equal(body['sessionId'], m.recentEvents[0]?.sessionId, 'the session id is the one the script keeps');
  assert.match(String(body['eventId']), /^[0-9a-f-]{36}$/);
  assert.deepEqual(errors, []);
  await page.context().close();
});

test('single-page navigations send one page view per new path, with an empty referrer', async () => {
  const project = await newProject('spa');
  const url = serve('spa', scriptTag(project));
  const { page, errors } = await openPage();
  await page.goto(url, { referer: 'https://www.google.com/' });
  await metricsWhen(project, (x) => x.pageviews === 1);

  await page.evaluate(() => {
    history.pushState({}, '', '/spa/pricing'); // new path: counted
    history.replaceState({}, '', '/spa/pricing?plan=pro'); // same path, new query: not counted
    history.pushState({}, '', '/spa/pricing#faq'); // same path again: not counted
    history.replaceState({}, '', '/spa/signup'); // replaceState to a new path: counted
    history.pushState({}, '', '/spa/done'); // counted
  });
  await page.goBack(); // popstate to the entry replaceState turned into /spa/signup: counted again
  const m = await metricsWhen(project, (x) => x.pageviews === 5);
  assert.deepEqual(m.pages, { '/spa/signup': 2, '/spa/': 1, '/spa/pricing': 1, '/spa/done': 1 });
  assert.equal(m.sessions, 1, 'one session across the whole visit');
  assert.equal(m.bounceRate, '0.0%');
  assert.deepEqual(m.trafficSources, { Google: 1 }, 'the landing referrer decides the source');
  const spaViews = m.recentEvents.filter((e) => e.url !== url);
  assert.equal(spaViews.length, 4);
  assert.ok(spaViews.every((e) => e.referrer === ''), 'SPA views carry no referrer');
  assert.deepEqual(errors, []);
  await page.context().close();
});

test('calls queued before the script loads are delivered in order, then custom events with params', async () => {
  const project = await newProject('queue');
  const url = serve('queue', `<script>${QUEUE_STUB}analytics.track('queued_first',{n:1});analytics.track('queued_second');</script>${scriptTag(project)}`);
  const { page, errors, sent } = await openPage();
  await page.goto(url);
  await page.waitForFunction(() => (window as unknown as { analytics: { l?: number } }).analytics.l === 1);
  await page.evaluate(() => {
    const analytics = (window as unknown as { analytics: { track(name?: unknown, params?: unknown): void } }).analytics;
    analytics.track('signup', { plan: 'pro', seats: 3, trial: true });
    // Nonsense from a page must not throw into it (the service refuses it; the page never knows).
    analytics.track();
    const loop: Record<string, unknown> = {};
    loop['self'] = loop;
    analytics.track('circular', loop);
  });

  const m = await metricsWhen(project, (x) => x.events['signup'] === 1);
  assert.deepEqual(m.events, { page_view: 1, queued_first: 1, queued_second: 1, signup: 1 });
  await until('the refused call to be answered', () => sent.length >= 5 && analyticsPosts(project.keys.publishable).length >= 5);
  assert.deepEqual(sent.map((b) => b.event).slice(0, 4), ['page_view', 'queued_first', 'queued_second', 'signup']);
  assert.deepEqual(sent[1]?.eventParams, { n: 1 });
  assert.deepEqual(sent[3]?.eventParams, { plan: 'pro', seats: 3, trial: true });
  assert.deepEqual(errors, []);
  await page.context().close();
});

test('the CORS preflight allows the real Authorization header from the page origin', async () => {
  const project = await newProject('cors');
  const url = serve('cors', scriptTag(project));
  const { page, errors } = await openPage();
  const start = proxy.log.length;
  await page.goto(url);
  await metricsWhen(project, (x) => x.pageviews === 1);

  const seen = proxy.log.slice(start);
  const preflight = seen.find((x) => x.method === 'OPTIONS' && x.path === '/analytics');
  assert.ok(preflight, 'the browser sent a preflight');
  assert.equal(preflight.headers.origin, site.origin);
  assert.equal(preflight.headers['access-control-request-method'], 'POST');
  assert.match(String(preflight.headers['access-control-request-headers']), /authorization/i);
  assert.equal(preflight.status, 204);
  assert.equal(preflight.responseHeaders['access-control-allow-origin'], site.origin);
  assert.match(String(preflight.responseHeaders['access-control-allow-headers']), /authorization/i);
  assert.ok(Number(preflight.responseHeaders['access-control-max-age']) >= 600);

  const post = seen.find((x) => x.method === 'POST' && x.path === '/analytics');
  assert.equal(post?.headers.authorization, `Bearer ${project.keys.publishable}`);
  assert.equal(post?.headers['content-type'], 'application/json');
  assert.equal(post?.status, 200);
  assert.equal(post?.responseHeaders['access-control-allow-origin'], site.origin);
  assert.deepEqual(errors, []);
  await page.context().close();
});

test('a pk_ key is refused from an origin its project does not allow, and nothing is counted', async () => {
  const project = await newProject('foreign', ['https://shop.example']);
  const url = serve('foreign', `<script>${QUEUE_STUB}analytics.track('early');</script>${scriptTag(project)}`);
  const { page, errors } = await openPage();
  await page.goto(url);
  await until('both refusals', () => analyticsPosts(project.keys.publishable).length >= 2);
  assert.ok(analyticsPosts(project.keys.publishable).every((x) => x.status === 403));

  const m = await metrics(project);
  assert.equal(m.pageviews, 0);
  assert.deepEqual(m.events, {});
  assert.deepEqual(m.recentEvents, []);
  assert.deepEqual(errors, [], 'a refusal never surfaces in the page');
  await page.context().close();
});

test('no cookie is ever set: document.cookie stays empty and no response carries Set-Cookie', async () => {
  const project = await newProject('cookies');
  const url = serve('cookies', scriptTag(project));
  const { page } = await openPage();
  await page.goto(url);
  await page.evaluate(() => history.pushState({}, '', '/cookies/next'));
  await metricsWhen(project, (x) => x.pageviews === 2);
  assert.equal(await page.evaluate(() => document.cookie), '');
  assert.deepEqual(await page.context().cookies(), []);
  assert.deepEqual(proxy.log.filter((x) => x.responseHeaders['set-cookie'] !== undefined), []);
  await page.context().close();
});

test('the session id is kept in sessionStorage and a new one starts after 30 idle minutes', async () => {
  const project = await newProject('sessions');
  const url = serve('sessions', scriptTag(project));
  const run = async (stored: string): Promise<string> => {
    const { page } = await openPage();
    // Pretend an earlier visit in this tab left a session behind.
    await page.addInitScript(([key, value]) => sessionStorage.setItem(key, value), [SESSION_KEY, stored] as const);
    const count = (await metrics(project)).pageviews;
    await page.goto(url);
    const m = await metricsWhen(project, (x) => x.pageviews === count + 1);
    const kept = await page.evaluate((key) => sessionStorage.getItem(key), SESSION_KEY);
    await page.context().close();
    assert.equal(kept?.split('.')[0], m.recentEvents[0]?.sessionId);
    return m.recentEvents[0]?.sessionId ?? '';
  };
  assert.equal(await run(`recent-session.${Date.now() - 60_000}`), 'recent-session');
  assert.notEqual(await run(`stale-session.${Date.now() - SESSION_IDLE_MS - 60_000}`), 'stale-session');
});

test('without data-allow-local an automated browser sends nothing, says so once on the console, and track still works', async () => {
  const project = await newProject('robot');
  const url = serve('robot', scriptTag(project, ''));
  const { page, errors } = await openPage();
  const infos: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'info') infos.push(m.text());
  });
  await page.goto(url);
  await page.waitForFunction(() => (window as unknown as { analytics: { l?: number } }).analytics.l === 1);
  await page.evaluate(() => (window as unknown as { analytics: { track(n: string): void } }).analytics.track('click'));
  // The control: a second page with the attribute is counted, so the silence above is the rule, not a slow network.
  const control = await newProject('robot-control');
  const { page: other } = await openPage();
  await other.goto(serve('robot-control', scriptTag(control)));
  await metricsWhen(control, (x) => x.pageviews === 1);
  assert.deepEqual(analyticsPosts(project.keys.publishable), []);
  assert.deepEqual((await metrics(project)).events, {});
  assert.deepEqual(errors, []);
  // One line, however many events were skipped (a page view and a track call here), naming the way out.
  assert.equal(infos.length, 1, JSON.stringify(infos));
  assert.match(infos[0]!, /data-allow-local/);
  await page.context().close();
  await other.context().close();
});

test('data-api sends events to another ingestion URL than the script came from', async () => {
  const project = await newProject('data-api');
  // Script straight from the service; events through the proxy, which the log then shows.
  const tag = `<script defer src="${service.url}/script.js" data-key="${project.keys.publishable}" data-api="${proxy.origin}/analytics" data-allow-local></script>`;
  const { page, errors } = await openPage();
  await page.goto(serve('data-api', tag));
  await metricsWhen(project, (x) => x.pageviews === 1);
  assert.equal(analyticsPosts(project.keys.publishable).length, 1);
  assert.deepEqual(errors, []);
  await page.context().close();
});

test('the TypeScript client runs in the browser: batches, page context, and delivery when the page is hidden', async () => {
  const project = await newProject('client');
  const esbuild = await import('esbuild');
  const bundle = await esbuild.build({
    entryPoints: [new URL('../clients/typescript/src/index.ts', import.meta.url).pathname],
    bundle: true, write: false, format: 'iife', globalName: 'Analytics', target: 'es2020', logLevel: 'silent',
  });
  const library = bundle.outputFiles[0]?.text ?? '';
  assert.doesNotMatch(library, /<\/script/i, 'safe to inline');
  const url = serve('client', `<script>${library}</script>`);
  const { page, errors, sent } = await openPage();
  await page.goto(url, { referer: 'https://duckduckgo.com/' });
  const options = { apiKey: project.keys.publishable, projectId: project.project.id, endpoint: `${proxy.origin}/analytics` };
  interface BrowserClient { pageView(): string; track(n: string, p?: object): string; flush(): Promise<void>; stats(): { sent: number; requests: number } }
  type Lib = { createClient(o: typeof options & { flushIntervalMs: number }): BrowserClient };
  const stats = await page.evaluate(async (o) => {
    const client = (window as unknown as { Analytics: Lib }).Analytics.createClient({ ...o, flushIntervalMs: 60_000 });
    client.pageView();
    client.track('cta_click', { where: 'hero' });
    await client.flush();
    return client.stats();
  }, options);
  assert.deepEqual({ sent: stats.sent, requests: stats.requests }, { sent: 2, requests: 1 });
  const first = (sent[0] as unknown as { events: Array<Record<string, unknown>> }).events[0];
  assert.equal(first?.['url'], url);
  assert.equal(first?.['referrer'], 'https://duckduckgo.com/');
  assert.match(String(first?.['screen']), /^\d+x\d+$/);

  // A page being hidden may never come back: the client sends without waiting for its timer.
  await page.evaluate((o) => {
    const client = (window as unknown as { Analytics: Lib }).Analytics.createClient({ ...o, flushIntervalMs: 600_000 });
    client.track('tab_hidden');
    Object.defineProperty(document, 'visibilityState', { value: 'hidden', configurable: true });
    document.dispatchEvent(new Event('visibilitychange'));
  }, options);
  const m = await metricsWhen(project, (x) => x.events['tab_hidden'] === 1);
  assert.deepEqual(m.events, { page_view: 1, cta_click: 1, tab_hidden: 1 });
  assert.deepEqual(m.trafficSources, { DuckDuckGo: 1 });
  assert.equal(await page.evaluate(() => document.cookie), '');
  assert.deepEqual(errors, []);
  await page.context().close();
});

test('the service serves the built script, and a hashed copy for long-lived caching', async () => {
  const { code, hash } = await buildTracker();
  const plain = await fetch(`${service.url}/script.js`);
  assert.equal(await plain.text(), code);
  assert.match(plain.headers.get('content-type') ?? '', /javascript/);
  assert.match(plain.headers.get('cache-control') ?? '', /max-age=\d+/);
  const pinned = await fetch(`${service.url}/script.${hash}.js`);
  assert.equal(await pinned.text(), code);
  assert.match(pinned.headers.get('cache-control') ?? '', /immutable/);
});
