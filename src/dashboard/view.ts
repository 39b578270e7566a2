import type { Breakdown, Metrics, Realtime } from './api.ts';
import { type Child, h, uid } from './dom.ts';
import { daysBetween } from './ranges.ts';
import { ago, capitalize, count, country, day, hostOf, money, pathOf, share, timeIn } from './format.ts';

/** Builds the figures' DOM from a GET /metrics answer. Every figure is text, so it can be read, copied and tested. */

/** Rows a table shows before "Show all". */
const TOP_ROWS = 10;
/** Recent events listed (GET /metrics gives at most 50). */
const RECENT_ROWS = 20;

// ------------------------------------------------------------------ tiles

interface TileSpec {
  metric: 'users' | 'sessions' | 'pageviews' | 'bounceRate';
  label: string;
  /** a lower figure is the better one */
  lowerIsBetter?: boolean;
}

const TILES: TileSpec[] = [
  { metric: 'users', label: 'Visitors' },
  { metric: 'sessions', label: 'Sessions' },
  { metric: 'pageviews', label: 'Page views' },
  { metric: 'bounceRate', label: 'Bounce rate', lowerIsBetter: true },
];

export function tiles(m: Metrics, live: HTMLElement): HTMLElement {
  return h('ul', { class: 'tiles', 'aria-label': 'Totals for the range' }, ...TILES.map((t) => tile(t, m)), live);
}

function tile(t: TileSpec, m: Metrics): HTMLElement {
  const isRate = t.metric === 'bounceRate';
  const now = m[t.metric];
  const text = isRate ? String(now) : count(now as number);
  return h(
    'li',
    { class: 'tile', 'data-metric': t.metric },
    h('span', { class: 'label' }, t.label),
    h('span', { class: 'value' }, text),
    m.compare ? change(t, now, m.compare[t.metric], comparedWith(m)) : null,
  );
}

/** What the comparison range is, in words: the period just before, or the same days a year earlier. */
export function comparedWith(m: Metrics): string {
  return m.compare && m.compare.to < m.from && daysBetween(m.compare.to, m.from) === 2 ? 'Previous period' : 'A year earlier';
}

function change(t: TileSpec, now: number | string, before: number | string, against: string): HTMLElement {
  const isRate = t.metric === 'bounceRate';
  const a = isRate ? parseFloat(String(now)) : (now as number);
  const b = isRate ? parseFloat(String(before)) : (before as number);
  const previous = isRate ? String(before) : count(b);
  let text: string;
  let spoken: string;
  let direction: 'up' | 'down' | 'flat';
  if (isRate) {
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
  );
  el.hidden = false;
}

// ------------------------------------------------------------------ breakdown tables

interface Tab {
  /** the field of GET /metrics, used as data-table for tests and styling */
  field: string;
  label: string;
  column: string;
  rows: Array<[string, number]>;
  name?: (key: string) => Child;
  /** figures per row in another unit than count (revenue) */
  cells?: (key: string, n: number) => Child;
}

function entries(b: Breakdown | undefined): Array<[string, number]> {
  return Object.entries(b ?? {}).sort((x, y) => y[1] - x[1]);
}

function countryName(code: string): Child {
  const name = country(code);
  return name === code ? code : h('span', {}, name, ' ', h('span', { class: 'code' }, code));
}

