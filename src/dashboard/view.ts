import type { Realtime } from './api.ts';
import { type Child, h, uid } from './dom.ts';
import { type Figures, type GoalTotals, NONE, type Row, TABLES, type Unit } from './figures.ts';
import { daysBetween } from './ranges.ts';
import { ago, bucketLabel, capitalize, count, country, decimal, duration, hostOf, money, pathOf, share, timeIn } from './format.ts';

const UNIT_WORD: Record<Unit, string> = { hour: 'Hourly', day: 'Daily', week: 'Weekly', month: 'Monthly' };
const UNIT_HEAD: Record<Unit, string> = { hour: 'Hour', day: 'Day', week: 'Week of', month: 'Month' };

/** Builds the figures' DOM from the figures of a view. Every figure is text, so it can be read, copied and tested. */

/** Rows a table shows before "Show all". */
const TOP_ROWS = 10;
/** Recent events listed (GET /metrics gives at most 50). */
const RECENT_ROWS = 20;

// ------------------------------------------------------------------ tiles

type TileMetric = 'visitors' | 'visits' | 'pageviews' | 'viewsPerVisit' | 'bounceRate' | 'visitDuration';

interface TileSpec {
  metric: TileMetric;
  /** data-metric: the GET /metrics names for the four it has */
  id: string;
  label: string;
  format: (n: number) => string;
  /** changes are told in points (rates), not percent */
  points?: boolean;
  /** a lower figure is the better one */
  lowerIsBetter?: boolean;
}

const rate = (n: number) => `${n.toFixed(1)}%`;
const TILES: TileSpec[] = [
  { metric: 'visitors', id: 'users', label: 'Visitors', format: count },
  { metric: 'visits', id: 'sessions', label: 'Visits', format: count },
  { metric: 'pageviews', id: 'pageviews', label: 'Page views', format: count },
  { metric: 'viewsPerVisit', id: 'viewsPerVisit', label: 'Views per visit', format: decimal },
  { metric: 'bounceRate', id: 'bounceRate', label: 'Bounce rate', format: rate, points: true, lowerIsBetter: true },
  { metric: 'visitDuration', id: 'visitDuration', label: 'Visit duration', format: duration },
];

type GoalMetric = keyof GoalTotals;
/** Under a goal filter: the goal's figures (as Plausible shows a goal's view). */
const GOAL_TILES: Array<Omit<TileSpec, 'metric'> & { metric: GoalMetric }> = [
  { metric: 'visitors', id: 'convertedVisitors', label: 'Converted visitors', format: count },
  { metric: 'conversions', id: 'conversions', label: 'Conversions', format: count },
  { metric: 'conversionRate', id: 'conversionRate', label: 'Conversion rate', format: rate, points: true },
];

export function tiles(f: Figures, live: HTMLElement): HTMLElement {
  const goal = f.goal;
  const shown = goal
    ? [
        ...GOAL_TILES.map((t) => tile(t, f, goal[t.metric], f.compare?.goal?.[t.metric])),
        ...Object.entries(f.revenue ?? {}).map(([c, r]) => tile({ id: `revenue-${c}`, label: `Revenue (${c})`, format: (n) => money(n, c) }, f, r.total, undefined)),
      ]
    : TILES.filter((t) => f.totals[t.metric] !== undefined).map((t) => tile(t, f, f.totals[t.metric]!, f.compare?.totals[t.metric]));
  return h('ul', { class: 'tiles', 'aria-label': goal ? 'The goal\'s figures for the range' : 'Totals for the range' }, ...shown, live);
}

function tile(t: Omit<TileSpec, 'metric'>, f: Figures, now: number, before: number | undefined): HTMLElement {
  return h(
    'li',
    { class: 'tile', 'data-metric': t.id },
    h('span', { class: 'label' }, t.label),
    h('span', { class: 'value' }, t.format(now)),
    before !== undefined ? change(t, now, before, comparedWith(f)) : null,
  );
}

/** What the comparison range is, in words: the period just before, or the same days a year earlier. */
export function comparedWith(f: Pick<Figures, 'from' | 'compare'>): string {
  return f.compare && f.compare.to < f.from && daysBetween(f.compare.to, f.from) === 2 ? 'Previous period' : 'A year earlier';
}

