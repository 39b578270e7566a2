import { isbot } from 'isbot';
import { UAParser } from 'ua-parser-js';
import { LruCache } from './lru-cache.ts';

/**
 * User-Agent → bot flag, device class, browser and OS names. Parsing costs ~40 µs per UA (ua-parser-js runs a few
 * hundred regexes) while a cache hit costs ~0.1 µs, and a site's traffic reuses a few thousand UA strings all day,
 * so results are kept in a bounded LRU keyed by the UA. The UA itself lives only in that in-memory cache.
 */

/** Distinct UAs of a busy site over a day are in the low thousands; 10k entries × ~1 KB ≈ 10 MB at most. */
export const UA_CACHE_SIZE = 10_000;
/** ua-parser-js reads at most 500 chars; longer UAs are padding, and the cut bounds cache keys (memory). */
export const MAX_USER_AGENT_LENGTH = 512;

export interface UserAgentFacts {
  readonly bot: boolean;
  readonly device: string;
  readonly browser?: string;
  readonly os?: string;
}

/**
 * Browsers driven by automation. isbot knows most of them; these are the markers it misses or that we want named here
 * because they matter most for a script-tag tracker (only something that runs JavaScript can send page views).
 */
const HEADLESS_MARKERS = /headless|phantomjs|puppeteer|playwright|selenium|webdriver|slimerjs|jsdom|cypress|lighthouse/i;

/**
 * Plain HTTP libraries and tools. isbot calls them bots, but a program that POSTs to /analytics with an API key is a
 * deliberate server-side caller reporting on someone's behalf (the TypeScript client on Node sends `node`), not a
 * crawler: crawlers do not run the tracking script. So they are not bots; their UA says nothing about the visitor's
 * device either (→ 'unknown').
 */
const HTTP_CLIENT_LIBRARIES =
  /^(?:curl|libcurl|wget|node|undici|node-fetch|axios|got|ky|deno|bun|python-requests|python-httpx|python-urllib|aiohttp|go-http-client|okhttp|java|apache-httpclient|jetty|reqwest|dart|ruby|faraday|guzzlehttp|restsharp|postmanruntime|insomnia|httpie)(?:[\s/(;]|$)/i;

/**
 * A UA made only of `product/version` tokens (`grpc-node-js/1.14.7`, `acme-backend/2.0 build/7`) is a backend
 * program: isbot's generic rule calls every such UA a bot, which would silently drop all gRPC traffic (grpc-js sends
 * `grpc-node-js/x.y`). Crawlers that name themselves this way still say so (`Googlebot/2.1`), so they stay bots.
 */
const PRODUCT_TOKENS_ONLY = /^[\w.+-]+\/[\w.+-]+(?:\s+[\w.+-]+\/[\w.+-]+)*$/;
const SELF_DECLARED_CRAWLER = /bot|crawl|spider|slurp|scrap|archiv|scan|index|preview|monitor/i;

function isServerProduct(ua: string): boolean {
  return PRODUCT_TOKENS_ONLY.test(ua) && !SELF_DECLARED_CRAWLER.test(ua);
}

/** Operating systems that only run on desktops and laptops, lower case as ua-parser-js names them */
const DESKTOP_OS = new Set([
  'windows',
  'macos',
  'mac os',
  'linux',
  'ubuntu',
  'debian',
  'fedora',
  'mint',
  'arch',
  'gentoo',
  'manjaro',
  'centos',
  'red hat',
  'suse',
  'slackware',
  'chrome os',
  'chromium os',
  'freebsd',
  'openbsd',
  'netbsd',
  'dragonfly',
  'solaris',
  'unix',
  'haiku',
]);

/** Phone operating systems, for UAs where ua-parser-js finds the OS but no device type (app HTTP stacks) */
const MOBILE_OS = new Set(['android', 'ios', 'harmonyos', 'kaios', 'windows phone', 'blackberry', 'symbian']);

/** CONTRACT: the event's `device` is at most 32 chars; a future ua-parser-js type must fit too */
const MAX_DEVICE_LENGTH = 32;

const EMPTY_UA: UserAgentFacts = Object.freeze({ bot: false, device: 'unknown' });

/** Parse one UA (uncached). Exposed for tests and the cold-path bench. */
export function parseUserAgent(rawUserAgent: string): UserAgentFacts {
  const ua = rawUserAgent.trim().slice(0, MAX_USER_AGENT_LENGTH);
  // An empty UA is a server-to-server caller, not a bot (and ua-parser-js would fall back to the runtime's own UA).
  if (ua === '') return EMPTY_UA;
  if (HTTP_CLIENT_LIBRARIES.test(ua) || isServerProduct(ua)) return Object.freeze({ bot: false, device: 'unknown' });

  const parser = new UAParser(ua);
  const type = parser.getDevice().type;
  const os = parser.getOS().name;
  const browser = parser.getBrowser().name;
  const facts: { bot: boolean; device: string; browser?: string; os?: string } = {
    bot: HEADLESS_MARKERS.test(ua) || isbot(ua),
    device: deviceClass(type, os),
  };
  if (browser !== undefined && browser !== '') facts.browser = browser;
  if (os !== undefined && os !== '') facts.os = os;
  return Object.freeze(facts);
}

function deviceClass(type: string | undefined, os: string | undefined): string {
  // ua-parser-js types are kept as they are: mobile, tablet, smarttv, console, wearable, embedded
  if (type !== undefined && type !== '') return type.toLowerCase().slice(0, MAX_DEVICE_LENGTH);
  // ua-parser-js leaves the type undefined for desktops (it has no 'desktop' type)
  const osName = os?.toLowerCase();
  if (osName === undefined) return 'unknown';
  if (DESKTOP_OS.has(osName)) return 'desktop';
  if (MOBILE_OS.has(osName)) return 'mobile';
  return 'unknown';
}

/** parseUserAgent behind the LRU. One per Enricher. */
export class UserAgentClassifier {
  readonly #cache = new LruCache<string, UserAgentFacts>(UA_CACHE_SIZE);

  classify(userAgent: string): UserAgentFacts {
    const key = userAgent.length > MAX_USER_AGENT_LENGTH ? userAgent.slice(0, MAX_USER_AGENT_LENGTH) : userAgent;
    const hit = this.#cache.get(key);
    if (hit !== undefined) return hit;
    const facts = parseUserAgent(key);
    this.#cache.set(key, facts);
    return facts;
  }

  get cachedCount(): number {
    return this.#cache.size;
  }
}
