// This file is long because it is the page's one life cycle: sign-in, the shell, loading and drawing a view, and the
// filter and funnel actions that change it.
import './style.css';
import 'uplot/dist/uPlot.min.css';
import { describe, get, listProjects, type Metrics, type Project, type Refusal } from './api.ts';
import { destroyChart, drawChart, firstLine } from './chart.ts';
import { controls } from './controls.ts';
import { download, toCsv } from './csv.ts';
import { byId, h } from './dom.ts';
import { Asked, type Asker, type Figures, figures, funnel, noRoute, VISIT_LEVEL } from './figures.ts';
import { count, day, rangeLabel } from './format.ts';
import { funnelCard } from './funnel.ts';
import { goalsCard } from './goals.ts';
import { startLive, stopLive } from './live.ts';
import { STORE_KEY, STORE_PROJECT } from './prefs.ts';
import { type Range, rangeOf, timeIn, todayIn } from './ranges.ts';
import { reread, setView, view, type ViewFilter, withFilter } from './state.ts';
import { cards, dailyTable, liveTile, markFiltered, noun, recent, tiles } from './view.ts';

/**
 * The dashboard: sign in with a key, pick a project (admin keys), a range and filters, show the figures for them
 * (figures.ts). The key lives in sessionStorage (this tab only) and leaves the page only in Authorization headers;
 * the view lives in the address (state.ts).
 */

