// long because it is a table of cases: every traffic source, browser, OS, device and country rule the enricher
// applies, each asserted on real header and referrer strings.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { classifySource, clientIp, createEnricher, type DailySalt, type SaltStore } from '../src/enrich/index.ts';
import { SALT_RETENTION_MS } from '../src/enrich/daily-salts.ts';
import { isNonPublicAddress, normalizeIp } from '../src/enrich/ip-address.ts';
import { KNOWN_SOURCE_HOSTS } from '../src/enrich/known-sources.ts';
import { LruCache } from '../src/enrich/lru-cache.ts';
import { MAX_SOURCE_NAME_LENGTH } from '../src/enrich/traffic-source.ts';
import { parseUserAgent, UserAgentClassifier } from '../src/enrich/user-agent.ts';

/** A SaltStore test double: the set in memory, plus every set it was asked to save. */
class MemorySaltStore implements SaltStore {
  salts: DailySalt[];
  saves: DailySalt[][] = [];
  failNextSave = false;
  constructor(initial: DailySalt[] = []) {
    this.salts = initial.map((s) => ({ ...s }));
  }
  async load(): Promise<DailySalt[]> {
    return this.salts.map((s) => ({ ...s }));
  }
  async save(salts: DailySalt[]): Promise<void> {
    if (this.failNextSave) {
      this.failNextSave = false;
      throw new Error('disk full');
    }
    this.saves.push(salts.map((s) => ({ ...s })));
    this.salts = salts.map((s) => ({ ...s }));
  }
  days(): string[] {
    return this.salts.map((s) => s.day).sort();
  }
}

const HOUR = 60 * 60 * 1000;
const at = (iso: string): number => Date.parse(iso);
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