function change(t: Omit<TileSpec, 'metric'>, a: number, b: number, against: string): HTMLElement {
  const previous = t.format(b);
  let text: string;
  let spoken: string;
  let direction: 'up' | 'down' | 'flat';
  if (t.points) {
    const diff = Math.round((a - b) * 10) / 10;
    direction = diff > 0 ? 'up' : diff < 0 ? 'down' : 'flat';
    text = `${Math.abs(diff).toLocaleString(undefined, { maximumFractionDigits: 1 })} pt`;
    spoken = `${direction === 'flat' ? 'unchanged' : `${direction} ${text.replace('pt', 'points')}`} against ${against.toLowerCase()} (${previous})`;
  } else if (b === 0) {
    direction = a > 0 ? 'up' : 'flat';
    text = a > 0 ? 'new' : '0%';
    spoken = a > 0 ? `none in ${against.toLowerCase()}` : 'none in either period';
  } else {
    const pct = Math.abs(Math.round(((a - b) / b) * 100));
    direction = a > b ? 'up' : a < b ? 'down' : 'flat';
    text = pct === 0 && a !== b ? '<1%' : `${pct.toLocaleString()}%`;
    spoken = `${direction === 'flat' ? 'unchanged' : `${direction} ${text}`} against ${against.toLowerCase()} (${previous})`;
  }
  const good = direction === 'flat' ? 'flat' : (direction === 'up') !== Boolean(t.lowerIsBetter) ? 'good' : 'bad';
  const arrow = direction === 'up' ? '▲' : direction === 'down' ? '▼' : '●';
  return h(
    'span',
    { class: `change ${good}`, title: `${against}: ${previous}` },
    h('span', { 'aria-hidden': 'true' }, `${arrow} ${text}`),
    h('span', { class: 'sr-only' }, spoken),
  );
}

/** The "right now" tile: visitors in the last 5 minutes and a 30-minute bar sparkline. */
export function liveTile(): HTMLElement {
  return h('li', { class: 'tile live', id: 'live', hidden: true, 'aria-live': 'polite' });
}

export function fillLive(el: HTMLElement, r: Realtime): void {
  const max = Math.max(1, ...r.perMinute);
  const spark = h('span', { class: 'spark', 'aria-hidden': 'true' });
  for (const v of r.perMinute) {
    const bar = h('span');
    bar.style.height = `${Math.max(4, (v / max) * 100)}%`;
    if (v === 0) bar.className = 'zero';
    spark.append(bar);
  }
  el.replaceChildren(
    h('span', { class: 'label' }, h('span', { class: 'dot', 'aria-hidden': 'true' }), 'Visitors now'),
    h('span', { class: 'live-row' }, h('span', { class: 'value' }, count(r.visitors)), spark),
    h('span', { class: 'sub' }, `${count(r.pageviews)} page views in 30 min`),
    h('span', { class: 'sub all-traffic' }, 'All traffic: filters do not apply'),
  );
  el.hidden = false;
}

/** The live tile under filters: its figures are the whole site's, and it says so (CSS shows the note). */
export function markFiltered(el: HTMLElement, filtered: boolean): void {
  el.classList.toggle('filtered', filtered);
}

// ------------------------------------------------------------------ breakdown tables

/** What a row does when activated: add the filter `is <dimension> <value>`; undefined when filters are not offered. */
export type OnFilter = ((dimension: string, value: string) => void) | undefined;

export interface Tab {
  /** data-table, for tests and styling */
  field: string;
  label: string;
  column: string;
  rows: Row[];
  /** the dimension a row filters by */
  dimension?: string;
  name?: (key: string) => Child;
  /** figures per row in another unit than count (revenue) */
  cells?: (key: string, n: number) => Child;
  /** in words, for the row's button: "page", "country" */
  noun?: string;
  empty?: string;
}

/** Not a value a visit or event has: the service's bucket for what it stopped counting. */
const OTHER = '(other)';

function countryName(code: string): Child {
  const name = country(code);
  return name === code ? code : h('span', {}, name, ' ', h('span', { class: 'code' }, code));
}

const COLUMN = { pageviews: 'Views', visits: 'Visits', events: 'Events' } as const;
const NOUN: Record<string, string> = {
  source: 'source', utmMedium: 'medium', utmCampaign: 'campaign', page: 'page', entryPage: 'entry page', exitPage: 'exit page',
  country: 'country', device: 'device', browser: 'browser', os: 'system', event: 'event', goal: 'goal',
};
export function noun(dimension: string): string {
  return NOUN[dimension] ?? (dimension.startsWith('prop:') ? `property ${dimension.slice(5)}` : dimension);
}

