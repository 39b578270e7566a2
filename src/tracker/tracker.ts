/**
 * The browser tracking script, served as GET /script.js (built by build.ts, gzip ≤ 1 KiB).
 *
 *   <script defer src="https://analytics.example/script.js" data-key="pk_..." data-project="p_..."></script>
 *
 * Attributes: data-key (a pk_ key), data-project, optional data-api (ingestion URL; default: /analytics on the
 * origin the script came from), optional data-allow-local (also send from localhost and automated browsers).
 *
 * Calls made before the script has loaded are kept by this stub and replayed in order:
 *
 *   <script>window.analytics=window.analytics||{q:[],track:function(){this.q.push(arguments)}}</script>
 *
 * No imports (it runs as a classic script), no cookies, and every entry point is wrapped: analytics must never
 * break the page that carries it.
 */

/** What a page may have put on window.analytics before we load: the queue stub, or us (loaded twice). */
interface AnalyticsGlobal {
  q?: ArrayLike<unknown>[];
  track?: unknown;
  /** set once this script owns the global, so a second copy of the tag does not double-count */
  l?: 1;
}

/** sessionStorage key; the value is "<session id>.<ms of last event>". */
const SESSION_KEY = '_a_sid';
/** 30 minutes without an event start a new session (CONTRACT "Clients", the usual web-analytics idle rule). */
const SESSION_IDLE_MS = 30 * 60 * 1000;

(() => {
  try {
    const w = window as Window & { analytics?: AnalyticsGlobal };
    const d = document;
    const n = navigator;
    const l = location;
    const h = history;
    const prev = w.analytics;
    // A defer/async classic script has currentScript while it runs; the selector covers odd loaders.
    const script = (d.currentScript || d.querySelector('script[data-key]')) as HTMLScriptElement | null;
    if (!script || (prev && prev.l)) return;
    const attr = (name: string) => script.getAttribute('data-' + name);
    const key = attr('key');
    const projectId = attr('project') || undefined;
    const api = attr('api') || new URL(script.src, l.href).origin + '/analytics';
    // Development machines and test robots would pollute real figures; data-allow-local opts back in.
    const off =
      attr('allow-local') == null &&
      (n.webdriver || l.protocol == 'file:' || /^(localhost|127(\.\d+){3}|\[::1\])$/.test(l.hostname));
    // Said once, so a developer testing locally knows why nothing arrives.
    if (off) console.info('analytics: not sent from a local page or automated browser; add data-allow-local to send');

    // randomUUID exists only in secure contexts; the fallback is unique enough for an idempotency key.
    const c = w.crypto;
    const uid = () =>
      c && c.randomUUID ? c.randomUUID() : Date.now().toString(36) + Math.random().toString(36).slice(2);

    // Kept in memory too, so a page whose storage throws (sandboxed iframe, privacy mode) keeps one session.
    let stored = '';
    const sessionId = () => {
      const now = Date.now();
      try {
        stored = sessionStorage.getItem(SESSION_KEY) || stored;
      } catch (e) {}
      const [id, last] = stored.split('.');
      const current = id && now - Number(last) < SESSION_IDLE_MS ? id : uid();
      stored = current + '.' + now;
      try {
        sessionStorage.setItem(SESSION_KEY, stored);
      } catch (e) {}
      return current;
    };

    // The document referrer belongs to the landing page only; later SPA views come from our own site.
    let referrer = d.referrer;
    const send = (event: unknown, eventParams?: unknown) => {
      try {
        if (off) return;
        fetch(api, {
          method: 'POST',
          // keepalive lets the request outlive the page (a click that navigates away, a tab being closed).
          keepalive: true,
          credentials: 'omit',
          headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + key },
          body: JSON.stringify({
            event,
            url: l.href,
            referrer,
            projectId,
            sessionId: sessionId(),
            eventParams: eventParams && typeof eventParams == 'object' ? eventParams : {},
            eventId: uid(),
            screen: screen.width + 'x' + screen.height,
            language: n.language,
          }),
        }).catch(() => {});
      } catch (e) {}
    };

    let lastPath: string | undefined;
    const pageView = (ref: string) => {
      try {
        if (l.pathname == lastPath) return; // replaceState for a filter or a hash change is not a new page
        lastPath = l.pathname;
        referrer = ref;
        send('page_view');
      } catch (e) {}
    };

    // Wrap both history methods: SPA routers navigate with them and no event reports it.
    (['pushState', 'replaceState'] as const).forEach((method) => {
      const original = h[method];
      h[method] = function (this: History, ...args: Parameters<History['pushState']>) {
        const result = original.apply(this, args);
        pageView('');
        return result;
      };
    });
    w.addEventListener('popstate', () => pageView(''));

    w.analytics = { track: send, l: 1 };
    pageView(referrer);
    const queued = prev && prev.q;
    if (queued) for (let i = 0; i < queued.length; i++) send.apply(null, queued[i] as [unknown, unknown]);
  } catch (e) {}
})();
