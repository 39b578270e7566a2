import type { StoredEvent } from '../src/core/types.ts';
import { RECENT_RETURNED, RECENT_RING_SIZE } from '../src/core/limits.ts';

/**
 * A deliberately naive recomputation of the metrics contract straight from the list of events, written without
 * the core's data structures, so the two can be compared.
 */
export function referenceMetrics(all: StoredEvent[], projectId: string, from: string, to: string, tracked: string[] = []) {
  const mine = all.filter((e) => e.p === projectId);
  const inRange = mine.filter((e) => e.day >= from && e.day <= to);
  const count = (keys: string[]) => {
    const m: Record<string, number> = {};
    for (const k of keys) m[k] = (m[k] ?? 0) + 1;
    return m;
  };
  const sessions = new Map<string, { first: StoredEvent; earliest: StoredEvent; pv: number; entry?: string }>();
  for (const e of inRange) {
    const k = `${e.sessionId}\u0000${e.day}`;
    const s = sessions.get(k) ?? { first: e, earliest: e, pv: 0 };
    // the visit's visitor: its earliest event's (equal times: the one earlier in the log)
    if (e.ts < s.earliest.ts) s.earliest = e;
    if (e.event === 'page_view') {
      if (s.pv === 0) s.entry = e.path || '/';
      s.pv++;
    }
    sessions.set(k, s);
  }
  const revenue: Record<string, { total: number; purchases: number }> = {};
  for (const e of inRange) {
    const { value, currency } = e.params;
    if (e.event !== 'purchase' || typeof value !== 'number' || typeof currency !== 'string' || !/^[a-z]{3}$/i.test(currency)) continue;
    const r = (revenue[currency.toUpperCase()] ??= { total: 0, purchases: 0 });
    r.total += value;
    r.purchases++;
  }
  for (const r of Object.values(revenue)) r.total = Math.round(r.total * 100) / 100;
  const props: Record<string, Record<string, number>> = {};
  for (const key of tracked) props[key] = count(inRange.flatMap((e) => (e.props && key in e.props ? [e.props[key]!] : [])));
  const list = [...sessions.values()];
  const withPv = list.filter((s) => s.pv >= 1).length;
  const bounces = list.filter((s) => s.pv === 1).length;
  const rate = (n: number, d: number) => (d === 0 ? '0.0%' : `${((n / d) * 100).toFixed(1)}%`);
  const ring = mine.slice(-RECENT_RING_SIZE).reverse();
  return {
    users: new Set(list.map((s) => s.earliest.user)).size,
    sessions: list.length,
    pageviews: inRange.filter((e) => e.event === 'page_view').length,
    bounceRate: rate(bounces, withPv),
    trafficSources: count(list.map((s) => s.first.source)),
    countries: count(list.map((s) => s.first.country)),
    devices: count(list.map((s) => s.first.device)),
    pages: count(inRange.filter((e) => e.event === 'page_view').map((e) => e.path || '/')),
    events: count(inRange.map((e) => e.event)),
    entryPages: count(list.flatMap((s) => (s.entry === undefined ? [] : [s.entry]))),
    browsers: count(list.map((s) => s.first.browser ?? 'Unknown')),
    operatingSystems: count(list.map((s) => s.first.os ?? 'Unknown')),
    utmMediums: count(list.flatMap((s) => (s.first.utmMedium ? [s.first.utmMedium] : []))),
    utmCampaigns: count(list.flatMap((s) => (s.first.utmCampaign ? [s.first.utmCampaign] : []))),
    revenue,
    props,
    recentEvents: ring
      .filter((e) => e.day >= from && e.day <= to)
      .slice(0, RECENT_RETURNED)
      .map((e) => ({ ts: e.ts, event: e.event, url: e.url, referrer: e.referrer, source: e.source, country: e.country, device: e.device, sessionId: e.sessionId })),
  };
}
