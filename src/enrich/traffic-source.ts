import { boundedMemo } from '../core/bounded-memo.ts';
import { KNOWN_SOURCE_HOSTS, KNOWN_SOURCE_PATTERNS } from './known-sources.ts';

/**
 * Traffic source of one event, by the CONTRACT rule:
 *   1. `utm_source`, then `ref`, then `source` from the page URL's query;
 *   2. `Direct` when the referrer is empty, on the page's own host, or on localhost;
 *   3. a known name for the referrer host (known-sources.ts);
 *   4. the referrer's host without `www.`;
 *   5. a referrer that is not a URL (e.g. `newsletter`) is the name itself.
 * Pure and synchronous; called per event.
 */

export const DIRECT = 'Direct';

/** CONTRACT: a source name (and a referrer given as a name) is at most 100 chars */
export const MAX_SOURCE_NAME_LENGTH = 100;
/** same bound as the event `url`, so a normalized referrer never outgrows what validation accepts */
export const MAX_REFERRER_LENGTH = 2048;

/** campaign parameters of the page URL, in order of precedence */
const SOURCE_PARAMS = ['utm_source', 'ref', 'source'] as const;

/** a Map, not the object literal, so a host named "constructor" or "__proto__" cannot reach Object.prototype */
const KNOWN_HOSTS: ReadonlyMap<string, string> = new Map(Object.entries(KNOWN_SOURCE_HOSTS));

/**
 * Every known source name (and Direct) by its lower case: a source given by name (`utm_source=twitter`, a referrer
 * `GOOGLE`) is the known source, spelled as a referrer of that site gives it, so one source is one row.
 */
const KNOWN_NAMES: ReadonlyMap<string, string> = new Map(
  [DIRECT, ...Object.values(KNOWN_SOURCE_HOSTS), ...KNOWN_SOURCE_PATTERNS.map(([, name]) => name)].map((n) => [n.toLowerCase(), n]),
);

const LOCAL_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]', '::1', '0.0.0.0']);

/** `scheme://` — anything else is either a bare host ("google.com/search") or a name */
const HAS_SCHEME = /^[a-z][a-z0-9+.-]*:\/\//i;
/** schemes that say "no referring page" (blank tabs, local files, inline documents) */
const NO_REFERRER_SCHEME = /^(?:about|file|data|blob|javascript):/i;
/**
 * A bare host, optionally with port and path: labels joined by dots, ending in a TLD that starts with a letter
 * (so "v1.2" or "e.g" stay names), or localhost, or a dotted IPv4 address.
 */