/** The cards under the chart, each with the tabs whose figures the answer carries. */
export function cards(f: Figures, onFilter: OnFilter, addProp: ((key: string) => void) | undefined): HTMLElement[] {
  const byCard = new Map<string, Tab[]>();
  for (const t of TABLES) {
    const rows = f.tables.get(t.id);
    if (!rows) continue;
    const tab: Tab = {
      field: t.id, label: t.label, column: COLUMN[t.metric], dimension: t.dimension,
      // Page views are the tiles and the chart; here they would only dwarf the events a site owner set up.
      rows: t.id === 'events' ? rows.filter(([name]) => name !== 'page_view') : rows,
      ...(t.id === 'countries' ? { name: countryName } : t.id === 'devices' ? { name: capitalize } : {}),
      ...(t.id === 'events' ? { empty: 'No custom events in this range.' } : {}),
    };
    byCard.set(t.card, [...(byCard.get(t.card) ?? []), tab]);
  }
  const out = [...byCard].map(([title, tabs]) => card(title, tabs, onFilter));
  if (f.revenue && Object.keys(f.revenue).length > 0) {
    const revenue = f.revenue;
    const rows = Object.entries(revenue).sort((a, b) => b[1].total - a[1].total).map(([c, r]): Row => [c, r.purchases]);
    out.push(card('Revenue', [{ field: 'revenue', label: 'Revenue', column: 'Purchases', rows, cells: (c, n) => h('span', {}, h('b', {}, money(revenue[c]?.total ?? 0, c)), ` · ${count(n)}`) }], undefined));
  }
  if (f.props.size > 0 || addProp) {
    const tabs = [...f.props].map(([key, rows]): Tab => ({ field: `props.${key}`, label: key, column: 'Events', rows, dimension: `prop:${key}` }));
    const c = tabs.length > 0 ? card('Properties', tabs, onFilter) : h('section', { class: 'card', 'aria-label': 'Properties' }, h('div', { class: 'card-head' }, h('h2', {}, 'Properties')), h('p', { class: 'empty' }, 'No property shown yet.'));
    if (addProp) c.append(propForm(addProp));
    out.push(c);
  }
  return out;
}

/** Any eventParams key can be shown: no declaration needed, POST /query reads them all. */
function propForm(add: (key: string) => void): HTMLElement {
  const input = h('input', { type: 'text', id: uid('prop'), 'aria-label': 'Property key', placeholder: 'property key', maxlength: 40, spellcheck: 'false' });
  const form = h('form', { class: 'inline-form' }, input, h('button', { type: 'submit' }, 'Show property'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const key = input.value.trim();
    if (key) add(key);
  });
  return form;
}

export function card(title: string, tabs: Tab[], onFilter: OnFilter): HTMLElement {
  const heading = uid('h');
  const head = h('div', { class: 'card-head' }, h('h2', { id: heading }, title));
  const section = h('section', { class: 'card', 'aria-labelledby': heading, 'data-card': title }, head);
  const panels = tabs.map((t) => h('div', { class: 'panel', role: tabs.length > 1 ? 'tabpanel' : undefined, id: uid('panel') }, table(t, onFilter)));
  if (tabs.length === 1 && tabs[0]!.label !== title) {
    // One tab has no tab list: its name (a property's key) is said above its rows instead.
    head.append(h('span', { class: 'tab-name', 'data-tab-name': '' }, tabs[0]!.label));
  }
  if (tabs.length > 1) {
    const list = h('div', { class: 'tabs', role: 'tablist', 'aria-label': `${title} by` });
    const buttons = tabs.map((t, i) =>
      h('button', { type: 'button', role: 'tab', id: uid('tab'), 'aria-controls': panels[i]!.id, 'aria-selected': String(i === 0), tabindex: i === 0 ? 0 : -1 }, t.label),
    );
    const select = (i: number, focus: boolean) => {
      buttons.forEach((b, j) => {
        b.setAttribute('aria-selected', String(i === j));
        b.tabIndex = i === j ? 0 : -1;
        panels[j]!.hidden = i !== j;
      });
      if (focus) buttons[i]!.focus();
    };
    buttons.forEach((b, i) => {
      panels[i]!.setAttribute('aria-labelledby', b.id);
      b.addEventListener('click', () => select(i, false));
      b.addEventListener('keydown', (e) => {
        const step = e.key === 'ArrowRight' ? 1 : e.key === 'ArrowLeft' ? -1 : 0;
        if (step) select((i + step + tabs.length) % tabs.length, true);
        else if (e.key === 'Home') select(0, true);
        else if (e.key === 'End') select(tabs.length - 1, true);
        else return;
        e.preventDefault();
      });
      list.append(b);
    });
    head.append(list);
    select(0, false);
  }
  section.append(...panels);
  return section;
}

