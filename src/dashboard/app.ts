import './style.css';
import 'uplot/dist/uPlot.min.css';
import { type Answer, describe, get, listProjects, type Metrics, type Project, type Refusal } from './api.ts';
import { destroyChart, drawChart } from './chart.ts';
import { controls } from './controls.ts';
import { byId, h } from './dom.ts';
import { day, rangeLabel } from './format.ts';
import { startLive, stopLive } from './live.ts';
import { compareMode, STORE_KEY, STORE_PROJECT, storedRange } from './prefs.ts';
import { addDays, checkCustom, DEFAULT_PRESET, type Preset, type Range, rangeOf, todayIn } from './ranges.ts';
import { cards, dailyTable, liveTile, recent, tiles } from './view.ts';

/**
 * The dashboard: sign in with a key, pick a project (admin keys) and a range, show GET /metrics for it.
 * The key lives in sessionStorage (this tab only) and leaves the page only in Authorization headers.
 */

/** After "service not reachable", the first retry comes this soon, doubling up to the cap. */
const RETRY_FIRST_MS = 3_000;
const RETRY_MAX_MS = 60_000;
/** For a one-day range the chart shows this many days ending on it (per-hour figures are not kept). */
const TREND_DAYS = 14;

interface SignedIn {
  key: string;
  /** undefined for keys that may not list projects (rk_) */
  projects: Project[] | undefined;
  /** admin keys name the project in every request */
  admin: boolean;
  projectId: string | undefined;
  timezone: string | undefined;
}

let session: SignedIn | undefined;
let loadSeq = 0;
/** false once the service answered that it does not know `compare` (an older service) */
let compareSupported = true;
let retryTimer: ReturnType<typeof setTimeout> | undefined;
let retryDelay = RETRY_FIRST_MS;

// ------------------------------------------------------------------ sign-in

function start(): void {
  const form = byId<HTMLFormElement>('signin-form');
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const key = byId<HTMLInputElement>('key').value.trim();
    if (!key) return signInError('Enter an API key.');
    void signIn(key);
  });
  takeFragmentKey();
  // A share link pasted into a tab that already shows the dashboard changes only the fragment.
  addEventListener('hashchange', () => {
    if (takeFragmentKey()) {
      stopTimers();
      void signIn(sessionStorage.getItem(STORE_KEY)!);
    }
  });
  const key = sessionStorage.getItem(STORE_KEY);
  if (key) void signIn(key);
  else byId('key').focus();
}

/** A share link (#key=…): keep the key in sessionStorage, then drop it from the address bar and history at once. */
function takeFragmentKey(): boolean {
  const key = new URLSearchParams(location.hash.slice(1)).get('key');
  if (!key) return false;
  history.replaceState(history.state, '', location.pathname + location.search);
  sessionStorage.setItem(STORE_KEY, key);
  return true;
}

function signInError(message: string): void {
  const el = byId('signin-error');
  el.textContent = message;
  byId('key').setAttribute('aria-invalid', 'true');
}

function showSignIn(message = ''): void {
  stopTimers();
  destroyChart();
  session = undefined;
  sessionStorage.removeItem(STORE_KEY);
  document.getElementById('dash')?.remove();
  byId('signin').hidden = false;
  const input = byId<HTMLInputElement>('key');
  input.value = '';
  byId('signin-error').textContent = '';
  input.removeAttribute('aria-invalid');
  if (message) signInError(message);
  input.focus();
}

async function signIn(key: string): Promise<void> {
  const button = document.querySelector<HTMLButtonElement>('#signin-form button');
  if (button) {
    button.disabled = true;
    button.textContent = 'Signing in…';
  }
  byId('signin-error').textContent = '';
  try {
    const admin = key.startsWith('ak_');
    let projects: Project[] | undefined;
    // Admin and secret keys may list projects (names, timezones); read-only keys go straight to their figures.
    if (admin || key.startsWith('sk_')) {
      const r = await listProjects(key);
      if (!r.ok) return refusedAtSignIn(r, key);
      projects = r.value;
      if (projects.length === 0) {
        return signInError('This admin key works, but there are no projects yet. Create one (POST /projects or "analytics projects create"), then sign in again.');
      }
    }
    const stored = sessionStorage.getItem(STORE_PROJECT);
    const project = projects?.find((p) => p.id === stored) ?? projects?.[0];
    session = { key, projects, admin, projectId: project?.id, timezone: project?.timezone };
    sessionStorage.setItem(STORE_KEY, key);
    showDashboard();
    await load(true);
  } finally {
    if (button) {
      button.disabled = false;
      button.textContent = 'Sign in';
    }
  }
}

