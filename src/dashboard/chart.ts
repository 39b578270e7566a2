import uPlot from 'uplot';
import { h } from './dom.ts';
import type { Figures, Series } from './figures.ts';
import { bucketLabel, bucketTime, count, rangeLabel } from './format.ts';
import { nowKey, tickIndexes } from './ranges.ts';
import { comparedWith } from './view.ts';

/**
 * The time chart: page views (filled) and visitors per hour, day, week or month, with the comparison period's page
 * views dashed behind them. uPlot draws on a canvas, so the chart's container carries a text summary for screen
 * readers (and the x labels in data-ticks), and the same figures are in the table under it.
 */

const HEIGHT_PX = 240;
/** Half of the widest x label ("Nov 2026", "Mon, Nov 23"): the last label is centred on the right edge. */
const LAST_LABEL_PAD_PX = 32;
/** Below this width the y axis gets less room and the legend wraps. */
const NARROW_PX = 560;
/** Room one x label needs, so labels never overlap. */
const LABEL_PX = { hour: 44, day: 64, week: 64, month: 76 } as const;

let plot: uPlot | undefined;
let observer: ResizeObserver | undefined;

function cssVar(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

/**
 * Our own legend instead of uPlot's: at rest it shows the range's totals (the tiles' figures), under the cursor
 * that bucket's figures.
 */
function legend(f: Figures, colors: string[]): { el: HTMLElement; show(i: number | null | undefined): void } {
  const s = f.series;
  const labels = [firstLine(f), 'Visitors', comparedWith(f)];
  const values = labels.map(() => h('b'));
  const when = h('span', { class: 'when' });
  const items = labels.slice(0, f.compare ? 3 : 2).map((label, i) => {
    const swatch = h('span', { class: `swatch${i === 2 ? ' dashed' : ''}` });
    swatch.style.borderColor = colors[i]!;
    return h('span', { class: 'item', 'data-series': String(i) }, swatch, `${label} `, values[i]);
  });
  const el = h('div', { class: 'legend', 'aria-hidden': 'true' }, when, ...items);
  const show = (i: number | null | undefined) => {
    const key = i == null ? undefined : s.keys[i];
    if (key === undefined) {
      when.textContent = rangeLabel(f.from, f.to);
      values[0]!.textContent = count(s.conversions ? (f.goal?.conversions ?? 0) : f.totals.pageviews);
      values[1]!.textContent = count(s.conversions ? (f.goal?.visitors ?? 0) : f.totals.visitors);
      values[2]!.textContent = f.compare ? count(s.conversions ? (f.compare.goal?.conversions ?? 0) : f.compare.totals.pageviews) : '';
      return;
    }
    when.textContent = bucketLabel(key, s.unit, true);
    values[0]!.textContent = count(s.pageviews[i!]!);
    values[1]!.textContent = count(s.visitors[i!]!);
    const p = f.compare?.series;
    const pk = p?.keys[i!];
    values[2]!.textContent = p && pk !== undefined ? `${count(p.pageviews[i!]!)} (${bucketLabel(pk, p.unit)})` : '–';
  };
  show(null);
  return { el, show };
}

/** The chart's first line: page views, or a goal filter's conversions. */
export function firstLine(f: Pick<Figures, 'series'>): string {
  return f.series.conversions ? 'Conversions' : 'Page views';
}

export function drawChart(host: HTMLElement, f: Figures): void {
  destroyChart();
  host.replaceChildren();
  const s = f.series;
  const xs = s.keys.map((k) => bucketTime(k) / 1000);
  const previous = f.compare?.series;
  // nothing is drawn after now: the rest of today's hours are not zeros yet
  const last = nowKey(s.unit, f.timezone);
  const upToNow = (values: number[]) => values.map((v, i) => (last !== undefined && s.keys[i]! > last ? null : v));
  // a running period's previous one stops at the same elapsed part too
  const before = previous && s.keys.map((_, i) => (last !== undefined && s.keys[i]! > last && f.compare?.until ? null : (previous.pageviews[i] ?? null)));
  const data: uPlot.AlignedData = [xs, upToNow(s.pageviews), upToNow(s.visitors), ...(before ? [before] : [])];
  const accent = cssVar('--accent');
  const second = cssVar('--accent-2');
  const muted = cssVar('--muted');
  const grid = cssVar('--grid');
  const width = Math.max(200, host.clientWidth);
  const narrow = width < NARROW_PX;
  const axis = { stroke: muted, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 }, font: '12px system-ui, sans-serif' };
  const key = legend(f, [accent, second, muted]);
  host.append(key.el);
  // The x labels are the buckets themselves, thinned to fit: uPlot's own time splits would fall between days.
  const ticks = (w: number) => tickIndexes(xs.length, Math.floor((w - 60) / LABEL_PX[s.unit]));
  const labelOf = new Map(xs.map((x, i) => [x, bucketLabel(s.keys[i]!, s.unit)]));
  const opts: uPlot.Options = {
    width,
    height: HEIGHT_PX,
    // room on the right for the last x label, centred on the last bucket ("Nov 2026" was cut to "Nov 202")
    padding: [12, LAST_LABEL_PAD_PX, 0, 0],
    // Buckets are wall-clock times in the project's timezone written as UTC: show them as such, whatever the browser's zone.
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
    cursor: { points: { size: 7 }, drag: { x: false, y: false } },
    legend: { show: false },
    hooks: { setCursor: [(u) => key.show(u.cursor.idx)] },
    scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(4, max * 1.1)] } },
    series: [
      {},
      { label: firstLine(f), stroke: accent, width: 2, fill: `${accent}22`, points: { show: xs.length <= 2 } },
      { label: 'Visitors', stroke: second, width: 2, points: { show: xs.length <= 2 } },
      ...(previous ? [{ label: comparedWith(f), stroke: muted, width: 1.5, dash: [5, 4], points: { show: false } }] : []),
    ],
    axes: [
      { ...axis, splits: (u) => ticks(u.width).map((i) => xs[i]!), values: (_u, splits) => splits.map((x) => labelOf.get(x) ?? '') },
      { ...axis, size: narrow ? 44 : 56, values: (_u, splits) => splits.map((v) => count(v)) },
    ],
  };
  host.setAttribute('aria-label', summary(f.series, f));
  host.dataset['ticks'] = JSON.stringify(ticks(width).map((i) => labelOf.get(xs[i]!)));
  host.dataset['unit'] = s.unit;
  host.dataset['drawn'] = String(upToNow(s.pageviews).filter((v) => v !== null).length);
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

function summary(s: Series, f: Figures): string {
  let peak = 0;
  s.pageviews.forEach((v, i) => (v > (s.pageviews[peak] ?? 0) ? (peak = i) : 0));
  const busiest = s.keys[peak] === undefined ? '' : `, the busiest ${s.unit} ${bucketLabel(s.keys[peak]!, s.unit, true)} with ${count(s.pageviews[peak]!)}`;
  const what = firstLine(f).toLowerCase();
  const total = s.conversions ? (f.goal?.conversions ?? 0) : f.totals.pageviews;
  return `Chart of ${what} and visitors per ${s.unit} for ${rangeLabel(f.from, f.to)}: ${count(total)} ${what} in all${busiest}.`;
}
