import type { StoredEvent } from '../../src/core/types.ts';

/**
 * Deterministic, realistic traffic for the benches: sessions of a few events spread evenly over N days, users
 * mostly anonymous (user = session), 20 paths, 8 sources, 30 countries, 3 devices, an eventId on every event
 * (the tracker sends one), the page context the tracker sends (screen, language), browser/OS from the UA, and
 * everything the insight figures count: UTM medium/campaign on a fifth of the sessions, a tracked `plan` property
 * on sign-ups, and a third of the sign-ups are purchases in one of 5 currencies.
 */

/** mulberry32: tiny, fast and good enough to spread synthetic traffic; seeded so every run is the same. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const SITE = 'https://shop.example';
export const PATHS = [
  '/', '/pricing', '/features', '/about', '/contact', '/blog', '/blog/launch', '/blog/privacy-first', '/docs',
  '/docs/install', '/docs/api', '/docs/faq', '/products', '/products/1', '/products/2', '/products/3', '/cart',
  '/checkout', '/signup', '/login',
];
/** [referrer as sent, the source it classifies to] */
export const SOURCES: Array<[string, string]> = [
  ['', 'Direct'],
  ['https://www.google.com/', 'Google'],
  ['https://www.bing.com/', 'Bing'],
  ['https://duckduckgo.com/', 'DuckDuckGo'],
  ['https://t.co/abc', 'Twitter'],
  ['https://news.ycombinator.com/item?id=1', 'Hacker News'],
  ['https://www.reddit.com/r/webdev/', 'Reddit'],
  ['https://blog.example/post', 'blog.example'],
];
export const COUNTRIES = [
  'US', 'DE', 'GB', 'FR', 'IN', 'BR', 'CA', 'NL', 'ES', 'IT', 'PL', 'SE', 'JP', 'AU', 'CH', 'AT', 'BE', 'DK', 'NO',
  'FI', 'IE', 'PT', 'CZ', 'MX', 'AR', 'KR', 'SG', 'ZA', 'NZ', 'TR',
];
export const DEVICES = ['desktop', 'mobile', 'tablet'];
/** A few real browser User-Agents (a site sees thousands; the enricher caches each). */
export const USER_AGENTS = [
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36',
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15',
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Mobile Safari/537.36',
  'Mozilla/5.0 (X11; Linux x86_64; rv:127.0) Gecko/20100101 Firefox/127.0',
  'Mozilla/5.0 (iPad; CPU OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1',
];
const BROWSERS: Array<[string, string]> = [['Chrome', 'Windows'], ['Safari', 'macOS'], ['Mobile Safari', 'iOS'], ['Chrome', 'Android'], ['Firefox', 'Linux']];
const SCREENS = ['1920x1080', '1440x900', '390x844', '412x915', '2560x1440'];
const LANGUAGES = ['en-US', 'de-DE', 'fr-FR', 'en-GB', 'es-ES'];
const MEDIUMS = ['email', 'cpc', 'social', 'affiliate'];
const CAMPAIGNS = Array.from({ length: 40 }, (_, i) => `campaign-${i}`);
const PLANS = ['free', 'starter', 'pro', 'team', 'enterprise'];
const CURRENCIES = ['EUR', 'USD', 'GBP', 'JPY', 'CHF'];
/** The bench project's tracked_props. */
export const TRACKED_PROPS = ['plan'];
const EVENTS = ['page_view', 'page_view', 'page_view', 'page_view', 'page_view', 'page_view', 'page_view', 'page_view', 'click', 'signup'];

const DAY_MS = 86_400_000;

export interface TrafficShape {
  projectId: string;
  /** total events */
  events: number;
  /** the last day (UTC, YYYY-MM-DD); events spread over `days` days ending there */
  lastDay: string;
  days: number;
  seed?: number;
}

/** Share of sessions whose events carry a logged-in userId (the rest count as users by session). */
const LOGGED_IN = 0.1;
/** Logged-in users come back: this many distinct ids across the whole period. */
const USER_POOL = 200_000;
/** Mean events per session ≈ 3.3, so 10M events ≈ 3M sessions. */
const MEAN_EXTRA_EVENTS = 2.3;