function refusedAtSignIn(r: Refusal, key: string): void {
  if (r.status === 401 || r.status === 403) return showSignIn(describe(r));
  // Not the key's fault: keep it and try again, saying why.
  sessionStorage.setItem(STORE_KEY, key);
  signInError(describe(r));
  scheduleRetry(r, () => void signIn(key));
}

// ------------------------------------------------------------------ the dashboard shell

function showDashboard(): void {
  const s = session!;
  byId('signin').hidden = true;
  document.getElementById('dash')?.remove();
  const title = s.projects?.find((p) => p.id === s.projectId)?.name ?? 'Analytics';
  const bar = controls(s, compareSupported, {
    project(p) {
      s.projectId = p?.id;
      s.timezone = p?.timezone;
      if (p) sessionStorage.setItem(STORE_PROJECT, p.id);
      byId('title').textContent = p?.name ?? 'Analytics';
      void load(true);
    },
    reload: () => void load(),
    problem: (message) => problem(message),
    signOut: () => showSignIn(),
  });

  const dash = h(
    'div',
    { id: 'dash' },
    h(
      'header',
      { class: 'top' },
      h('div', { class: 'brand' }, h('h1', { id: 'title', tabindex: -1 }, title), h('p', { id: 'context', class: 'context' })),
      bar,
    ),
    h('div', { id: 'problem', class: 'problem', role: 'alert', hidden: true }),
    h('p', { id: 'loading', class: 'sr-only', role: 'status', 'aria-live': 'polite' }),
    h('main', { id: 'main', tabindex: -1 }, h('p', { class: 'placeholder' }, 'Loading figures…')),
  );
  byId('app').append(dash);
  byId('title').focus();
}

function problem(message: string, retry?: () => void): void {
  const el = document.getElementById('problem');
  if (!el) return signInError(message);
  el.replaceChildren(h('span', {}, message));
  if (retry) el.append(h('button', { type: 'button', class: 'quiet', onclick: retry }, 'Try now'));
  el.hidden = false;
}

function clearProblem(): void {
  const el = document.getElementById('problem');
  if (el) el.hidden = true;
  retryDelay = RETRY_FIRST_MS;
}

function scheduleRetry(r: Refusal, again: () => void): void {
  clearTimeout(retryTimer);
  const wait = r.status === 429 && r.retryAfter ? Math.min(RETRY_MAX_MS, r.retryAfter * 1000) : retryDelay;
  if (r.status !== 429) retryDelay = Math.min(RETRY_MAX_MS, retryDelay * 2);
  retryTimer = setTimeout(again, wait);
}

/** What every failed read does: back to sign-in for a refused key, otherwise a message and a retry. */
function refused(r: Refusal, again: () => void): void {
  if (r.status === 401 || r.status === 403) return showSignIn(describe(r));
  // A refused request (400, a project that is gone: 404) stays refused; anything else may pass in a moment.
  const final = r.status === 400 || r.status === 404;
  problem(describe(r), final ? undefined : () => { clearTimeout(retryTimer); again(); });
  if (!final) scheduleRetry(r, again);
}

// ------------------------------------------------------------------ loading figures

async function metrics(s: SignedIn, params: Record<string, string | undefined>): Promise<Answer<Metrics>> {
  const projectId = s.admin ? s.projectId : undefined;
  const mode = compareMode();
  const withCompare = compareSupported && params['from'] !== undefined && mode !== 'off';
  const r = await get<Metrics>('metrics', s.key, { ...params, projectId, compare: withCompare ? mode : undefined });
  if (!r.ok && withCompare && r.status === 400 && /compare/i.test(r.message)) {
    compareSupported = false;
    document.getElementById('compare')?.parentElement?.remove();
    return metrics(s, params);
  }
  return r;
}

