import { createHash } from 'node:crypto';
import type { HistoryExtras } from '../core/event-schema.ts';
import { normalizeEvent } from '../core/normalize.ts';
import type { StoredEvent } from '../core/types.ts';
import { classifySource, UNKNOWN_COUNTRY, type Enricher } from '../enrich/index.ts';
import type { ProjectRecord } from '../store/records.ts';
import { readEvent } from './batch-rules.ts';
import type { ErrorDetail } from './types.ts';

/**
 * The records of a POST /projects/{id}/history batch: the rules of POST /analytics in history mode. The request's
 * own facts (the importer's IP and User-Agent) describe the importer, not the visitors, so nothing is derived from
 * them: an event's source, browser and OS are taken as given (as export wrote them) or derived from the event
 * itself (its referrer and URL; a `userAgent` field of page context), its device and country as given or unknown.
 */

export interface HistoryBatch {
  records: StoredEvent[];
  /** the eventIds of `records` (events sent without one are not de-duplicated, as on POST /analytics) */
  ids: Set<string>;
  duplicates: number;
  details: ErrorDetail[];
  /** the index of an event naming another project (403) */
  foreign?: { index: number; projectId: string };
}

/**
 * A visit needs a session id: without one, an event's visit is its visitor's day (userId, else fingerprint), else
 * the event alone. Hashed so no identifier is repeated in a second field.
 */
function historySessionId(input: { userId?: string | undefined; fingerprint?: string | undefined; eventId?: string | undefined }, index: number, now: number): string {
  const basis = input.userId ? `u\u0000${input.userId}` : input.fingerprint ? `f\u0000${input.fingerprint}` : input.eventId ? `e\u0000${input.eventId}` : `i\u0000${now}\u0000${index}`;
  return `h_${createHash('sha256').update(basis).digest('base64url').slice(0, 22)}`;
}

export function historyBatch(
  project: ProjectRecord,
  events: readonly unknown[],
  enricher: Enricher,
  seen: (eventId: string) => boolean,
  now: number,
  guarded = false,
): HistoryBatch {
  const details: ErrorDetail[] = [];
  const records: StoredEvent[] = [];
  const ids = new Set<string>();
  let duplicates = 0;
  for (let index = 0; index < events.length; index++) {
    const input = readEvent(events[index], index, 'history', details, guarded);
    if (!input) continue;
    if (input.projectId !== undefined && input.projectId !== project.id) return { records, ids, duplicates, details, foreign: { index, projectId: input.projectId } };
    const extras = input as HistoryExtras & { userAgent?: unknown };
    const classified = classifySource(input.referrer ?? '', input.url ?? '');
    const ua = typeof extras.userAgent === 'string' ? enricher.classify({ ip: '', userAgent: extras.userAgent }) : undefined;
    const eventId = input.eventId;
    const normalized = normalizeEvent(input, {
      projectId: project.id,
      timezone: project.timezone,
      now,
      source: extras.source ?? classified.source,
      referrer: classified.referrer,
      sessionId: input.sessionId ?? historySessionId(input, index, now),
      device: ua?.device ?? 'unknown',
      country: UNKNOWN_COUNTRY,
      browser: extras.browser ?? ua?.browser,
      os: extras.os ?? ua?.os,
      trackedProps: project.trackedProps,
      history: true,
    });
    if (!normalized.ok) {
      details.push({ index, path: normalized.path, message: normalized.message });
      continue;
    }
    if (details.length > 0) continue; // the batch is refused anyway: keep listing problems, store nothing
    if (eventId !== undefined) {
      // A repeat is acknowledged and not counted: earlier in this batch, in flight, or stored at any time before.
      if (ids.has(eventId) || seen(eventId)) {
        duplicates++;
        continue;
      }
      ids.add(eventId);
    }
    // an exported event that came with revenue (Plausible's Events API) counts as a purchase again
    if ((input as { revenue?: unknown }).revenue === true) normalized.event.rev = 1;
    records.push(normalized.event);
  }
  return { records, ids, duplicates, details };
}
