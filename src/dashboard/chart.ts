import uPlot from 'uplot';
import type { Metrics } from './api.ts';
import { h } from './dom.ts';
import { count, day, rangeLabel } from './format.ts';
import { parseDay } from './ranges.ts';
import { comparedWith } from './view.ts';

/**
 * The time chart: page views (filled) and visitors per day, with the previous period's page views dashed behind
 * them when the answer carries a comparison. uPlot draws on a canvas, so the chart's container carries a text
 * summary for screen readers, and the same figures are in the "daily figures" table under it.
 */

const HEIGHT_PX = 240;
/** Below this width the y axis gets less room and the legend wraps. */
const NARROW_PX = 560;

let plot: uPlot | undefined;
let observer: ResizeObserver | undefined;

function cssVar(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

/**
 * Our own legend instead of uPlot's: at rest it shows the range's totals, under the cursor that day's figures.
 * The series are page views, visitors and (with a comparison) the previous period's page views.
 */
function legend(m: Metrics, colors: string[]): { el: HTMLElement; show(i: number | null | undefined): void } {
  const labels = ['Page views', 'Visitors', comparedWith(m)];
  const values = labels.map(() => h('b'));
  const when = h('span', { class: 'when' });
  const items = labels.slice(0, m.compare ? 3 : 2).map((label, i) => {
    const swatch = h('span', { class: `swatch${i === 2 ? ' dashed' : ''}` });
    swatch.style.borderColor = colors[i]!;
    return h('span', { class: 'item' }, swatch, `${label} `, values[i]);
  });
  const el = h('div', { class: 'legend', 'aria-hidden': 'true' }, when, ...items);
  const show = (i: number | null | undefined) => {
    const d = i == null ? undefined : m.daily[i];
    if (!d) {
      when.textContent = rangeLabel(m.from, m.to);
      values[0]!.textContent = count(m.pageviews);
      values[1]!.textContent = count(m.users);
      values[2]!.textContent = m.compare ? count(m.compare.pageviews) : '';
      return;
    }
    when.textContent = day(d.date, true);
    values[0]!.textContent = count(d.pageviews);
    values[1]!.textContent = count(d.users);
    const p = m.compare?.daily[i!];
    values[2]!.textContent = p ? `${count(p.pageviews)} (${day(p.date)})` : '–';
  };
  show(null);
  return { el, show };
}

export function drawChart(host: HTMLElement, m: Metrics): void {
  destroyChart();
  host.replaceChildren();
  const days = m.daily.map((d) => d.date);
  const xs = days.map((d) => parseDay(d) / 1000);
  const previous = m.compare?.daily;
  const data: uPlot.AlignedData = [
    xs,
    m.daily.map((d) => d.pageviews),
    m.daily.map((d) => d.users),
    ...(previous ? [days.map((_, i) => previous[i]?.pageviews ?? null)] : []),
  ];
  const accent = cssVar('--accent');
  const second = cssVar('--accent-2');
  const muted = cssVar('--muted');
  const grid = cssVar('--grid');
  const width = Math.max(200, host.clientWidth);
  const narrow = width < NARROW_PX;
  const axis = { stroke: muted, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 }, font: '12px system-ui, sans-serif' };
  const key = legend(m, [accent, second, muted]);
  host.append(key.el);
  const opts: uPlot.Options = {
    width,
    height: HEIGHT_PX,
    // Days are UTC midnights of calendar days in the project's timezone: show them as such, whatever the browser's zone.
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
    cursor: { points: { size: 7 }, drag: { x: false, y: false } },
    legend: { show: false },
    hooks: { setCursor: [(u) => key.show(u.cursor.idx)] },
    scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(4, max * 1.1)] } },
    series: [
      {},
      { label: 'Page views', stroke: accent, width: 2, fill: `${accent}22`, points: { show: days.length <= 2 } },
      { label: 'Visitors', stroke: second, width: 2, points: { show: days.length <= 2 } },
      ...(previous ? [{ label: comparedWith(m), stroke: muted, width: 1.5, dash: [5, 4], points: { show: false } }] : []),
    ],
    axes: [
      { ...axis, values: (_u, splits) => splits.map((s) => day(new Date(s * 1000).toISOString().slice(0, 10))) },
      { ...axis, size: narrow ? 44 : 56, values: (_u, splits) => splits.map((s) => count(s)) },
    ],
  };
  host.setAttribute('aria-label', summary(m));
  plot = new uPlot(opts, data, host);
  observer = new ResizeObserver(() => {
    if (plot && host.clientWidth > 0 && Math.abs(host.clientWidth - plot.width) > 1) plot.setSize({ width: host.clientWidth, height: HEIGHT_PX });
  });
  observer.observe(host);
}

export function destroyChart(): void {
  observer?.disconnect();
  observer = undefined;
  plot?.destroy();
  plot = undefined;
}

function summary(m: Metrics): string {
  const peak = m.daily.reduce((best, d) => (d.pageviews > best.pageviews ? d : best), m.daily[0] ?? { date: m.from, pageviews: 0 });
  return `Chart of page views and visitors per day from ${day(m.from, true)} to ${day(m.to, true)}: ${count(m.pageviews)} page views in all, the busiest day ${day(peak.date, true)} with ${count(peak.pageviews)}.`;
}
