import { api } from './helpers.ts';

/**
 * Sixty days of traffic that looks like a real small site: weekly rhythm and growth, a dozen sources (one a
 * newsletter campaign), landing pages and visits of one to five pages, countries, devices and browsers, sign-ups,
 * downloads and purchases, and a few visitors right now. Deterministic (seeded PRNG), so screenshots only change
 * when the dashboard does.
 *
 * Events can only be sent up to 31 days back, so the service's clock is moved day by day while seeding: `clock.set`
 * sets what the service thinks is now.
 */

export interface Clock {
  set(ms: number): void;
  now(): number;
}

/** A service clock that runs from whatever it was last set to. */
export function movableClock(start: number): Clock {
  let offset = start - Date.now();
  return { set: (ms) => (offset = ms - Date.now()), now: () => Date.now() + offset };
}

const DAY_MS = 86_400_000;
/** Days seeded before "now": the last 30 days and the 30 before them, for the comparison. */
const SEEDED_DAYS = 60;

const UAS = {
  chromeWin: ['desktop', 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36'],
  safariMac: ['desktop', 'Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.0 Safari/605.1.15'],
  firefoxLinux: ['desktop', 'Mozilla/5.0 (X11; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0'],
  edgeWin: ['desktop', 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36 Edg/130.0.0.0'],
  safariIos: ['mobile', 'Mozilla/5.0 (iPhone; CPU iPhone OS 18_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.0 Mobile/15E148 Safari/604.1'],
  chromeAndroid: ['mobile', 'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Mobile Safari/537.36'],
  ipad: ['tablet', 'Mozilla/5.0 (iPad; CPU OS 18_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.0 Mobile/15E148 Safari/604.1'],
} as const;
type Ua = keyof typeof UAS;

const W = <T>(pairs: Array<[T, number]>) => pairs;
const BROWSERS = W<Ua>([['chromeWin', 30], ['safariMac', 16], ['firefoxLinux', 7], ['edgeWin', 7], ['safariIos', 20], ['chromeAndroid', 15], ['ipad', 5]]);
const SOURCES = W<[string, string]>([
  ['', '30'], ['https://www.google.com/', '28'], ['https://news.ycombinator.com/item?id=42', '8'], ['https://t.co/x1', '6'],
  ['https://github.com/acme/analytics', '6'], ['https://duckduckgo.com/', '5'], ['https://www.reddit.com/r/selfhosted/', '5'],
  ['utm:newsletter:email:november-launch', '7'], ['https://www.bing.com/', '3'], ['https://www.linkedin.com/feed/', '2'],
  ['utm:mastodon:social:privacy-week', '2'],
].map(([s, w]) => [[s!, s!], Number(w)]));
const LANDING = W<string>([['/', 40], ['/pricing', 15], ['/blog/privacy-first-analytics', 15], ['/docs/getting-started', 10], ['/blog/why-we-dropped-cookies', 8], ['/features', 7], ['/about', 5]]);
const NEXT = W<string>([['/pricing', 30], ['/features', 20], ['/docs/getting-started', 18], ['/signup', 12], ['/docs/script-tag', 10], ['/blog', 6], ['/contact', 4]]);
const COUNTRIES = W<string>([['US', 26], ['DE', 14], ['GB', 10], ['FR', 7], ['IN', 6], ['NL', 5], ['CA', 5], ['SE', 3], ['JP', 3], ['BR', 3], ['ES', 3], ['AU', 3], ['PL', 2], ['CH', 2], ['IT', 2], ['AT', 1], ['NO', 1], ['FI', 1]]);
const HOURS = W<number>(Array.from({ length: 24 }, (_, h): [number, number] => [h, h < 6 ? 1 : h < 9 ? 4 : h < 18 ? 9 : h < 22 ? 6 : 2]));

function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Event = Record<string, unknown>;

export interface SeedResult {
  events: number;
}

/**
 * Seeds the project through the real ingest path with its secret key, day by day up to `now` (ms), then a few
 * visits in the last minutes; leaves the clock at `now`.
 */
export async function seedTraffic(url: string, secretKey: string, clock: Clock, now: number, origin = 'https://acme.example'): Promise<SeedResult> {
  const random = prng(20261120);
  const pick = <T>(pairs: Array<[T, number]>): T => {
    const total = pairs.reduce((s, [, w]) => s + w, 0);
    let r = random() * total;
    for (const [v, w] of pairs) if ((r -= w) < 0) return v;
    return pairs[pairs.length - 1]![0];
  };
  const today = Math.floor(now / DAY_MS) * DAY_MS;
  let sent = 0;
  let visitor = 0;
  const send = async (batches: Map<Ua, Event[]>) => {
    for (const [ua, events] of batches) {
      for (let i = 0; i < events.length; i += 500) {
        const batch = events.slice(i, i + 500);
        const res = await api(url, '/analytics', { key: secretKey, body: batch, headers: { 'user-agent': UAS[ua][1] } });
        if (res.status !== 200) throw new Error(`seeding failed: ${res.status} ${JSON.stringify(res.body)}`);
        sent += batch.length;
      }
    }
  };
  const visit = (batches: Map<Ua, Event[]>, start: number, tag: string, latest: number) => {
    const ua = pick(BROWSERS);
    const [source] = pick(SOURCES);
    const landing = pick(LANDING);
    const country = pick(COUNTRIES);
    const sessionId = `${tag}-${visitor++}`;
    // About one visitor in four comes back: the same fingerprint makes users < sessions, as on a real site.
    const fingerprint = `fp-${Math.floor(random() * 2500)}`;
    const query = source.startsWith('utm:') ? `?utm_source=${source.split(':')[1]}&utm_medium=${source.split(':')[2]}&utm_campaign=${source.split(':')[3]}` : '';
    const referrer = source.startsWith('utm:') ? '' : source;
    const base = { sessionId, fingerprint, country, device: UAS[ua][0] };
    const events: Event[] = [{ ...base, event: 'page_view', url: `${origin}${landing}${query}`, referrer, timestamp: start }];
    const depth = random() < 0.42 ? 1 : 2 + Math.floor(random() * 4);
    let t = start;
    for (let i = 1; i < depth; i++) {
      t = Math.min(latest, t + 20_000 + Math.floor(random() * 120_000));
      events.push({ ...base, event: 'page_view', url: `${origin}${pick(NEXT)}`, timestamp: t });
    }
    const roll = random();
    if (roll < 0.06) events.push({ ...base, event: 'download', url: `${origin}/docs/getting-started`, timestamp: t, eventParams: { file: random() < 0.6 ? 'analytics-linux.tar.gz' : 'analytics-macos.zip' } });
    else if (roll < 0.09) events.push({ ...base, event: 'signup', url: `${origin}/signup`, timestamp: t, eventParams: { plan: random() < 0.7 ? 'starter' : 'pro' } });
    else if (roll < 0.1) {
      const pro = random() < 0.4;
      events.push({ ...base, event: 'purchase', url: `${origin}/checkout`, timestamp: t, eventParams: { transaction_id: `t-${sessionId}`, value: pro ? 49 : 19, currency: random() < 0.75 ? 'USD' : 'EUR', plan: pro ? 'pro' : 'starter' } });
    } else if (roll < 0.14) events.push({ ...base, event: 'outbound_click', url: `${origin}${landing}`, timestamp: t, eventParams: { to: 'github.com' } });
    const list = batches.get(ua) ?? [];
    list.push(...events);
    batches.set(ua, list);
  };

  for (let d = SEEDED_DAYS - 1; d >= 0; d--) {
    const dayStart = today - d * DAY_MS;
    const weekday = new Date(dayStart).getUTCDay();
    // Growth of about 20 % a month, quieter weekends, a launch spike 9 days ago.
    const trend = 48 * Math.pow(1.2, (SEEDED_DAYS - d) / 30);
    const rhythm = weekday === 0 || weekday === 6 ? 0.62 : 1;
    const spike = d === 9 ? 2.4 : d === 8 ? 1.5 : 1;
    const visits = Math.round(trend * rhythm * spike * (0.85 + random() * 0.3));
    const batches = new Map<Ua, Event[]>();
    // Today's visits so far arrive before the last half hour, which the live visits below fill minute by minute.
    const cutoff = d === 0 ? now - 50 * 60_000 : dayStart + DAY_MS - 60_000;
    for (let i = 0; i < (d === 0 ? Math.round((visits * (now - dayStart)) / DAY_MS) : visits); i++) {
      const start = Math.min(cutoff - 10 * 60_000, dayStart + pick(HOURS) * 3_600_000 + Math.floor(random() * 3_600_000));
      visit(batches, start, `d${d}`, cutoff);
    }
    clock.set(Math.min(now - 45 * 60_000, dayStart + DAY_MS - 1));
    await send(batches);
  }
  // Right now: a handful of visits received in the last minutes (realtime counts receive time).
  for (let m = 29; m >= 0; m -= 1) {
    clock.set(now - m * 60_000);
    const batches = new Map<Ua, Event[]>();
    const visits = m < 5 || random() < 0.5 ? 1 : 0;
    for (let i = 0; i < visits; i++) visit(batches, now - m * 60_000 - 30_000, `live${m}`, now - m * 60_000);
    await send(batches);
  }
  clock.set(now);
  return { events: sent };
}
