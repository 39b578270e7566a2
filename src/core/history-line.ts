import type { StoredEvent } from './types.ts';

/**
 * One stored event as a line of GET /projects/{id}/export: exactly the fields POST /projects/{id}/history takes, with
 * the values the service derived at ingestion (source, browser, OS, device, country, anonymous session id), so that
 * importing the line into an empty project folds the same record again. Empty values are left out (a custom event
 * has no `url`, a direct visit no `referrer`), never written as "" that the schema would refuse.
 */
export function exportLine(e: StoredEvent): Record<string, unknown> {
  // Page context first: the named fields below win over a context key of the same name.
  const out: Record<string, unknown> = e.ctx ? { ...e.ctx } : {};
  out.event = e.event;
  out.timestamp = e.ts;
  if (e.url !== '') out.url = e.url;
  if (e.referrer !== '') out.referrer = e.referrer;
  out.source = e.source;
  out.sessionId = e.sessionId;
  if (e.userId !== undefined) out.userId = e.userId;
  if (e.fingerprint !== undefined) out.fingerprint = e.fingerprint;
  out.country = e.country;
  out.device = e.device;
  if (e.browser !== undefined) out.browser = e.browser;
  if (e.os !== undefined) out.os = e.os;
  if (Object.keys(e.params).length > 0) out.eventParams = e.params;
  if (e.items !== undefined) out.items = e.items;
  if (e.eventId !== undefined) out.eventId = e.eventId;
  if (e.rev === 1) out.revenue = true; // it came with revenue: a purchase whatever its name (StoredEvent.rev)
  return out;
}

/** Export order: time, then log order (a stable sort over records read in sequence order). */
export function byTime(a: { ts: number }, b: { ts: number }): number {
  return a.ts - b.ts;
}