/** The cards under the chart, each with the tabs whose figures the answer carries. */
export function cards(m: Metrics): HTMLElement[] {
  const maybe = (field: keyof Metrics, label: string, column: string, extra: Partial<Tab> = {}): Tab[] =>
    m[field] === undefined ? [] : [{ field, label, column, rows: entries(m[field] as Breakdown), ...extra }];
  const out = [
    card('Sources', [...maybe('trafficSources', 'Sources', 'Sessions'), ...maybe('utmMediums', 'Mediums', 'Sessions'), ...maybe('utmCampaigns', 'Campaigns', 'Sessions')]),
    card('Pages', [...maybe('pages', 'Top pages', 'Views'), ...maybe('entryPages', 'Entry pages', 'Sessions')]),
    card('Countries', maybe('countries', 'Countries', 'Sessions', { name: countryName })),
    card('Devices', [
      ...maybe('devices', 'Devices', 'Sessions', { name: capitalize }),
      ...maybe('browsers', 'Browsers', 'Sessions'),
      ...maybe('operatingSystems', 'Systems', 'Sessions'),
    ]),
    // Page views are the tiles and the chart; here they would only dwarf the events a site owner set up.
    card('Events', [{ field: 'events', label: 'Events', column: 'Count', rows: entries(m.events).filter(([name]) => name !== 'page_view') }]),
  ];
  if (m.revenue && Object.keys(m.revenue).length > 0) {
    const revenue = m.revenue;
    const rows = Object.entries(revenue).sort((a, b) => b[1].total - a[1].total).map(([c, r]): [string, number] => [c, r.purchases]);
    out.push(card('Revenue', [{ field: 'revenue', label: 'Revenue', column: 'Purchases', rows, cells: (c, n) => h('span', {}, h('b', {}, money(revenue[c]?.total ?? 0, c)), ` · ${count(n)}`) }]));
  }
  if (m.props && Object.keys(m.props).length > 0) {
    out.push(card('Properties', Object.entries(m.props).map(([key, values]) => ({ field: `props.${key}`, label: key, column: 'Events', rows: entries(values) }))));
  }
  return out.filter((c): c is HTMLElement => c !== null);
}

function card(title: string, tabs: Tab[]): HTMLElement | null {
  if (tabs.length === 0) return null;
  const heading = uid('h');
  const head = h('div', { class: 'card-head' }, h('h2', { id: heading }, title));
  const section = h('section', { class: 'card', 'aria-labelledby': heading }, head);
  const panels = tabs.map((t) => h('div', { class: 'panel', role: tabs.length > 1 ? 'tabpanel' : undefined, id: uid('panel') }, table(t)));
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

function table(t: Tab): HTMLElement {
  if (t.rows.length === 0) return h('p', { class: 'empty', 'data-table': t.field }, t.field === 'events' ? 'No custom events in this range.' : 'Nothing in this range.');
  const total = t.rows.reduce((s, [, n]) => s + n, 0);
  const max = t.rows[0]![1];
  const body = h('tbody');
  t.rows.forEach(([key, n], i) => {
    const bar = h('span', { class: 'bar', 'aria-hidden': 'true' });
    bar.style.width = `${max > 0 ? (n / max) * 100 : 0}%`;
    const row = h(
      'tr',
      { 'data-key': key, hidden: i >= TOP_ROWS },
      h('th', { scope: 'row' }, bar, h('span', { class: 'name', title: key }, t.name ? t.name(key) : key)),
      h('td', { class: 'num' }, t.cells ? t.cells(key, n) : count(n)),
      h('td', { class: 'num share' }, t.cells ? '' : share(n, total)),
    );
    body.append(row);
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

export function dailyTable(m: Metrics): HTMLElement {
  return h(
    'details',
    { class: 'daily' },
    h('summary', {}, 'Daily figures as a table'),
    h(
      'div',
      { class: 'scroll', tabindex: 0, role: 'region', 'aria-label': 'Daily figures' },
      h(
        'table',
        { 'data-table': 'daily' },
        h('thead', {}, h('tr', {}, ...['Day', 'Visitors', 'Sessions', 'Page views', 'Bounce rate'].map((c, i) => h('th', { scope: 'col', class: i ? 'num' : undefined }, c)))),
        h('tbody', {}, ...m.daily.map((d) => h('tr', {}, h('th', { scope: 'row' }, day(d.date, true)), h('td', { class: 'num' }, count(d.users)), h('td', { class: 'num' }, count(d.sessions)), h('td', { class: 'num' }, count(d.pageviews)), h('td', { class: 'num' }, d.bounceRate)))),
      ),
    ),
  );
}

export function recent(m: Metrics, now: number): HTMLElement {
  const heading = uid('h');
  // Newest first by event time (the service lists them in the order they arrived).
  const rows = [...m.recentEvents].sort((a, b) => b.ts - a.ts).slice(0, RECENT_ROWS);
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
                  h('td', { class: 'path', title: e.url }, pathOf(e.url)),
                  h('td', { title: e.referrer }, e.referrer ? hostOf(e.referrer) : '—'),
                  h('td', { title: e.country }, country(e.country)),
                  h('td', {}, capitalize(e.device)),
                ),
              ),
            ),
          ),
        );
  return h('section', { class: 'card wide', 'aria-labelledby': heading }, h('div', { class: 'card-head' }, h('h2', { id: heading }, 'Recent events')), body);
}
