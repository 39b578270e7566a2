/**
 * Turns a raw-event export of Umami, Plausible CE or Google Analytics 4 (BigQuery) into the NDJSON lines that
 * `analytics import` reads (README: "Moving from Plausible, Umami or Google Analytics"):
 *
 *   npx tsx examples/convert-to-import.ts umami website_event.csv > events.ndjson
 *   npx tsx examples/convert-to-import.ts plausible events_v2.csv | npx analytics import --project ID -
 *   npx tsx examples/convert-to-import.ts ga4 ga4.ndjson > events.ndjson
 *
 * Input: CSV with a header row, or NDJSON (one object a line). Empty and null values are left out.
 */
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { parse } from 'csv-parse';

type Row = Record<string, unknown>;
type Event = Record<string, unknown>;

const str = (v: unknown): string => (v === null || v === undefined ? '' : String(v));

/** "2024-01-01 10:00:00[.123]" (UTC, no zone, as SQL tools write it) -> ISO-8601; numbers stay ms. */
function time(v: unknown): string | number {
  if (typeof v === 'number') return v;
  const s = str(v).trim();
  if (/^\d+$/.test(s)) return Number(s);
  const m = /^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)(?: ?UTC)?$/.exec(s);
  return m ? `${m[1]}T${m[2]}Z` : s;
}

const MAPPINGS: Record<string, (r: Row) => Event> = {
  /** Umami: the website_event table (Settings → Data → Export, or SELECT * FROM website_event as CSV). */
  umami: (r) => ({
    event: str(r.event_type) === '2' ? str(r.event_name) : 'page_view',
    timestamp: time(r.created_at),
    url: `https://${str(r.hostname)}${str(r.url_path) || '/'}${str(r.url_query) ? `?${str(r.url_query)}` : ''}`,
    referrer: str(r.referrer_domain) ? `https://${str(r.referrer_domain)}${str(r.referrer_path)}` : '',
    sessionId: str(r.visit_id) || str(r.session_id),
    fingerprint: str(r.session_id),
    eventId: str(r.event_id),
    country: str(r.country),
    device: str(r.device),
    browser: str(r.browser),
    os: str(r.os),
  }),
  /** Plausible CE: SELECT * FROM events_v2 ... FORMAT CSVWithNames (clickhouse-client). */
  plausible: (r) => ({
    event: str(r.name) === 'pageview' ? 'page_view' : str(r.name),
    timestamp: time(r.timestamp),
    url: `https://${str(r.hostname)}${str(r.pathname) || '/'}`,
    referrer: str(r.referrer),
    source: str(r.referrer_source) || str(r.utm_source),
    sessionId: str(r.session_id),
    fingerprint: str(r.user_id),
    country: str(r.country_code),
    device: str(r.screen_size).toLowerCase(),
    browser: str(r.browser),
    os: str(r.operating_system),
  }),
  /**
   * GA4 BigQuery export, flattened by the query in the README (one object a line, fields named as below).
   * `page_location` is the full URL; the visit is user_pseudo_id + ga_session_id.
   */
  ga4: (r) => ({
    event: str(r.event_name),
    timestamp: typeof r.event_timestamp === 'number' || /^\d+$/.test(str(r.event_timestamp)) ? Math.floor(Number(r.event_timestamp) / 1000) : time(r.event_timestamp),
    url: str(r.page_location),
    referrer: str(r.page_referrer),
    sessionId: str(r.ga_session_id) ? `${str(r.user_pseudo_id)}.${str(r.ga_session_id)}` : '',
    fingerprint: str(r.user_pseudo_id),
    userId: str(r.user_id),
    country: str(r.country),
    device: str(r.device_category),
    browser: str(r.browser),
    os: str(r.operating_system),
  }),
};

function clean(e: Event): Event {
  const out: Event = {};
  for (const [k, v] of Object.entries(e)) if (v !== '' && v !== null && v !== undefined) out[k] = v;
  // a custom event has no page; a page view without a URL would be refused, so it is written without one as an event
  if (out.event === 'page_view' && out.url === undefined) out.event = 'page_view_without_url';
  return out;
}

async function* rows(file: string): AsyncGenerator<Row> {
  const input = file === '-' ? process.stdin : createReadStream(file);
  if (/\.csv$/i.test(file)) {
    yield* input.pipe(parse({ columns: true, bom: true, skip_empty_lines: true, relax_column_count: true })) as AsyncIterable<Row>;
    return;
  }
  for await (const line of createInterface({ input, crlfDelay: Infinity })) if (line.trim() !== '') yield JSON.parse(line) as Row;
}

const [kind, file] = process.argv.slice(2);
const map = kind === undefined ? undefined : MAPPINGS[kind];
if (!map || !file) {
  process.stderr.write(`usage: convert-to-import.ts ${Object.keys(MAPPINGS).join('|')} FILE(.csv|.ndjson|-)\n`);
  process.exit(2);
}
for await (const r of rows(file)) {
  if (!process.stdout.write(`${JSON.stringify(clean(map(r)))}\n`)) await new Promise((resolve) => process.stdout.once('drain', resolve));
}