export function table(t: Tab, onFilter: OnFilter): HTMLElement {
  if (t.rows.length === 0) return h('p', { class: 'empty', 'data-table': t.field }, t.empty ?? 'Nothing in this range.');
  const total = t.rows.reduce((s, [, n]) => s + n, 0);
  const max = Math.max(...t.rows.map(([, n]) => n));
  const body = h('tbody');
  t.rows.forEach(([key, n], i) => {
    const bar = h('span', { class: 'bar', 'aria-hidden': 'true' });
    bar.style.width = `${max > 0 ? (n / max) * 100 : 0}%`;
    const shownName = t.name ? t.name(key) : key;
    const dim = t.dimension;
    const name =
      onFilter && dim && key !== OTHER && !(key === NONE && dim.startsWith('prop:'))
        ? h('button', { type: 'button', class: 'name filter', title: `Show only ${noun(dim)} ${key}`, onclick: () => onFilter(dim, key) }, h('span', { class: 'sr-only' }, `Filter by ${noun(dim)}: `), shownName)
        : h('span', { class: 'name', title: key }, shownName);
    body.append(
      h(
        'tr',
        { 'data-key': key, hidden: i >= TOP_ROWS },
        h('th', { scope: 'row' }, bar, name),
        h('td', { class: 'num' }, t.cells ? t.cells(key, n) : count(n)),
        h('td', { class: 'num share' }, t.cells ? '' : share(n, total)),
      ),
    );
  });
  const el = h(
    'table',
    { class: 'bars', 'data-table': t.field },
    h('caption', { class: 'sr-only' }, `${t.label}, ${t.column.toLowerCase()}`),
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, h('span', { class: 'sr-only' }, t.label)), h('th', { scope: 'col', class: 'num' }, t.column), h('th', { scope: 'col', class: 'num share' }, h('span', { class: 'sr-only' }, 'Share')))),
    body,
  );
  if (t.rows.length <= TOP_ROWS) return el;
  const more = h('button', { type: 'button', class: 'more', 'aria-expanded': 'false' }, `Show all ${count(t.rows.length)}`);
  more.addEventListener('click', () => {
    const open = more.getAttribute('aria-expanded') !== 'true';
    body.querySelectorAll<HTMLElement>('tr').forEach((tr, i) => (tr.hidden = !open && i >= TOP_ROWS));
    more.setAttribute('aria-expanded', String(open));
    more.textContent = open ? 'Show top 10' : `Show all ${count(t.rows.length)}`;
  });
  return h('div', {}, el, more);
}

// ------------------------------------------------------------------ daily and recent

export function dailyTable(f: Figures): HTMLElement {
  const s = f.series;
  return h(
    'details',
    { class: 'daily' },
    h('summary', {}, `${UNIT_WORD[s.unit]} figures as a table`),
    h(
      'div',
      { class: 'scroll', tabindex: 0, role: 'region', 'aria-label': `${UNIT_WORD[s.unit]} figures` },
      h(
        'table',
        { 'data-table': 'daily', 'data-unit': s.unit },
        h('thead', {}, h('tr', {}, ...[UNIT_HEAD[s.unit], 'Visitors', s.conversions ? 'Conversions' : 'Page views'].map((c, i) => h('th', { scope: 'col', class: i ? 'num' : undefined }, c)))),
        h('tbody', {}, ...s.keys.map((k, i) => h('tr', {}, h('th', { scope: 'row' }, bucketLabel(k, s.unit, true)), h('td', { class: 'num' }, count(s.visitors[i]!)), h('td', { class: 'num' }, count(s.pageviews[i]!))))),
      ),
    ),
  );
}

export function recent(m: Pick<Figures, 'recent' | 'timezone'>, now: number, filtered = false): HTMLElement {
  const heading = uid('h');
  // Newest first by event time (the service lists them in the order they arrived).
  const rows = [...m.recent].sort((a, b) => b.ts - a.ts).slice(0, RECENT_ROWS);
  const body =
    rows.length === 0
      ? h('p', { class: 'empty' }, 'No events in this range.')
      : h(
          'div',
          { class: 'scroll', tabindex: 0, role: 'region', 'aria-labelledby': heading },
          h(
            'table',
            { class: 'recent', 'data-table': 'recentEvents' },
            h('thead', {}, h('tr', {}, ...['When', 'Event', 'Page', 'Referrer', 'Country', 'Device'].map((c) => h('th', { scope: 'col' }, c)))),
            h(
              'tbody',
              {},
              ...rows.map((e) =>
                h(
                  'tr',
                  {},
                  h('td', { title: timeIn(e.ts, m.timezone) }, ago(e.ts, now)),
                  h('td', {}, e.event),
                  // Custom events sent without a url have no page.
                  h('td', { class: 'path', title: e.url }, e.url ? pathOf(e.url) : '—'),
                  h('td', { title: e.referrer }, e.referrer ? hostOf(e.referrer) : '—'),
                  h('td', { title: e.country }, country(e.country)),
                  h('td', {}, capitalize(e.device)),
                ),
              ),
            ),
          ),
        );
  return h('section', { class: 'card wide', 'aria-labelledby': heading }, h('div', { class: 'card-head' }, h('h2', { id: heading }, filtered ? 'Recent events (all, unfiltered)' : 'Recent events')), body);
}