/** After "service not reachable", the first retry comes this soon, doubling up to the cap. */
const RETRY_FIRST_MS = 3_000;
const RETRY_MAX_MS = 60_000;
/** The allowance banner warns from this share of the monthly quota on. */
const QUOTA_WARN_SHARE = 0.9;
/** Pages and events offered as funnel steps. */
const FUNNEL_CHOICES = 20;

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
/** false once the service answered that it has no POST /query (an older service): no filters then */
let questionsSupported = true;
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
  // Back / Forward: the address holds the view; draw it again.
  addEventListener('popstate', () => {
    reread();
    if (!session) return;
    const p = session.projects?.find((x) => x.id === view().project);
    if (p && session.admin) Object.assign(session, { projectId: p.id, timezone: p.timezone });
    showDashboard();
    void load(true);
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
    const project = projects?.find((p) => p.id === view().project) ?? projects?.find((p) => p.id === stored) ?? projects?.[0];
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
      // Filters, properties and funnel steps belong to the project they were chosen in.
      setView({ project: p?.id, filters: [], props: [], steps: [] });
      byId('title').textContent = p?.name ?? 'Analytics';
      void load(true);
    },
    reload: () => void load(),
    problem: (message) => problem(message),
    csv: () => {
      if (!shown) return;
      const f = shown;
      download(`analytics-${f.projectId}-${f.from}-${f.to}.csv`, toCsv(f, view().filters.map((x) => `${x.dimension} is ${x.value}`).join('; ')));
    },
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
    h('div', { id: 'quota', class: 'problem quota', role: 'status', hidden: true }),
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

function asker(s: SignedIn): Asker {
  return { key: s.key, projectId: s.admin ? s.projectId : undefined };
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
  if (!today || !s.projectId) {
    // The key cannot list projects (or the browser lacks the zone): today's answer names the project, zone and day.
    const boot = await get<Metrics>('metrics', s.key, { projectId: s.admin ? s.projectId : undefined });
    if (seq !== loadSeq) return;
    if (!boot.ok) return refused(boot, again);
    s.timezone = boot.value.timezone;
    s.projectId = boot.value.projectId;
    today = todayIn(s.timezone) ?? boot.value.to;
  }
  // Once per project shown: asked first, so the view's own requests are the last ones.
  if (projectChanged) void allowance(s, today);
  const st = view();
  const range: Range = st.preset !== 'custom' ? rangeOf(st.preset, today) : { from: st.from!, to: st.to! };
  let f: Figures;
  try {
    f = await figures(asker(s), { range, compare: compareSupported ? st.compare : 'off', filters: st.filters, props: st.props, goalsOf: s.projectId, allTime: st.preset === 'all', now: nowIn(s.timezone, today) }, questionsSupported);
  } catch (e) {
    if (!(e instanceof Asked)) throw e;
    if (seq !== loadSeq || session !== s) return;
    const r = e.refusal;
    if (questionsSupported && noRoute(r)) {
      questionsSupported = false; // an older service: GET /metrics alone, no filters
      return load(projectChanged);
    }
    if (compareSupported && r.status === 400 && /compare/i.test(r.message)) {
      compareSupported = false;
      document.getElementById('compare')?.parentElement?.remove();
      return load(projectChanged);
    }
    document.getElementById('main')?.removeAttribute('aria-busy');
    return refused(r, again);
  }
  if (seq !== loadSeq || session !== s) return;
  document.getElementById('main')?.removeAttribute('aria-busy');
  clearProblem();
  if (projectChanged) document.getElementById('live')?.remove(); // another project's visitors must not linger
  render(f, today, { from: f.from, to: f.to });
  byId('loading').textContent = `Showing ${rangeLabel(f.from, f.to)}${st.filters.length ? `, filtered by ${st.filters.map(said).join(' and ')}` : ''}.`;
  if (projectChanged) startLive(() => session && { key: session.key, projectId: session.admin ? session.projectId : undefined });
}

/** Today and the time now in the project's timezone (a range ending today is still running). */
function nowIn(timeZone: string | undefined, today: string): { today: string; time: string } | undefined {
  const time = timeZone ? timeIn(timeZone) : undefined;
  return time === undefined ? undefined : { today, time };
}

function said(f: ViewFilter): string {
  return `${noun(f.dimension)} ${f.value}`;
}

/** A project near or over its monthly allowance says so: its new events are being refused (429 quota_exceeded). */
async function allowance(s: SignedIn, today: string): Promise<void> {
  const quota = s.projects?.find((p) => p.id === s.projectId)?.monthly_quota;
  const projectId = s.projectId;
  if (!quota) return;
  const r = await get<Metrics>('metrics', s.key, { from: `${today.slice(0, 8)}01`, to: today, projectId: s.admin ? s.projectId : undefined });
  const el = document.getElementById('quota');
  if (!el || !r.ok || session !== s || s.projectId !== projectId) return;
  // The allowance counts every stored event, bots included.
  const used = Object.values(r.value.events).reduce((a, b) => a + b, 0) + (r.value.bots ?? 0);
  if (used < quota * QUOTA_WARN_SHARE) return void (el.hidden = true);
  const y = Number(today.slice(0, 4));
  const m = Number(today.slice(5, 7));
  const reset = day(`${m === 12 ? y + 1 : y}-${String((m % 12) + 1).padStart(2, '0')}-01`, true);
  el.textContent =
    used >= quota
      ? `This project is over its monthly allowance: ${count(used)} of ${count(quota)} events this month. New events are refused until ${reset}.`
      : `This project has used ${count(used)} of its ${count(quota)} events this month; new events are refused from ${count(quota)} until ${reset}.`;
  el.hidden = false;
}

function addFilter(dimension: string, value: string): void {
  setView({ filters: withFilter(view().filters, { dimension, value }) });
  void load();
}

function removeFilter(dimension: string | undefined): void {
  setView({ filters: dimension === undefined ? [] : view().filters.filter((f) => f.dimension !== dimension) });
  void load();
  byId('title').focus(); // the chip that had focus is gone
}

function chips(filters: ViewFilter[]): HTMLElement {
  return h(
    'div',
    { class: 'chips', id: 'filters' },
    h('span', { class: 'chips-label', id: 'filters-label' }, 'Filtered by'),
    h(
      'ul',
      { 'aria-labelledby': 'filters-label' },
      ...filters.map((f) =>
        h('li', { class: 'chip', 'data-dimension': f.dimension }, h('span', {}, `${noun(f.dimension)} is `, h('b', {}, f.value)), h('button', { type: 'button', class: 'quiet small', 'aria-label': `Remove filter ${said(f)}`, onclick: () => removeFilter(f.dimension) }, '✕')),
      ),
    ),
    filters.length > 1 ? h('button', { type: 'button', class: 'quiet small', onclick: () => removeFilter(undefined) }, 'Clear all') : null,
  );
}

function render(f: Figures, today: string, range: Range): void {
  const s = session!;
  const st = view();
  const from = document.getElementById('from') as HTMLInputElement | null;
  const to = document.getElementById('to') as HTMLInputElement | null;
  if (from && to) {
    from.value = f.from;
    to.value = f.to;
    from.max = today;
    to.max = today;
  }
  const context = byId('context');
  const compared = f.compare ? ` · compared with ${rangeLabel(f.compare.from, f.compare.to)}${f.compare.until ? ` until ${f.compare.until} (the same part of a period still running)` : ''}` : '';
  context.textContent = `${rangeLabel(f.from, f.to)}${compared} · times in ${f.timezone}`;
  if (!s.projects) byId('title').textContent = `Project ${f.projectId}`;

  const onFilter = f.questions ? addFilter : undefined;
  const live = document.getElementById('live') ?? liveTile();
  // realtime figures cannot follow filters: the tile says so while any is active
  markFiltered(live, st.filters.length > 0);
  const chart = h('div', { class: 'chart', id: 'chart', role: 'img' });
  const noData = f.totals.pageviews === 0 && f.tables.get('events')?.length === 0 && st.filters.length === 0;
  const flat = f.series.pageviews.every((v) => v === 0) && f.series.visitors.every((v) => v === 0);
  const per = { hour: 'hour', day: 'day', week: 'week', month: 'month' }[f.series.unit];
  const main = byId('main');
  destroyChart();
  const grid = h('div', { class: 'grid' }, ...cards(f, onFilter, f.questions ? (key) => { setView({ props: [...new Set([...st.props, key])] }); void load(); } : undefined));
  if (f.goals && s.projectId) {
    const canEdit = s.admin || s.key.startsWith('sk_');
    grid.append(goalsCard(f.goals, { key: s.key, projectId: s.projectId, canEdit, onFilter, changed: () => void load() }));
  }
  main.replaceChildren(
    st.filters.length ? chips(st.filters) : '',
    h('section', { 'aria-label': 'Overview' }, tiles(f, live)),
    h(
      'section',
      { class: 'card chart-card', 'aria-labelledby': 'chart-h' },
      h('div', { class: 'card-head' }, h('h2', { id: 'chart-h' }, `${firstLine(f)} and visitors per ${per}`)),
      flat ? h('p', { class: 'empty' }, `No ${firstLine(f).toLowerCase()} in this range yet.`) : chart,
      flat ? null : dailyTable(f),
    ),
    grid,
  );
  if (f.questions) main.append(funnelView(f, range, st.steps, st.filters));
  main.append(recent(f, Date.now(), st.filters.length > 0));
  if (noData) main.insertBefore(setupHint(f.projectId), main.children[2]!);
  if (!flat) drawChart(chart, f);
  shown = f;
}

function funnelView(f: Figures, range: Range, steps: string[], filters: ViewFilter[]): HTMLElement {
  const s = session!;
  const visitFilters = filters.filter((x) => VISIT_LEVEL.has(x.dimension));
  const card = funnelCard({
    steps,
    skipped: filters.filter((x) => !VISIT_LEVEL.has(x.dimension)).map(said),
    choices: {
      goals: (f.goals ?? []).map((g) => g.name),
      pages: (f.tables.get('pages') ?? []).slice(0, FUNNEL_CHOICES).map(([p]) => p).filter((p) => p !== '(other)'),
      events: (f.tables.get('events') ?? []).filter(([e]) => e !== 'page_view' && e !== '(other)').slice(0, FUNNEL_CHOICES).map(([e]) => e),
    },
    run(chosen) {
      setView({ steps: chosen });
      void ask(chosen);
    },
  });
  const ask = async (chosen: string[]) => {
    const seq = loadSeq;
    const r = await funnel(asker(s), range, chosen, visitFilters);
    if (seq !== loadSeq) return;
    card.show(r.ok ? r.value.steps : `The funnel could not be drawn: ${r.message}`);
  };
  if (steps.length >= 2) void ask(steps);
  return card.el;
}

/** The last figures drawn, so the chart can be redrawn in the other colour scheme and the CSV has its rows. */
let shown: Figures | undefined;
matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => {
  const chart = document.getElementById('chart');
  if (chart && shown) drawChart(chart, shown);
});

function setupHint(projectId: string): HTMLElement {
  const tag = `<script defer src="${location.origin}/script.js" data-key="pk_…" data-project="${projectId}"></script>`;
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