const BARE_HOST =
  /^(?:(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{1,62}|localhost|\d{1,3}(?:\.\d{1,3}){3})(?::\d{1,5})?(?:[/?#]|$)/i;
/** C0 controls and DEL never belong in a name shown in a breakdown */
const CONTROL_CHARS = /[\u0000-\u001f\u007f]/g;

export interface TrafficSource {
  /** normalized referrer: scheme, host and path (no query, no fragment, no credentials); the name itself; or '' */
  referrer: string;
  source: string;
}

export function classifySource(referrer: string, url: string): TrafficSource {
  const ref = normalizeReferrer(referrer, url);
  const campaign = campaignSource(url);
  return { referrer: ref.referrer, source: campaign ?? ref.source };
}

function campaignSource(url: string): string | undefined {
  // the query ends at the fragment, and a '?' inside the fragment is not a query
  const hash = url.indexOf('#');
  const end = hash < 0 ? url.length : hash;
  const q = url.indexOf('?');
  if (q < 0 || q > end) return undefined;
  const params = new URLSearchParams(url.slice(q + 1, end));
  for (const name of SOURCE_PARAMS) {
    const value = params.get(name);
    if (value === null) continue;
    const cleaned = cleanName(value);
    if (cleaned !== '') return knownName(cleaned);
  }
  return undefined;
}

/**
 * Distinct referrers and page URLs whose parse is remembered: a site's events repeat a few hundred of each, and a
 * WHATWG URL parse is ~1 µs, the largest part of classifying an event. Past this many the memo starts over, so an
 * import of millions of distinct URLs holds at most this many (~1 MiB).
 */
const MEMO_ENTRIES = 4_096;

/** What a referrer says on its own, before the page's host is compared with it. */
type ParsedReferrer =
  /** no referring page, or a local one */
  | { direct: true }
  /** a name given for the source, or a URL (`host` set: Direct when it is the page's own host) */
  | { direct: false; host: string | undefined; result: TrafficSource };

const DIRECT_REFERRER: ParsedReferrer = { direct: true };

function normalizeReferrer(raw: string, pageUrl: string): TrafficSource {
  const parsed = parsedReferrer(raw);
  if (parsed.direct || (parsed.host !== undefined && parsed.host === pageHost(pageUrl))) return { referrer: '', source: DIRECT };
  return { referrer: parsed.result.referrer, source: parsed.result.source };
}

const parsedReferrer = boundedMemo(MEMO_ENTRIES, (raw): ParsedReferrer => {
  const trimmed = raw.trim();
  if (trimmed === '' || NO_REFERRER_SCHEME.test(trimmed)) return DIRECT_REFERRER;

  let parsed: URL | undefined;
  if (HAS_SCHEME.test(trimmed)) parsed = parseUrl(trimmed);
  else if (BARE_HOST.test(trimmed)) parsed = parseUrl(`https://${trimmed}`);

  if (parsed === undefined || parsed.hostname === '') {
    // Not a URL: the caller named the source ("newsletter", "Product Hunt").
    const name = cleanName(trimmed);
    return name === '' ? DIRECT_REFERRER : { direct: false, host: undefined, result: { referrer: name, source: knownName(name) } };
  }

  const host = stripWww(parsed.hostname);
  if (LOCAL_HOSTS.has(host) || host.endsWith('.localhost')) return DIRECT_REFERRER;
  const normalized = `${parsed.protocol}//${parsed.host}${parsed.pathname}`.slice(0, MAX_REFERRER_LENGTH);
  return { direct: false, host, result: { referrer: normalized, source: knownSourceName(host) ?? host } };
});

/** The host of an absolute page URL without `www.`; '' for a path (then self-referrals cannot be recognized). */
const pageHost = boundedMemo(MEMO_ENTRIES, (url) => {
  if (!HAS_SCHEME.test(url)) return '';
  const parsed = parseUrl(url);
  return parsed === undefined ? '' : stripWww(parsed.hostname);
});

/** The most specific table entry or pattern for `host` or one of its parent domains. */
export function knownSourceName(host: string): string | undefined {
  let candidate = host;
  for (;;) {
    const name = KNOWN_HOSTS.get(candidate);
    if (name !== undefined) return name;
    for (const [pattern, patternName] of KNOWN_SOURCE_PATTERNS) {
      if (pattern.test(candidate)) return patternName;
    }
    const dot = candidate.indexOf('.');
    // stop at the last label: a bare TLD ("com") is never a source
    if (dot < 0 || candidate.indexOf('.', dot + 1) < 0) return undefined;
    candidate = candidate.slice(dot + 1);
  }
}

/** A name given by the caller, as the known source it names in any case (`twitter` is `Twitter`), else as given. */
function knownName(name: string): string {
  return KNOWN_NAMES.get(name.toLowerCase()) ?? name;
}

function parseUrl(value: string): URL | undefined {
  // URL.canParse is cheaper than a thrown TypeError for the (rare) malformed referrer
  return URL.canParse(value) ? new URL(value) : undefined;
}

function stripWww(host: string): string {
  return host.startsWith('www.') ? host.slice(4) : host;
}

function cleanName(value: string): string {
  let name = value.replace(CONTROL_CHARS, '').trim();
  if (name.length > MAX_SOURCE_NAME_LENGTH) {
    name = name.slice(0, MAX_SOURCE_NAME_LENGTH);
    // do not leave half of a surrogate pair behind the cut
    if (/[\ud800-\udbff]$/.test(name)) name = name.slice(0, -1);
    name = name.trimEnd();
  }
  return name;
}