async function load(projectChanged = false): Promise<void> {
  const s = session;
  if (!s) return;
  const seq = ++loadSeq;
  clearTimeout(retryTimer);
  byId('loading').textContent = 'Loading figures…';
  document.getElementById('main')?.setAttribute('aria-busy', 'true');
  const again = () => void load(projectChanged);
  let today = s.timezone ? todayIn(s.timezone) : undefined;
  if (!today) {
    // The key cannot list projects (or the browser lacks the zone): today's answer names the timezone and the day.
    const boot = await metrics(s, {});
    if (seq !== loadSeq) return;
    if (!boot.ok) return refused(boot, again);
    s.timezone = boot.value.timezone;
    today = todayIn(s.timezone) ?? boot.value.to;
  }
  const chosen = storedRange();
  const range: Range =
    chosen.preset !== 'custom' ? rangeOf(chosen.preset, today)
    : chosen.from && chosen.to && !checkCustom(chosen.from, chosen.to) ? { from: chosen.from, to: chosen.to }
    : rangeOf(DEFAULT_PRESET as Exclude<Preset, 'custom'>, today);
  const r = await metrics(s, { from: range.from, to: range.to });
  if (seq !== loadSeq || session !== s) return;
  document.getElementById('main')?.removeAttribute('aria-busy');
  if (!r.ok) return refused(r, again);
  // One day has a single daily figure: the chart shows the two weeks that end on it instead, for context.
  let trend: Metrics | undefined;
  if (range.from === range.to) {
    const t = await metrics(s, { from: addDays(range.to, -(TREND_DAYS - 1)), to: range.to });
    if (seq !== loadSeq || session !== s) return;
    if (t.ok) trend = t.value;
  }
  clearProblem();
  if (projectChanged) document.getElementById('live')?.remove(); // another project's visitors must not linger
  render(r.value, today, trend);
  byId('loading').textContent = `Showing ${rangeLabel(r.value.from, r.value.to)}.`;
  if (projectChanged) startLive(() => session && { key: session.key, projectId: session.admin ? session.projectId : undefined });
}

function render(m: Metrics, today: string, trend?: Metrics): void {
  const from = document.getElementById('from') as HTMLInputElement | null;
  const to = document.getElementById('to') as HTMLInputElement | null;
  if (from && to) {
    from.value = m.from;
    to.value = m.to;
    from.max = today;
    to.max = today;
  }
  const context = byId('context');
  const compared = m.compare ? ` · compared with ${rangeLabel(m.compare.from, m.compare.to)}` : '';
  context.textContent = `${rangeLabel(m.from, m.to)}${compared} · times in ${m.timezone}`;
  if (!session?.projects) byId('title').textContent = `Project ${m.projectId}`;

  const live = document.getElementById('live') ?? liveTile();
  const chart = h('div', { class: 'chart', id: 'chart', role: 'img' });
  const noData = m.pageviews === 0 && Object.keys(m.events).length === 0;
  const plotted = trend ?? m;
  const flat = plotted.daily.every((d) => d.pageviews === 0 && d.users === 0);
  const chartTitle = trend ? `Page views and visitors per day, the ${TREND_DAYS} days to ${day(m.to, true)}` : 'Page views and visitors per day';
  const main = byId('main');
  destroyChart();
  main.replaceChildren(
    h('section', { 'aria-label': 'Overview' }, tiles(m, live)),
    h(
      'section',
      { class: 'card chart-card', 'aria-labelledby': 'chart-h' },
      h('div', { class: 'card-head' }, h('h2', { id: 'chart-h' }, chartTitle)),
      flat ? h('p', { class: 'empty' }, 'No page views in this range yet.') : chart,
      flat ? null : dailyTable(plotted),
    ),
    h('div', { class: 'grid' }, ...cards(m)),
    recent(m, Date.now()),
  );
  if (noData) main.insertBefore(setupHint(m), main.children[2]!);
  if (!flat) drawChart(chart, plotted);
  shown = plotted;
}

/** The last answer drawn, so the chart can be redrawn in the other colour scheme. */
let shown: Metrics | undefined;
matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => {
  const chart = document.getElementById('chart');
  if (chart && shown) drawChart(chart, shown);
});

function setupHint(m: Metrics): HTMLElement {
  const tag = `<script defer src="${location.origin}/script.js" data-key="pk_…" data-project="${m.projectId}"></script>`;
  return h(
    'section',
    { class: 'card wide hint-card', 'aria-labelledby': 'setup-h' },
    h('h2', { id: 'setup-h' }, 'Start counting'),
    h('p', {}, 'Add the tracking script to every page of your site, with the project\'s publishable key:'),
    h('pre', {}, h('code', {}, tag)),
  );
}

function stopTimers(): void {
  clearTimeout(retryTimer);
  stopLive();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
