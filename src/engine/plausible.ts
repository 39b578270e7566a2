import type { ProjectRecord } from '../store/records.ts';
import type { Ingest } from './ingest.ts';
import { failure as fail, type Outcome, type RequestMeta } from './types.ts';

/**
 * Plausible's Events API (`POST /api/event`) over our ingest, so Plausible's own script and its server-side
 * integrations send here by changing only the host: one translation, not a second write path. The body names the
 * site by its `domain` (a comma-separated list sends to each); the project with that domain takes the event under
 * the rules of its publishable key (ingest.ts `asProject`). Both spellings are read: the API's (`name`, `url`,
 * `domain`, `referrer`, `props`, `revenue`, `interactive`) and the script's short one (`n`, `u`, `d`, `r`, `p` or `m`
 * as a JSON string, `$`, `i`). `pageview` is `page_view`, `props` are `eventParams`; no key, and the session is
 * derived from the request as for an event without `sessionId`.
 */

/** Domains one event may name (Plausible sends to a few sites at once; more is a mistake, not a use). */
const MAX_DOMAINS = 10;

export interface PlausibleParts {
  ingestion: Ingest;
  byDomain(domain: string): ProjectRecord | undefined;
}

/** What became of the event: taken by every named site, or dropped (an unknown domain, or refused by its rules). */
export interface PlausibleAck {
  dropped: boolean;
}

interface PlausibleEvent {
  domains: string[];
  event: Record<string, unknown>;
  /** it carried `revenue`: counted as a purchase is */
  revenue: boolean;
}

const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);

/** Props as the API sends them (an object) or the script (a JSON string of one). */
function propsOf(v: unknown): Record<string, unknown> | undefined | false {
  if (v === undefined || v === null) return undefined;
  let o: unknown = v;
  if (typeof v === 'string') {
    try {
      o = JSON.parse(v);
    } catch {
      return false;
    }
  }
  return typeof o === 'object' && o !== null && !Array.isArray(o) ? (o as Record<string, unknown>) : false;
}

/** The body as one of our events and the domains it goes to, or why it is no event. */
export function readPlausibleEvent(body: unknown): { ok: true; value: PlausibleEvent } | { ok: false; message: string } {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return { ok: false, message: 'the body is one event: {"name", "url", "domain", ...}' };
  const b = body as Record<string, unknown>;
  const name = str(b.name ?? b.n);
  const url = str(b.url ?? b.u);
  const domain = str(b.domain ?? b.d);
  for (const [field, v] of [['name', name], ['url', url], ['domain', domain]] as const) {
    if (v === undefined || v === '') return { ok: false, message: `${field} is required (a string)` };
  }
  const props = propsOf(b.props ?? b.p ?? b.m);
  if (props === false) return { ok: false, message: 'props must be an object (or its JSON) of scalars' };
  const eventParams: Record<string, unknown> = { ...props };
  const revenue = propsOf(b.revenue ?? b.$);
  if (revenue === false) return { ok: false, message: 'revenue must be {"currency", "amount"}' };
  if (revenue) {
    const amount = typeof revenue.amount === 'string' ? Number(revenue.amount) : revenue.amount;
    if (typeof amount !== 'number' || !Number.isFinite(amount) || typeof revenue.currency !== 'string') return { ok: false, message: 'revenue must be {"currency": "EUR", "amount": 12.5}' };
    eventParams.value = amount;
    eventParams.currency = revenue.currency;
  }
  const domains = [...new Set(domain!.split(',').map((d) => d.trim().toLowerCase()).filter((d) => d !== ''))];
  if (domains.length === 0 || domains.length > MAX_DOMAINS) return { ok: false, message: `domain names 1 to ${MAX_DOMAINS} sites` };
  const event: Record<string, unknown> = { event: name === 'pageview' ? 'page_view' : name, url };
  const referrer = str(b.referrer ?? b.r);
  if (referrer) event.referrer = referrer;
  if (Object.keys(eventParams).length > 0) event.eventParams = eventParams;
  return { ok: true, value: { domains, event, revenue: Boolean(revenue) } };
}

/** POST /api/event: the event to each named site; 400 only for a body that is no event. */
export async function plausibleEvent(parts: PlausibleParts, meta: RequestMeta, body: unknown): Promise<Outcome<PlausibleAck>> {
  const read = readPlausibleEvent(body);
  if (!read.ok) return fail('invalid_request', read.message);
  let dropped = false;
  for (const domain of read.value.domains) {
    const project = parts.byDomain(domain);
    if (!project) {
      dropped = true;
      continue;
    }
    const out = await parts.ingestion.asProject(meta, project, [read.value.event], read.value.revenue);
    if (!out.ok) dropped = true;
  }
  return { ok: true, value: { dropped } };
}
