import type { Figures } from './figures.ts';
import { TABLES } from './figures.ts';

/**
 * "Download CSV": the figures on screen (totals, then every table's rows) as one CSV file, one row per figure:
 * section, name, measure, value. Cells a spreadsheet would run as a formula are quoted with a leading apostrophe.
 */

function cell(v: string | number): string {
  let s = String(v);
  if (/^[=+\-@\t\r]/.test(s) && typeof v === 'string') s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export function toCsv(f: Figures, filters: string): string {
  const rows: Array<Array<string | number>> = [['section', 'name', 'measure', 'value']];
  rows.push(['range', `${f.from}..${f.to}`, 'timezone', f.timezone]);
  if (filters) rows.push(['filters', filters, '', '']);
  for (const [name, value] of Object.entries(f.totals)) if (value !== undefined) rows.push(['totals', name, name, value]);
  f.series.keys.forEach((k, i) => {
    rows.push([`chart:${f.series.unit}`, k, 'pageviews', f.series.pageviews[i]!]);
    rows.push([`chart:${f.series.unit}`, k, 'visitors', f.series.visitors[i]!]);
  });
  for (const t of TABLES) for (const [k, n] of f.tables.get(t.id) ?? []) rows.push([t.id, k, t.metric, n]);
  for (const [key, values] of f.props) for (const [k, n] of values) rows.push([`prop:${key}`, k, 'events', n]);
  for (const [currency, r] of Object.entries(f.revenue ?? {})) {
    rows.push(['revenue', currency, 'total', r.total]);
    rows.push(['revenue', currency, 'purchases', r.purchases]);
  }
  for (const g of f.goals ?? []) {
    rows.push(['goals', g.name, 'visitors', g.visitors]);
    rows.push(['goals', g.name, 'conversionRate', g.conversionRate]);
  }
  return rows.map((r) => r.map(cell).join(',')).join('\r\n') + '\r\n';
}

export function download(name: string, text: string): void {
  const url = URL.createObjectURL(new Blob([text], { type: 'text/csv;charset=utf-8' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 0);
}
