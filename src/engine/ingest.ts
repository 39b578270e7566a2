import { dayOf, nextUtcMonthStart } from '../core/dates.ts';
import type { EventInput } from '../core/event-schema.ts';
import { normalizeEvent } from '../core/normalize.ts';
import type { LogRecord } from '../core/types.ts';
import { classifySource, type ClientFacts, type Enricher } from '../enrich/index.ts';
import type { ProjectRecord } from '../store/records.ts';
import type { Admission } from './admission.ts';
import type { Backend } from './backend.ts';
import { batchSizeRefusal, invalidEvents, notStored, readEvent } from './batch-rules.ts';
import { historyBatch } from './history.ts';
import type { OperatorMetrics } from './operator-metrics.ts';
import { failure as fail, type Failure, type ErrorDetail, type HistoryAck, type IngestAck, type Outcome, type RateInfo, type RequestMeta } from './types.ts';

/**
 * The write path of events: POST /analytics (live) and POST /projects/{id}/history, each a list of small named steps.
 * Live: gate → batch size → request facts → sort the events (shape, scope, bot, enrich, de-duplicate) → quota →
 * append (await the commit) → acknowledge. A batch is atomic: one bad event and nothing is stored.
 */

export interface IngestParts {
  admission: Admission;
  backend: Backend;
  now(): number;
  /** operator metrics; absent = not collected */
  ops: OperatorMetrics | undefined;
}

/** Facts of the request, not of an event: worked out once per batch. */
interface RequestFacts {
  client: ClientFacts;
  enricher: Enricher;
  facts: ReturnType<Enricher['classify']>;
  /** the events' body passed guardJson whole (RequestMeta.guarded) */
  guarded: boolean;
  /** the day a bot's batch is counted in ('' for people) */
  botDay: string;
}

/** The events of a batch sorted into what to append, and the problems that refuse the batch. */
interface Sorted {
  records: LogRecord[];
  ids: Set<string>;
  stored: number;
  details: ErrorDetail[];
}

export class Ingest {
  constructor(private readonly parts: IngestParts) {}

  async ingest(meta: RequestMeta, events: unknown[]): Promise<Outcome<IngestAck>> {
    const ops = this.parts.ops;
    if (!ops) return this.live(meta, events);
    const started = performance.now();
    const out = await this.live(meta, events);
    const face = meta.face ?? 'http';
    ops.ingestSeconds(face, (performance.now() - started) / 1000);
    if (out.ok) {
      const c = out.value.counts ?? { stored: 0, duplicate: 0, bot: 0 };
      ops.eventOutcomes(face, { stored: c.stored, duplicate: c.duplicate, bot: c.bot });
    } else ops.eventOutcomes(face, { [out.error.code]: events.length });
    return out;
  }

  /**
   * POST /projects/{id}/history (ak_, sk_ of the project): the batch rules of ingest in history mode (see history.ts),
   * atomic like a live batch; not against the monthly allowance; eventIds remembered for good.
   */
  async history(meta: RequestMeta, projectId: string, events: unknown[]): Promise<Outcome<HistoryAck>> {
    const gate = this.parts.admission.admitChange(meta, projectId);
    if (!gate.ok) return gate;
    const { project, rate } = gate.value;
    const backend = this.parts.backend;
    const size = batchSizeRefusal(events, rate);
    if (size) return size;
    await backend.settled();
    const now = this.parts.now();
    const batch = historyBatch(project, events, backend.enricher, (id) => backend.seenForGood(project.id, id, now), now, meta.guarded === true);
    if (batch.foreign) {
      return fail('forbidden', `event ${batch.foreign.index} names project "${batch.foreign.projectId}", not "${project.id}"`, {}, rate);
    }
    if (batch.details.length > 0) return invalidEvents(batch.details, events.length, rate);
    // stored = 0: history is not counted against the monthly allowance
    const appended = await this.append(project.id, batch.records, batch.ids, 0, rate);
    if (typeof appended !== 'number') return appended;
    // the commit drops what it finds stored before (see Backend.commit): a repeat all the same
    return { ok: true, value: { accepted: appended, duplicates: batch.duplicates + batch.records.length - appended }, rate };
  }

  /**
   * Events for `project` under its publishable key's rules, sent without a key (Plausible's Events API: plausible.ts);
   * `revenue`: the events carry revenue, counted as a purchase's whatever their name.
   */
  asProject(meta: RequestMeta, project: ProjectRecord, events: unknown[], revenue = false): Promise<Outcome<IngestAck>> {
    return this.live(meta, events, async () => this.parts.admission.admitIngestForProject(meta, project), revenue);
  }

  private async live(meta: RequestMeta, events: unknown[], admit = () => this.parts.admission.admitIngestFresh(meta), revenue = false): Promise<Outcome<IngestAck>> {
    const { admission, backend } = this.parts;
    const closed = admission.shuttingDown();
    if (closed) return closed;
    const admitted = await admit();
    if (!admitted.ok) return admitted;
    const { project, rate } = admitted.value;
    const size = batchSizeRefusal(events, rate);
    if (size) return size;
    await backend.settled(events.some(carriesId));
    const now = this.parts.now();
    const request = this.requestFacts(meta, project, now);
    const sorted = this.sort(project, events, request, now, rate);
    if (!('records' in sorted)) return sorted;
    if (sorted.details.length > 0) return invalidEvents(sorted.details, events.length, rate);
    if (revenue) for (const r of sorted.records) if (r.t === 'e') r.rev = 1;
    const over = this.overQuota(project, sorted.stored, now, rate);
    if (over) return over;
    const appended = await this.append(project.id, sorted.records, sorted.ids, sorted.stored, rate);
    if (typeof appended !== 'number') return appended;
    return acknowledge(events.length, sorted.stored, request.facts.bot ? sorted.records.length : 0, now, rate);
  }