/** `shape.events` StoredEvents in log order (days ascending), ~events/3.3 distinct sessions (counted in `stats`). */
export function* storedEvents(shape: TrafficShape, stats: { sessions: number } = { sessions: 0 }): Generator<StoredEvent> {
  const rand = rng(shape.seed ?? 42);
  const firstMidnight = Date.parse(`${shape.lastDay}T00:00:00Z`) - (shape.days - 1) * DAY_MS;
  let made = 0;
  let sessions = 0;
  while (made < shape.events) {
    const dayIndex = Math.floor((made * shape.days) / shape.events);
    let ts = firstMidnight + dayIndex * DAY_MS + Math.floor(rand() * (DAY_MS - 600_000));
    stats.sessions = sessions + 1;
    const sessionId = `s${(sessions++).toString(36)}-${Math.floor(rand() * 1e9).toString(36)}`;
    const userId = rand() < LOGGED_IN ? `user-${Math.floor(rand() * USER_POOL)}` : undefined;
    const [referrer, source] = SOURCES[Math.floor(rand() * SOURCES.length)]!;
    const country = COUNTRIES[Math.floor(rand() ** 2 * COUNTRIES.length)]!;
    const deviceIndex = Math.floor(rand() * DEVICES.length);
    const [browser, os] = BROWSERS[Math.floor(rand() * BROWSERS.length)]!;
    const screen = SCREENS[deviceIndex % SCREENS.length]!;
    const language = LANGUAGES[Math.floor(rand() * LANGUAGES.length)]!;
    const n = Math.min(shape.events - made, 1 + Math.floor(-Math.log(1 - rand()) * MEAN_EXTRA_EVENTS));
    const utm = rand() < 0.2 ? { medium: MEDIUMS[Math.floor(rand() * MEDIUMS.length)]!, campaign: CAMPAIGNS[Math.floor(rand() * CAMPAIGNS.length)]! } : undefined;
    for (let k = 0; k < n; k++) {
      const path = PATHS[Math.floor(rand() ** 1.5 * PATHS.length)]!;
      let event = EVENTS[Math.floor(rand() * EVENTS.length)]!;
      const url = k === 0 && utm ? `${SITE}${path}?utm_medium=${utm.medium}&utm_campaign=${utm.campaign}` : `${SITE}${path}`;
      let params: StoredEvent['params'] = event === 'click' ? { target: 'buy-button' } : {};
      let props: Record<string, string> | undefined;
      if (event === 'signup') {
        const plan = PLANS[Math.floor(rand() * PLANS.length)]!;
        props = { plan };
        params = { plan };
        if (rand() < 0.3) {
          event = 'purchase';
          params = { plan, value: Math.round(rand() * 20_000) / 100, currency: CURRENCIES[Math.floor(rand() * CURRENCIES.length)]! };
        }
      }
      const e: StoredEvent = {
        t: 'e',
        p: shape.projectId,
        ts,
        rt: ts + 150,
        day: new Date(ts).toISOString().slice(0, 10),
        event,
        url,
        path,
        referrer: k === 0 ? referrer : SITE + '/',
        source,
        sessionId,
        user: userId !== undefined ? `u:${userId}` : `s:${sessionId}`,
        country,
        device: DEVICES[deviceIndex]!,
        params,
        eventId: `${(made + k).toString(36)}-${Math.floor(rand() * 1e9).toString(36)}`,
        browser,
        os,
        ctx: { screen, language },
      };
      if (k === 0 && utm) {
        e.utmMedium = utm.medium;
        e.utmCampaign = utm.campaign;
      }
      if (props) e.props = props;
      if (userId !== undefined) e.userId = userId;
      if (k > 0) e.source = 'Direct'; // later events of a session come from the site itself
      yield e;
      ts += 5_000 + Math.floor(rand() * 60_000);
    }
    made += n;
  }
}

/** Events as a browser sends them to POST /analytics (the tracker's shape), `count` distinct ones. */
export function wireEvents(count: number, seed = 7): Array<Record<string, unknown>> {
  const rand = rng(seed);
  const out: Array<Record<string, unknown>> = [];
  for (let i = 0; i < count; i++) {
    const [referrer] = SOURCES[Math.floor(rand() * SOURCES.length)]!;
    const event = EVENTS[Math.floor(rand() * EVENTS.length)]!;
    const utm = rand() < 0.2 ? `?utm_medium=${MEDIUMS[i % MEDIUMS.length]!}&utm_campaign=${CAMPAIGNS[i % CAMPAIGNS.length]!}` : '';
    out.push({
      event,
      url: `${SITE}${PATHS[Math.floor(rand() * PATHS.length)]!}${utm}`,
      referrer,
      sessionId: `w${i.toString(36)}-${Math.floor(rand() * 1e9).toString(36)}`,
      eventParams: event === 'signup' ? { plan: PLANS[i % PLANS.length]! } : {},
      eventId: `e${Date.now().toString(36)}-__N__`, // the load generator makes each one unique
      screen: SCREENS[i % SCREENS.length]!,
      language: LANGUAGES[i % LANGUAGES.length]!,
    });
  }
  return out;
}