// ---------------------------------------------------------------------------------------------------------------
describe('traffic source', () => {
  const rows: Array<{ why: string; referrer: string; url: string; source: string; referrerOut?: string }> = [
    { why: 'an empty referrer is Direct', referrer: '', url: 'https://a.example/', source: 'Direct', referrerOut: '' },
    { why: 'a blank referrer is Direct', referrer: '   ', url: '/', source: 'Direct', referrerOut: '' },
    { why: 'utm_source wins over a known referrer', referrer: 'https://www.google.com/', url: 'https://a.example/?utm_source=newsletter', source: 'newsletter' },
    { why: 'utm_source wins over ref and source', referrer: '', url: '/p?source=c&ref=b&utm_source=a', source: 'a' },
    { why: 'ref is used when utm_source is absent', referrer: 'https://t.co/x', url: '/p?ref=producthunt', source: 'producthunt' },
    { why: 'source is used when utm_source and ref are absent', referrer: '', url: '/p?source=podcast', source: 'podcast' },
    { why: 'an empty utm_source falls through to ref', referrer: '', url: '/p?utm_source=&ref=blog', source: 'blog' },
    { why: 'utm_source is trimmed and percent-decoded', referrer: '', url: '/p?utm_source=%20Spring%20Sale%20', source: 'Spring Sale' },
    { why: 'utm_source after a fragment is ignored', referrer: '', url: '/p#x?utm_source=nope', source: 'Direct' },
    { why: 'utm_source is cut to 100 chars', referrer: '', url: `/p?utm_source=${'x'.repeat(150)}`, source: 'x'.repeat(MAX_SOURCE_NAME_LENGTH) },
    { why: 'a self-referral is Direct', referrer: 'https://a.example/pricing', url: 'https://a.example/signup', source: 'Direct', referrerOut: '' },
    { why: 'a self-referral across www is Direct', referrer: 'https://www.a.example/', url: 'https://a.example/', source: 'Direct' },
    { why: 'a subdomain of the page host is not a self-referral', referrer: 'https://blog.a.example/post', url: 'https://a.example/', source: 'blog.a.example' },
    { why: 'localhost is Direct', referrer: 'http://localhost:3000/x', url: 'https://a.example/', source: 'Direct', referrerOut: '' },
    { why: '127.0.0.1 is Direct', referrer: 'http://127.0.0.1:8080/', url: '/', source: 'Direct' },
    { why: '[::1] is Direct', referrer: 'http://[::1]:8080/', url: '/', source: 'Direct' },
    { why: 'about:blank is Direct', referrer: 'about:blank', url: '/', source: 'Direct', referrerOut: '' },
    { why: 'google.com is Google', referrer: 'https://www.google.com/', url: '/', source: 'Google' },
    { why: 'a regional Google (google.de) is Google', referrer: 'https://www.google.de/', url: '/', source: 'Google' },
    { why: 'a regional Google (google.co.uk) is Google', referrer: 'https://www.google.co.uk/', url: '/', source: 'Google' },
    { why: 'a regional Google (google.com.br) is Google', referrer: 'https://google.com.br/', url: '/', source: 'Google' },
    { why: 'Gmail wins over Google', referrer: 'https://mail.google.com/mail/u/0/', url: '/', source: 'Gmail' },
    { why: 'Google News on a regional domain is Google', referrer: 'https://news.google.co.uk/', url: '/', source: 'Google' },
    { why: 'the Google app referrer is Google', referrer: 'android-app://com.google.android.googlequicksearchbox/', url: '/', source: 'Google' },
    { why: 'the Gmail app referrer is Gmail', referrer: 'android-app://com.google.android.gm/', url: '/', source: 'Gmail' },
    { why: 'bing.com is Bing', referrer: 'https://www.bing.com/search?q=x', url: '/', source: 'Bing' },
    { why: 'duckduckgo.com is DuckDuckGo', referrer: 'https://duckduckgo.com/', url: '/', source: 'DuckDuckGo' },
    { why: 'a regional Yahoo search is Yahoo', referrer: 'https://de.search.yahoo.com/', url: '/', source: 'Yahoo' },
    { why: 'yandex.ru is Yandex', referrer: 'https://yandex.ru/search/', url: '/', source: 'Yandex' },
    { why: 't.co is Twitter', referrer: 'https://t.co/abc123', url: '/', source: 'Twitter' },
    { why: 'x.com is Twitter', referrer: 'https://x.com/someone/status/1', url: '/', source: 'Twitter' },
    { why: 'l.facebook.com is Facebook', referrer: 'https://l.facebook.com/l.php?u=x', url: '/', source: 'Facebook' },
    { why: 'lnkd.in is LinkedIn', referrer: 'https://lnkd.in/abc', url: '/', source: 'LinkedIn' },
    { why: 'old.reddit.com is Reddit', referrer: 'https://old.reddit.com/r/typescript/', url: '/', source: 'Reddit' },
    { why: 'news.ycombinator.com is Hacker News', referrer: 'https://news.ycombinator.com/item?id=1', url: '/', source: 'Hacker News' },
    { why: 'github.com is GitHub', referrer: 'https://github.com/org/repo', url: '/', source: 'GitHub' },
    { why: 'youtu.be is YouTube', referrer: 'https://youtu.be/abc', url: '/', source: 'YouTube' },
    { why: 'a Mastodon instance is Mastodon', referrer: 'https://mastodon.social/@someone', url: '/', source: 'Mastodon' },
    { why: 'outlook.live.com is Outlook', referrer: 'https://outlook.live.com/mail/0/', url: '/', source: 'Outlook' },
    { why: 'chat.openai.com is ChatGPT', referrer: 'https://chat.openai.com/', url: '/', source: 'ChatGPT' },
    { why: 'a Wikipedia language subdomain is Wikipedia', referrer: 'https://en.m.wikipedia.org/wiki/Web_analytics', url: '/', source: 'Wikipedia' },
    { why: 'a Substack publication is Substack', referrer: 'https://someone.substack.com/p/post', url: '/', source: 'Substack' },
    { why: 'an unknown host is the host without www', referrer: 'https://www.example.org/blog/post?id=1#top', url: '/', source: 'example.org' },
    { why: 'an unknown host keeps other subdomains', referrer: 'https://blog.example.org/', url: '/', source: 'blog.example.org' },
    { why: 'a referrer without scheme is a host', referrer: 'google.com/search', url: '/', source: 'Google' },
    { why: 'an unknown host without scheme is the host', referrer: 'www.example.net', url: '/', source: 'example.net' },
    { why: 'a referrer that is not a URL is the name itself', referrer: 'newsletter', url: '/', source: 'newsletter', referrerOut: 'newsletter' },
    { why: 'a name with spaces is the name itself', referrer: '  Product Hunt ', url: '/', source: 'Product Hunt' },
    { why: 'a dotted name that is not a host is the name itself', referrer: 'v1.2', url: '/', source: 'v1.2' },
    { why: 'a long name is cut to 100 chars', referrer: 'n'.repeat(300), url: '/', source: 'n'.repeat(MAX_SOURCE_NAME_LENGTH) },
    { why: 'a host named like an Object.prototype member is just a host', referrer: 'https://constructor/', url: '/', source: 'constructor' },
  ];
  for (const row of rows) {
    test(`${row.why}: (${JSON.stringify(row.referrer).slice(0, 60)}, ${JSON.stringify(row.url).slice(0, 60)}) → ${row.source.slice(0, 20)}`, () => {
      const got = classifySource(row.referrer, row.url);
      assert.equal(got.source, row.source);
      if (row.referrerOut !== undefined) assert.equal(got.referrer, row.referrerOut);
    });
  }

  test('the normalized referrer drops query, fragment and credentials but keeps scheme, host and path', () => {
    assert.equal(classifySource('https://user:secret@www.Example.org/a/b?token=x#f', '/').referrer, 'https://www.example.org/a/b');
  });

  test('a referrer without scheme is normalized as https', () => {
    assert.equal(classifySource('google.com/search?q=me', '/').referrer, 'https://google.com/search');
  });

  test('the referrer is still normalized when utm_source decides the source', () => {
    assert.deepEqual(classifySource('https://t.co/x', '/?utm_source=launch'), { referrer: 'https://t.co/x', source: 'launch' });
  });

  test('any referrer and URL give a non-empty source within bounds, without throwing', () => {
    const urlish = fc.oneof(
      fc.string(),
      fc.webUrl({ withQueryParameters: true, withFragments: true }),
      fc.webPath().map((p) => `/${p}`),
      fc.domain(),
    );
    fc.assert(
      fc.property(urlish, urlish, (referrer, url) => {
        const got = classifySource(referrer, url);
        assert.ok(got.source.length > 0 && got.source.length <= 2048);
        assert.ok(got.referrer.length <= 2048);
        // no referrer left means Direct, unless a campaign parameter named the source
        if (got.referrer === '') assert.ok(got.source === 'Direct' || /[?&](utm_source|ref|source)=/.test(url));
      }),
      { numRuns: 2000 },
    );
  });

  test('the known-source table holds at least 60 hosts, all lower case without www', () => {
    const hosts = Object.keys(KNOWN_SOURCE_HOSTS);
    assert.ok(hosts.length >= 60, `${hosts.length} hosts`);
    for (const host of hosts) {
      assert.equal(host, host.toLowerCase());
      assert.ok(!host.startsWith('www.'), host);
    }
  });
});