  private requestFacts(meta: RequestMeta, project: ProjectRecord, now: number): RequestFacts {
    const client: ClientFacts = { ip: meta.ip, userAgent: meta.userAgent };
    const enricher = this.parts.backend.enricher;
    const facts = enricher.classify(client);
    return { client, enricher, facts, guarded: meta.guarded === true, botDay: facts.bot ? dayOf(now, project.timezone) : '' };
  }

  /** Each event in turn: its shape, its project, bot or person, enriched and normalized, then de-duplicated. */
  private sort(project: ProjectRecord, events: unknown[], request: RequestFacts, now: number, rate: RateInfo): Sorted | Failure {
    const details: ErrorDetail[] = [];
    const records: LogRecord[] = [];
    const ids = new Set<string>();
    let stored = 0;
    for (let index = 0; index < events.length; index++) {
      const input = readEvent(events[index], index, 'live', details, request.guarded);
      if (!input) continue;
      if (input.projectId !== undefined && input.projectId !== project.id) {
        return fail('forbidden', `event ${index} names project "${input.projectId}", but the key belongs to another project`, {}, rate);
      }
      if (request.facts.bot) {
        records.push({ t: 'b', p: project.id, day: request.botDay, rt: now });
        continue;
      }
      const event = this.enrich(input, project, request, now);
      if (!event.ok) {
        details.push({ index, path: event.path, message: event.message });
        continue;
      }
      if (details.length > 0) continue; // the batch is refused anyway: keep listing problems, store nothing
      const id = event.event.eventId;
      if (id !== undefined) {
        // A repeat is acknowledged again but stored once: already folded, in flight, or earlier in this batch.
        if (ids.has(id) || this.parts.backend.seen(project.id, id, now)) continue;
        ids.add(id);
      }
      records.push(event.event);
      stored++;
    }
    return { records, ids, stored, details };
  }

  /** The event as stored: source, session, device, country, browser and OS from the request and the event. */
  private enrich(input: EventInput, project: ProjectRecord, request: RequestFacts, now: number): ReturnType<typeof normalizeEvent> {
    const { client, enricher, facts } = request;
    const { source, referrer } = classifySource(input.referrer ?? '', input.url ?? '');
    const sessionId = input.sessionId ?? enricher.anonymousSessionId(project.id, client, now);
    return normalizeEvent(input, {
      projectId: project.id,
      timezone: project.timezone,
      now,
      source,
      referrer,
      sessionId,
      device: facts.device,
      country: facts.country,
      browser: facts.browser,
      os: facts.os,
      trackedProps: project.trackedProps,
    });
  }

  /** The monthly allowance (0 = unlimited): 429 until the next UTC month when the batch would pass it. */
  private overQuota(project: ProjectRecord, stored: number, now: number, rate: RateInfo): Failure | undefined {
    const quota = project.monthlyQuota;
    if (quota <= 0 || stored <= 0) return undefined;
    const used = this.parts.backend.usedThisMonth(project.id, now);
    if (used + stored <= quota) return undefined;
    const reset = nextUtcMonthStart(now);
    return fail('quota_exceeded', quotaMessage(project.id, quota, used), {
      retryAfterSeconds: Math.max(1, Math.ceil((reset - now) / 1000)),
    }, rate);
  }

  /**
   * Durable before the answer (LMDB commit or PubAck); nothing to append is no write at all. Resolves with how many
   * records were stored (see Backend.commit), or the 503 of a commit that failed.
   */
  private async append(projectId: string, records: LogRecord[], ids: Set<string>, stored: number, rate: RateInfo): Promise<Failure | number> {
    if (records.length === 0) return 0;
    const appended = await this.parts.backend.commit(projectId, records, ids, stored);
    return appended === false ? notStored(rate) : appended;
  }
}

function acknowledge(accepted: number, stored: number, bot: number, now: number, rate: RateInfo): Outcome<IngestAck> {
  const counts = { stored, bot, duplicate: accepted - stored - bot };
  return { ok: true, value: { ts: now, accepted, counts }, rate };
}

/** The 429 of a used-up allowance names the setting and both ways to raise it. */
function quotaMessage(projectId: string, quota: number, used: number): string {
  return (
    `the project's monthly_quota of ${quota} events is used up (${used} stored this month; it resets at the start of ` +
    `the next UTC month). Raise it with PATCH /projects/${projectId} {"monthly_quota": N} (0 means unlimited) or ` +
    `npx analytics projects update ${projectId} --quota N`
  );
}

/** Whether a raw event names an eventId (such a batch waits for the remembered ids' startup check). */
function carriesId(e: unknown): boolean {
  return typeof e === 'object' && e !== null && (e as { eventId?: unknown }).eventId !== undefined;
}
