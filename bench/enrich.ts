import { pathToFileURL } from 'node:url';
import { DailySalts } from '../src/enrich/daily-salts.ts';
import { buildEnricher } from '../src/enrich/enricher.ts';
import { openCountryLookup } from '../src/enrich/geo-country.ts';
import { classifySource } from '../src/enrich/traffic-source.ts';
import type { DailySalt, SaltStore } from '../src/enrich/types.ts';
import { parseUserAgent } from '../src/enrich/user-agent.ts';

/**
 * Per-request enrichment cost with a realistic mix: ~30 UA strings (a site's traffic repeats a few thousand, so the
 * LRU is warm after the first minutes), ~1,500 public IPs across countries, and referrer/URL pairs in the proportions
 * of a small content site (direct, search, social, campaign links, self-referrals).
 *
 * The budget: enrichment ≤ 15 % of single-event ingest throughput. Run alone: `tsx bench/enrich.ts [n]`.
 */

/** Default iterations when run from the command line: ~1 s per figure on one core */
const DEFAULT_ITERATIONS = 200_000;
/** distinct IPs per /8 prefix in the mix: enough to defeat any accidental caching of lookups */
const IPS_PER_PREFIX = 50;

const USER_AGENTS = [
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36',
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/123.0.0.0 Safari/537.36',
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36 Edg/124.0.2478.80',
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:125.0) Gecko/20100101 Firefox/125.0',
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:124.0) Gecko/20100101 Firefox/124.0',
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15',
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.3 Safari/605.1.15',
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36',
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 10.15; rv:125.0) Gecko/20100101 Firefox/125.0',
  'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36',
  'Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0',
  'Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0',
  'Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36',
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_3_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.3.1 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (iPhone; CPU iPhone OS 16_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/16.6 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/124.0.6367.88 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 Instagram 327.0.0.36.89',
  'Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36',
  'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.6367.82 Mobile Safari/537.36',
  'Mozilla/5.0 (Linux; Android 13; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/24.0 Chrome/117.0.0.0 Mobile Safari/537.36',
  'Mozilla/5.0 (Linux; Android 14; SM-A546B) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36',
  'Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (Linux; Android 13; SM-X710) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36',
  'Mozilla/5.0 (SMART-TV; LINUX; Tizen 6.0) AppleWebKit/537.36 (KHTML, like Gecko) 76.0.3809.146/6.0 TV Safari/537.36',
  'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)',
  'Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)',
  'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/124.0.0.0 Safari/537.36',
  'node',
  '',
];

/** first octets of public ranges in several countries (US, DE, JP, GB, BR, ZA, AU, FR, IN, CN, ...) */
const PREFIXES = [8, 23, 31, 41, 46, 49, 62, 77, 80, 81, 84, 91, 103, 110, 126, 133, 151, 177, 185, 188, 193, 200, 203, 210, 217];

/** [referrer, url] pairs, roughly a content site's mix */
const SOURCES: ReadonlyArray<readonly [string, string]> = [
  ['', 'https://blog.example.com/'],
  ['', '/pricing'],
  ['https://www.google.com/', 'https://blog.example.com/posts/lmdb'],
  ['https://www.google.de/', 'https://blog.example.com/posts/lmdb'],
  ['https://www.bing.com/search?q=analytics', '/'],
  ['https://duckduckgo.com/', '/docs'],
  ['https://t.co/AbCdEf', 'https://blog.example.com/posts/hll'],
  ['https://news.ycombinator.com/item?id=123', 'https://blog.example.com/posts/hll'],
  ['https://www.reddit.com/r/node/comments/x', '/posts/hll'],
  ['https://blog.example.com/', 'https://blog.example.com/about'],
  ['https://www.example.org/links', '/'],
  ['', 'https://blog.example.com/?utm_source=newsletter&utm_medium=email'],
  ['https://l.facebook.com/l.php?u=x', '/'],
  ['android-app://com.google.android.gm/', '/'],
  ['newsletter', '/'],
];

function publicIps(): string[] {
  const ips: string[] = [];
  for (const first of PREFIXES) {
    for (let i = 0; i < IPS_PER_PREFIX; i++) ips.push(`${first}.${(i * 37) % 256}.${(i * 11) % 256}.${(i * 7 + 1) % 255}`);
  }
  // a share of IPv6 clients
  for (let i = 0; i < IPS_PER_PREFIX * 4; i++) ips.push(`2003:${(i * 13).toString(16)}::${(i + 1).toString(16)}`);
  return ips;
}

const memorySalts = (): SaltStore => {
  let saved: DailySalt[] = [];
  return { load: async () => saved, save: async (s) => void (saved = s) };
};

function perSecond(iterations: number, body: (i: number) => void): number {
  const warm = Math.min(iterations, 10_000);
  for (let i = 0; i < warm; i++) body(i); // JIT and caches warm
  const start = process.hrtime.bigint();
  for (let i = 0; i < iterations; i++) body(i);
  const ns = Number(process.hrtime.bigint() - start);
  return Math.round((iterations * 1e9) / ns);
}

export function benchEnrich(iterations: number): { classifyPerSec: number; sourcePerSec: number; sessionIdPerSec: number } {
  const enricher = buildEnricher(openCountryLookup(undefined), new DailySalts(memorySalts()));
  const ips = publicIps();
  const now = Date.now();
  let sink = 0; // consumed below so the work is not optimized away
  const classifyPerSec = perSecond(iterations, (i) => {
    const facts = enricher.classify({ ip: ips[i % ips.length]!, userAgent: USER_AGENTS[i % USER_AGENTS.length]! });
    sink += facts.country.length;
  });
  const sourcePerSec = perSecond(iterations, (i) => {
    const [referrer, url] = SOURCES[i % SOURCES.length]!;
    sink += classifySource(referrer, url).source.length;
  });
  const sessionIdPerSec = perSecond(iterations, (i) => {
    const client = { ip: ips[i % ips.length]!, userAgent: USER_AGENTS[i % USER_AGENTS.length]! };
    sink += enricher.anonymousSessionId('p_bench', client, now).length;
  });
  if (sink < 0) throw new Error('unreachable');
  return { classifyPerSec, sourcePerSec, sessionIdPerSec };
}

/** The cache-miss path: a UA never seen before (parse + isbot). Bounds the cost of a cold start or a UA flood. */
export function benchUserAgentParsePerSec(iterations: number): number {
  let sink = 0;
  const perSec = perSecond(iterations, (i) => {
    sink += parseUserAgent(`${USER_AGENTS[i % 25]!} v${i}`).device.length;
  });
  if (sink < 0) throw new Error('unreachable');
  return perSec;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const iterations = Number(process.argv[2] ?? DEFAULT_ITERATIONS);
  const result = benchEnrich(iterations);
  const uaParsePerSec = benchUserAgentParsePerSec(Math.max(1, Math.floor(iterations / 20)));
  const us = (perSec: number): string => `${(1e6 / perSec).toFixed(2)} µs`;
  console.log(JSON.stringify({ iterations, ...result, uaParsePerSec }, null, 2));
  console.log(
    `classify ${us(result.classifyPerSec)}, source ${us(result.sourcePerSec)}, session id ${us(result.sessionIdPerSec)}, ` +
      `uncached UA parse ${us(uaParsePerSec)}`,
  );
}