// ---------------------------------------------------------------------------------------------------------------
describe('user agent', () => {
  const devices: Array<{ name: string; ua: string; device: string; browser?: string; os?: string }> = [
    { name: 'Chrome on Windows', device: 'desktop', browser: 'Chrome', os: 'Windows', ua: 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36' },
    { name: 'Firefox on Windows', device: 'desktop', browser: 'Firefox', os: 'Windows', ua: 'Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:125.0) Gecko/20100101 Firefox/125.0' },
    { name: 'Edge on Windows', device: 'desktop', browser: 'Edge', os: 'Windows', ua: 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36 Edg/124.0.2478.80' },
    { name: 'Safari on macOS', device: 'desktop', browser: 'Safari', os: 'Mac OS', ua: 'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15' },
    { name: 'Chrome on macOS', device: 'desktop', browser: 'Chrome', os: 'Mac OS', ua: 'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36' },
    { name: 'Firefox on Linux', device: 'desktop', browser: 'Firefox', os: 'Linux', ua: 'Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0' },
    { name: 'Firefox on Ubuntu', device: 'desktop', browser: 'Firefox', os: 'Ubuntu', ua: 'Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0' },
    { name: 'Chrome on ChromeOS', device: 'desktop', browser: 'Chrome', ua: 'Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36' },
    { name: 'Safari on iPhone', device: 'mobile', browser: 'Mobile Safari', os: 'iOS', ua: 'Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1' },
    { name: 'Chrome on an Android phone', device: 'mobile', os: 'Android', ua: 'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.6367.82 Mobile Safari/537.36' },
    { name: 'Chrome on an Android phone with a reduced UA', device: 'mobile', ua: 'Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36' },
    { name: 'Samsung Internet on a Galaxy phone', device: 'mobile', browser: 'Samsung Internet', ua: 'Mozilla/5.0 (Linux; Android 13; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/24.0 Chrome/117.0.0.0 Mobile Safari/537.36' },
    { name: 'Safari on iPad', device: 'tablet', os: 'iOS', ua: 'Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1' },
    { name: 'Chrome on an Android tablet', device: 'tablet', os: 'Android', ua: 'Mozilla/5.0 (Linux; Android 13; SM-X710) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36' },
    { name: 'Silk on a Kindle Fire', device: 'tablet', ua: 'Mozilla/5.0 (Linux; U; Android 4.0.3; en-us; KFTT Build/IML74K) AppleWebKit/537.36 (KHTML, like Gecko) Silk/3.68 like Chrome/39.0.2171.93 Safari/537.36' },
    { name: 'a Samsung Tizen smart TV', device: 'smarttv', ua: 'Mozilla/5.0 (SMART-TV; LINUX; Tizen 6.0) AppleWebKit/537.36 (KHTML, like Gecko) 76.0.3809.146/6.0 TV Safari/537.36' },
    { name: 'an LG webOS smart TV', device: 'smarttv', ua: 'Mozilla/5.0 (Web0S; Linux/SmartTV) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/79.0.3945.79 Safari/537.36 WebAppManager' },
    { name: 'a PlayStation 5', device: 'console', ua: 'Mozilla/5.0 (PlayStation; PlayStation 5/2.26) AppleWebKit/605.1.15 (KHTML, like Gecko)' },
    { name: 'an Xbox', device: 'console', ua: 'Mozilla/5.0 (Windows NT 10.0; Win64; x64; Xbox; Xbox One) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/70.0.3538.102 Safari/537.36 Edge/18.19041' },
    { name: 'a Nintendo Switch', device: 'console', ua: 'Mozilla/5.0 (Nintendo Switch; WifiWebAuthApplet) AppleWebKit/606.4 (KHTML, like Gecko) NF/6.0.1.15.4 NintendoBrowser/5.1.0.20393' },
    { name: 'a Meta Quest headset (ua-parser-js 1.x calls headsets wearable)', device: 'wearable', ua: 'Mozilla/5.0 (X11; Linux x86_64; Quest 3) AppleWebKit/537.36 (KHTML, like Gecko) OculusBrowser/31.0.0.7.76 SamsungBrowser/4.0 Chrome/120.0.0.0 VR Safari/537.36' },
    { name: 'an empty UA', device: 'unknown', ua: '' },
    { name: 'curl', device: 'unknown', ua: 'curl/8.5.0' },
  ];
  for (const row of devices) {
    test(`${row.name} is ${row.device}, not a bot`, () => {
      const facts = parseUserAgent(row.ua);
      assert.equal(facts.device, row.device);
      assert.equal(facts.bot, false);
      if (row.browser !== undefined) assert.equal(facts.browser, row.browser);
      if (row.os !== undefined) assert.equal(facts.os, row.os);
    });
  }

  const bots: Array<{ name: string; ua: string }> = [
    { name: 'Googlebot', ua: 'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)' },
    { name: 'Googlebot smartphone (a real Chrome UA plus the bot token)', ua: 'Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.6367.91 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)' },
    { name: 'Bingbot', ua: 'Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)' },
    { name: 'AhrefsBot', ua: 'Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)' },
    { name: 'GPTBot', ua: 'Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)' },
    { name: 'YandexBot', ua: 'Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)' },
    { name: 'the Facebook link previewer', ua: 'facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)' },
    { name: 'HeadlessChrome', ua: 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/124.0.0.0 Safari/537.36' },
    { name: 'PhantomJS', ua: 'Mozilla/5.0 (Unknown; Linux x86_64) AppleWebKit/538.1 (KHTML, like Gecko) PhantomJS/2.1.1 Safari/538.1' },
    { name: 'a Puppeteer-marked Chrome', ua: 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36 Puppeteer' },
    { name: 'jsdom', ua: 'Mozilla/5.0 (linux) AppleWebKit/537.36 (KHTML, like Gecko) jsdom/22.1.0' },
    { name: 'Lighthouse', ua: 'Mozilla/5.0 (Linux; Android 11; moto g power (2022)) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/119.0.0.0 Mobile Safari/537.36 Chrome-Lighthouse' },
  ];
  for (const row of bots) {
    test(`${row.name} is a bot`, () => {
      assert.equal(parseUserAgent(row.ua).bot, true);
    });
  }

  // isbot calls these bots; we do not (see HTTP_CLIENT_LIBRARIES): they are server-side callers of the API.
  const httpClients = ['curl/8.5.0', 'node', 'undici', 'python-requests/2.31.0', 'Go-http-client/1.1', 'axios/1.6.0', 'okhttp/4.12.0', 'Wget/1.21.4', 'grpc-node-js/1.14.7', 'acme-backend/2.0 build/7'];
  for (const ua of httpClients) {
    test(`the HTTP library UA "${ua}" is a server-side caller: not a bot, device unknown`, () => {
      assert.deepEqual({ ...parseUserAgent(ua) }, { bot: false, device: 'unknown' });
    });
  }

  test('an overlong UA is classified by its first 512 chars and cached under them', () => {
    const classifier = new UserAgentClassifier();
    const base = devices[0]!.ua;
    const a = classifier.classify(base + ' '.repeat(600) + 'a');
    const b = classifier.classify(base + ' '.repeat(600) + 'b');
    assert.equal(a.device, 'desktop');
    assert.equal(a, b);
    assert.equal(classifier.cachedCount, 1);
  });

  test('the LRU evicts the least recently used entry', () => {
    const lru = new LruCache<string, number>(2);
    lru.set('a', 1);
    lru.set('b', 2);
    assert.equal(lru.get('a'), 1); // a is now younger than b
    lru.set('c', 3);
    assert.equal(lru.get('b'), undefined);
    assert.equal(lru.get('a'), 1);
    assert.equal(lru.get('c'), 3);
    assert.equal(lru.size, 2);
  });
});

// ---------------------------------------------------------------------------------------------------------------
describe('country', async () => {
  const enricher = await createEnricher({ salts: new MemorySaltStore(), now: at('2026-11-21T12:00:00Z') });
  const ua = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36';
  // Expected values were read from the shipped database (ip-location-db geo-whois-asn-country, build 2026-06-17)
  // and agree with the registries: update them with the database.
  const lookups: Array<[string, string, string]> = [
    ['8.8.8.8', 'US', 'Google Public DNS'],
    ['1.1.1.1', 'AU', 'Cloudflare DNS, registered by APNIC research in Australia'],
    ['91.0.0.1', 'DE', 'Deutsche Telekom 91.0.0.0/10'],
    ['84.128.0.1', 'DE', 'Deutsche Telekom 84.128.0.0/10'],
    ['2003::1', 'DE', 'Deutsche Telekom 2003::/19'],
    ['126.0.0.1', 'JP', 'SoftBank 126.0.0.0/8'],
    ['133.0.0.1', 'JP', 'Japanese academic 133.0.0.0/8'],
    ['81.2.69.160', 'GB', 'a UK range'],
    ['200.147.67.142', 'BR', 'a Brazilian range'],
    ['41.0.0.1', 'ZA', 'a South African range'],
    ['2001:4860:4860::8888', 'US', 'Google Public DNS over IPv6'],
    ['::ffff:8.8.8.8', 'US', 'an IPv4-mapped IPv6 socket address'],
  ];
  for (const [ip, country, why] of lookups) {
    test(`${ip} (${why}) is in ${country}`, () => {
      assert.equal(enricher.classify({ ip, userAgent: ua }).country, country);
    });
  }

  const unknown: Array<[string, string]> = [
    ['10.1.2.3', 'private 10/8'],
    ['172.16.5.4', 'private 172.16/12'],
    ['172.31.255.255', 'the top of private 172.16/12'],
    ['192.168.1.1', 'private 192.168/16, which the shipped database maps to AU'],
    ['127.0.0.1', 'loopback'],
    ['169.254.1.1', 'IPv4 link-local'],
    ['100.64.0.1', 'carrier-grade NAT'],
    ['192.0.2.1', 'documentation'],
    ['::1', 'IPv6 loopback'],
    ['fc00::1', 'unique local fc00::/7'],
    ['fd12:3456:789a::1', 'unique local fd00::/8'],
    ['fe80::1', 'IPv6 link-local'],
    ['fe80::1%eth0', 'IPv6 link-local with a zone'],
    ['2001:db8::1', 'IPv6 documentation'],
    ['::ffff:192.168.0.1', 'IPv4-mapped private'],
    ['', 'an unknown address'],
    ['not-an-ip', 'garbage'],
  ];
  for (const [ip, why] of unknown) {
    test(`${JSON.stringify(ip)} (${why}) is Unknown`, () => {
      assert.equal(enricher.classify({ ip, userAgent: ua }).country, 'Unknown');
    });
  }

  test('public neighbours of private ranges are public', () => {
    for (const ip of ['172.15.255.255', '172.32.0.0', '11.0.0.0', '100.128.0.0', '192.169.0.0', 'fbff::1', '2003::1']) {
      assert.equal(isNonPublicAddress(ip), false, ip);
    }
  });

  test('classify returns device, bot, country, browser and os together', () => {
    assert.deepEqual(enricher.classify({ ip: '91.0.0.1', userAgent: ua }), {
      bot: false,
      device: 'desktop',
      country: 'DE',
      browser: 'Chrome',
      os: 'Windows',
    });
  });

  test('an empty UA from a public address is a desktop-less, bot-less caller with a country', () => {
    assert.deepEqual(enricher.classify({ ip: '8.8.8.8', userAgent: '' }), { bot: false, device: 'unknown', country: 'US' });
  });

  test('a configured database that does not exist stops startup', async () => {
    await assert.rejects(
      createEnricher({ geoDbPath: '/nonexistent/geo.mmdb', salts: new MemorySaltStore(), now: Date.now() }),
      /cannot open the IP-to-country database/,
    );
  });
});

// ---------------------------------------------------------------------------------------------------------------
describe('client ip', () => {
  const rows: Array<{ why: string; socket: string | undefined; xff: string | undefined; trust: boolean; ip: string }> = [
    { why: 'without trust proxy the socket address is used', socket: '203.0.113.7', xff: '8.8.8.8', trust: false, ip: '203.0.113.7' },
    { why: 'the ::ffff: prefix is stripped', socket: '::ffff:8.8.4.4', xff: undefined, trust: false, ip: '8.8.4.4' },
    { why: 'with trust proxy and no header the socket address is used', socket: '::ffff:10.0.0.5', xff: undefined, trust: true, ip: '10.0.0.5' },
    { why: 'with trust proxy the single forwarded address is used', socket: '10.0.0.5', xff: '8.8.8.8', trust: true, ip: '8.8.8.8' },
    { why: 'with trust proxy the rightmost public hop wins over client-supplied ones', socket: '10.0.0.5', xff: '1.2.3.4, 8.8.8.8', trust: true, ip: '8.8.8.8' },
    { why: 'with trust proxy private proxy hops are skipped', socket: '127.0.0.1', xff: '9.9.9.9, 10.0.0.2, 192.168.1.1', trust: true, ip: '9.9.9.9' },
    { why: 'with trust proxy an all-private chain falls back to the socket', socket: '10.0.0.5', xff: '10.0.0.9, 10.0.0.8', trust: true, ip: '10.0.0.5' },
    { why: 'with trust proxy a garbage hop stops the walk', socket: '10.0.0.5', xff: '8.8.8.8, garbage, 10.0.0.2', trust: true, ip: '10.0.0.5' },
    { why: 'with trust proxy an IPv4 hop with a port is read', socket: '10.0.0.5', xff: '8.8.8.8:51234', trust: true, ip: '8.8.8.8' },
    { why: 'with trust proxy a bracketed IPv6 hop with a port is read', socket: '10.0.0.5', xff: '[2001:4860::1]:443', trust: true, ip: '2001:4860::1' },
    { why: 'with trust proxy a mapped IPv4 hop is stripped', socket: '10.0.0.5', xff: '::ffff:8.8.8.8', trust: true, ip: '8.8.8.8' },
    { why: 'an absent socket address is empty', socket: undefined, xff: undefined, trust: false, ip: '' },
  ];
  for (const row of rows) {
    test(row.why, () => {
      assert.equal(clientIp(row.socket, row.xff, row.trust), row.ip);
    });
  }

  test('a forwarded header padded with thousands of hops costs a bounded walk', () => {
    const padded = `${Array.from({ length: 5000 }, () => '10.0.0.1').join(', ')}`;
    assert.equal(clientIp('10.0.0.5', `8.8.8.8, ${padded}`, true), '10.0.0.5');
  });

  test('any socket address and forwarded header give an address or nothing, without throwing', () => {
    const hop = fc.oneof(fc.ipV4(), fc.ipV6(), fc.string());
    fc.assert(
      fc.property(fc.option(hop, { nil: undefined }), fc.array(hop, { maxLength: 20 }), fc.boolean(), (socket, hops, trust) => {
        const ip = clientIp(socket, hops.join(', '), trust);
        assert.ok(ip === '' || normalizeIp(ip) === ip);
      }),
      { numRuns: 2000 },
    );
  });

  test('normalizeIp rejects what is not an address', () => {
    assert.equal(normalizeIp('999.1.1.1'), '');
    assert.equal(normalizeIp('[::1'), '');
    assert.equal(normalizeIp(' 8.8.8.8 '), '8.8.8.8');
  });
});

// ---------------------------------------------------------------------------------------------------------------
describe('anonymous session ids and daily salts', () => {
  const client = { ip: '198.100.1.1', userAgent: 'Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0' };
  const day1 = at('2026-11-20T00:00:00Z');
  const day2 = at('2026-11-21T00:00:00Z');
  const day3 = at('2026-11-22T00:00:00Z');

  test('a derived session id is stable within a UTC day', async () => {
    const enricher = await createEnricher({ salts: new MemorySaltStore(), now: day1 });
    const first = enricher.anonymousSessionId('p1', client, day1 + 1);
    assert.match(first, /^[A-Za-z0-9_-]{22}$/);
    assert.equal(enricher.anonymousSessionId('p1', client, day1 + 12 * HOUR), first);
    assert.equal(enricher.anonymousSessionId('p1', client, day2 - 1), first);
  });

  test('a derived session id differs across UTC days', async () => {
    const enricher = await createEnricher({ salts: new MemorySaltStore(), now: day1 });
    assert.notEqual(enricher.anonymousSessionId('p1', client, day2 - 1), enricher.anonymousSessionId('p1', client, day2));
  });

  test('a derived session id differs across projects, addresses and user agents', async () => {
    const enricher = await createEnricher({ salts: new MemorySaltStore(), now: day1 });
    const base = enricher.anonymousSessionId('p1', client, day1);
    assert.notEqual(enricher.anonymousSessionId('p2', client, day1), base);
    assert.notEqual(enricher.anonymousSessionId('p1', { ...client, ip: '198.100.1.2' }, day1), base);
    assert.notEqual(enricher.anonymousSessionId('p1', { ...client, userAgent: `${client.userAgent} ` }, day1), base);
    // fields are length-prefixed, so moving characters between them changes the id
    assert.notEqual(enricher.anonymousSessionId('p1', { ip: '1.2.3.4', userAgent: 'ab' }, day1), enricher.anonymousSessionId('p1', { ip: '1.2.3.4a', userAgent: 'b' }, day1));
  });

  test('the mapped and plain forms of an address give the same id', async () => {
    const enricher = await createEnricher({ salts: new MemorySaltStore(), now: day1 });
    assert.equal(
      enricher.anonymousSessionId('p1', { ...client, ip: '::ffff:198.100.1.1' }, day1),
      enricher.anonymousSessionId('p1', client, day1),
    );
  });

  test('a restart with the same store derives the same ids for the same day', async () => {
    const store = new MemorySaltStore();
    const before = await createEnricher({ salts: store, now: day1 + HOUR });
    const id = before.anonymousSessionId('p1', client, day1 + HOUR);
    const after = await createEnricher({ salts: store, now: day1 + 2 * HOUR });
    assert.equal(after.anonymousSessionId('p1', client, day1 + 2 * HOUR), id);
  });

  test('startup creates and persists a 32-byte salt for today', async () => {
    const store = new MemorySaltStore();
    await createEnricher({ salts: store, now: day1 + HOUR });
    assert.deepEqual(store.days(), ['2026-11-20']);
    assert.match(store.salts[0]!.key, /^[0-9a-f]{64}$/);
  });

  test('rotation keeps today and yesterday and deletes salts older than 48 h from the store', async () => {
    const store = new MemorySaltStore();
    const enricher = await createEnricher({ salts: store, now: day1 + HOUR });
    await enricher.rotateSalts(day2 + HOUR);
    assert.deepEqual(store.days(), ['2026-11-20', '2026-11-21']);
    await enricher.rotateSalts(day3 - 1);
    assert.deepEqual(store.days(), ['2026-11-20', '2026-11-21']);
    await enricher.rotateSalts(day1 + SALT_RETENTION_MS);
    assert.deepEqual(store.days(), ['2026-11-21', '2026-11-22']);
  });

  test('salts loaded from the store that are older than 48 h are deleted at startup', async () => {
    const key = 'ab'.repeat(32);
    const store = new MemorySaltStore([
      { day: '2026-11-10', key },
      { day: '2026-11-19', key },
      { day: '2026-11-20', key },
    ]);
    await createEnricher({ salts: store, now: day2 + HOUR });
    assert.deepEqual(store.days(), ['2026-11-20', '2026-11-21']);
    assert.equal(store.salts.find((s) => s.day === '2026-11-20')?.key, key);
  });

  test('malformed stored salts are dropped', async () => {
    const store = new MemorySaltStore([
      { day: 'yesterday', key: 'ab'.repeat(32) },
      { day: '2026-11-20', key: 'short' },
    ]);
    await createEnricher({ salts: store, now: day1 + HOUR });
    assert.deepEqual(store.days(), ['2026-11-20']);
    assert.notEqual(store.salts[0]!.key, 'short');
  });

  test('the first id of a new day creates its salt at once and persists it in the background', async () => {
    const store = new MemorySaltStore();
    const enricher = await createEnricher({ salts: store, now: day1 + HOUR });
    enricher.anonymousSessionId('p1', client, day2 + 5);
    await settle();
    assert.deepEqual(store.days(), ['2026-11-20', '2026-11-21']);
  });

  test('a failed background save is repeated by the next rotation', async () => {
    const store = new MemorySaltStore();
    const enricher = await createEnricher({ salts: store, now: day1 + HOUR });
    store.failNextSave = true;
    const id = enricher.anonymousSessionId('p1', client, day2 + 5);
    await settle();
    assert.deepEqual(store.days(), ['2026-11-20']);
    await enricher.rotateSalts(day2 + HOUR);
    assert.deepEqual(store.days(), ['2026-11-20', '2026-11-21']);
    const restarted = await createEnricher({ salts: store, now: day2 + 2 * HOUR });
    assert.equal(restarted.anonymousSessionId('p1', client, day2 + 2 * HOUR), id);
  });

  test('a rotation that changes nothing does not write', async () => {
    const store = new MemorySaltStore();
    const enricher = await createEnricher({ salts: store, now: day1 + HOUR });
    const saves = store.saves.length;
    await enricher.rotateSalts(day1 + 2 * HOUR);
    assert.equal(store.saves.length, saves);
  });

  test('a rotation reports a failed save to its caller', async () => {
    const store = new MemorySaltStore();
    const enricher = await createEnricher({ salts: store, now: day1 + HOUR });
    store.failNextSave = true;
    await assert.rejects(enricher.rotateSalts(day2 + HOUR), /disk full/);
  });

  test('what reaches the salt store holds neither the client IP nor the User-Agent', async () => {
    const store = new MemorySaltStore();
    const enricher = await createEnricher({ salts: store, now: day1 + HOUR });
    enricher.classify(client);
    enricher.anonymousSessionId('p1', client, day2 + 1);
    await enricher.rotateSalts(day2 + HOUR);
    const written = JSON.stringify(store.saves);
    assert.ok(!written.includes(client.ip));
    assert.ok(!written.includes('Firefox'));
  });
});

// ---------------------------------------------------------------------------------------------------------------
describe('privacy of the enrich module', () => {
  test('no file of src/enrich logs or writes files (the IP and UA must not leave memory)', () => {
    const dir = join(import.meta.dirname, '..', 'src', 'enrich');
    for (const file of readdirSync(dir).filter((f) => f.endsWith('.ts'))) {
      const source = readFileSync(join(dir, file), 'utf8');
      assert.doesNotMatch(source, /\bconsole\.|process\.(?:stdout|stderr)|writeFile|appendFile|createWriteStream/, file);
    }
  });
});
