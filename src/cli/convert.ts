/**
 * `analytics import --from plausible|umami|ga4`: a raw-event export of another service, as the events of
 * `POST /projects/{id}/history`, one row at a time. Every field those exports carry that an event has a place for is
 * kept: Plausible CE's UTM medium and campaign (put back into the URL's query, where ours are read from) and its custom
 * properties (`meta.key` / `meta.value`), Umami's event data, GA4's parameters as flattened by the query in
 * docs/history.md. Empty and null values are left out.
 */

export type Row = Record<string, unknown>;
export type Event = Record<string, unknown>;

const str = (v: unknown): string => (v === null || v === undefined ? '' : String(v));

/** "2024-01-01 10:00:00[.123]" (UTC, no zone, as SQL tools write it) → ISO-8601; numbers stay ms. */
function time(v: unknown): string | number {
  if (typeof v === 'number') return v;
  const s = str(v).trim();
  if (/^\d+$/.test(s)) return Number(s);
  const m = /^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)(?: ?UTC)?$/.exec(s);
  return m ? `${m[1]}T${m[2]}Z` : s;
}

/** A ClickHouse array as CSV writes it (`['plan','seats']`), or a JSON array: its strings. */
function list(v: unknown): string[] {
  if (Array.isArray(v)) return v.map(str);
  const s = str(v).trim();
  if (!s.startsWith('[')) return [];
  const out: string[] = [];
  for (const m of s.matchAll(/'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"/g)) out.push((m[1] ?? m[2] ?? '').replace(/\\(.)/g, '$1'));
  return out;
}

/** Keys and values side by side (Plausible's meta.key / meta.value) as eventParams. */
function zipProps(keys: string[], values: string[]): Record<string, string> | undefined {
  if (keys.length === 0) return undefined;
  const out: Record<string, string> = {};
  keys.forEach((k, i) => {
    if (k !== '') out[k] = values[i] ?? '';
  });
  return out;
}

/** A URL with utm_medium / utm_campaign added to its query (where they are read from), unless it has them. */
function withUtm(url: string, medium: string, campaign: string): string {
  const extra = [medium && !/[?&]utm_medium=/.test(url) ? `utm_medium=${encodeURIComponent(medium)}` : '', campaign && !/[?&]utm_campaign=/.test(url) ? `utm_campaign=${encodeURIComponent(campaign)}` : ''].filter(Boolean);
  return extra.length === 0 ? url : `${url}${url.includes('?') ? '&' : '?'}${extra.join('&')}`;
}

export const CONVERTERS: Record<string, (r: Row) => Event> = {
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
  /** Plausible CE: SELECT * FROM events_v2 ... FORMAT CSVWithNames (clickhouse-client), or JSONEachRow. */
  plausible: (r) => ({
    event: str(r.name) === 'pageview' ? 'page_view' : str(r.name),
    timestamp: time(r.timestamp),
    url: withUtm(`https://${str(r.hostname)}${str(r.pathname) || '/'}`, str(r.utm_medium), str(r.utm_campaign)),
    referrer: str(r.referrer),
    source: str(r.referrer_source) || str(r.utm_source),
    sessionId: str(r.session_id),
    fingerprint: str(r.user_id),
    country: str(r.country_code),
    device: str(r.screen_size).toLowerCase(),
    browser: str(r.browser),
    os: str(r.operating_system),
    eventParams: zipProps(list(r['meta.key'] ?? (r.meta as Row | undefined)?.key), list(r['meta.value'] ?? (r.meta as Row | undefined)?.value)),
  }),
  /**
   * GA4 BigQuery export, flattened by the query in docs/history.md (one object a line, fields named as below).
   * `page_location` is the full URL (its utm_ parameters stay in it); the visit is user_pseudo_id + ga_session_id.
   */
  ga4: (r) => ({
    event: str(r.event_name) === 'page_view' ? 'page_view' : str(r.event_name),
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

export const SOURCES = Object.keys(CONVERTERS);

/** One exported row as an event of the history route (empty values left out). */
export function convert(kind: string, row: Row): Event {
  const e = CONVERTERS[kind]!(row);
  const out: Event = {};
  for (const [k, v] of Object.entries(e)) if (v !== '' && v !== null && v !== undefined) out[k] = v;
  // a page view without a URL would be refused: such a row is kept as an event of its own name
  if (out.event === 'page_view' && out.url === undefined) out.event = 'page_view_without_url';
  return out;
}
