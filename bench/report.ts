/** One line of the results table (and of bench/results/latest.json). */
export interface Row {
  id: string;
  what: string;
  /** formatted figure */
  value: string;
  /** the figure as a number, for tools reading latest.json */
  num?: number;
  /** result ÷ the floor or reference named in `ref` */
  ratio?: number;
  ref?: string;
  goal?: string;
  met?: boolean;
  note?: string;
}

/** A markdown table: readable in a terminal, pasteable into the README. */
export function renderTable(rows: Row[]): string {
  const head = ['Measurement', 'Result', 'vs floor', 'Goal', 'Met'];
  const body = rows.map((r) => [
    r.what,
    r.value,
    r.ratio !== undefined && Number.isFinite(r.ratio) ? `${(r.ratio * 100).toFixed(0)} % of ${r.ref}` : '',
    r.goal ?? '',
    r.met === undefined ? '' : r.met ? 'yes' : 'NO',
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(head), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...body.map(line)].join('\n');
}
