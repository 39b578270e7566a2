import { dayOf } from '../core/dates.ts';
import { MAX_EXPORT_DAYS } from '../core/limits.ts';
import { compareRange, isCompareMode, resolveRange } from '../core/metrics.ts';
import type { MetricsResponse, RealtimeResponse } from '../core/types.ts';
import type { Admission } from './admission.ts';
import type { Backend } from './backend.ts';
import type { ReadQuery } from './read-query.ts';
import { failure as fail, type ExportQuery, type ExportStream, type MetricsQuery, type Outcome, type RateInfo, type RealtimeQuery, type RequestMeta } from './types.ts';

/**
 * The reads of a project: GET /metrics and /realtime (answered by the backend from state: single node in memory,
 * cluster after the read barrier or from the partition's owner) and GET /projects/{id}/export (the log, streamed).
 */

export interface ReadParts {
  admission: Admission;
  backend: Backend;
  now(): number;
}

export class Reads {
  constructor(private readonly parts: ReadParts) {}

  async metrics(meta: RequestMeta, query: MetricsQuery): Promise<Outcome<MetricsResponse>> {
    const admitted = await this.parts.admission.admitReadFresh(meta, query.projectId);
    if (!admitted.ok) return admitted;
    const { project, rate } = admitted.value;
    const range = resolveRange(query, dayOf(this.parts.now(), project.timezone));
    if (!range.ok) return fail('invalid_request', range.message, {}, rate);
    if (query.compare !== undefined && !isCompareMode(query.compare)) {
      return fail('invalid_request', '`compare` must be "previous" or "year"', {}, rate);
    }
    const compare = query.compare === undefined ? undefined : compareRange(query.compare, range.from, range.to);
    return this.read({ kind: 'metrics', projectId: project.id, timezone: project.timezone, from: range.from, to: range.to, trackedProps: project.trackedProps, compare }, rate);
  }

  /** The last 30 minutes of the project, by receive time, as of the engine clock. */
  async realtime(meta: RequestMeta, query: RealtimeQuery): Promise<Outcome<RealtimeResponse>> {
    const admitted = await this.parts.admission.admitReadFresh(meta, query.projectId);
    if (!admitted.ok) return admitted;
    const { project, rate } = admitted.value;
    return this.read({ kind: 'realtime', projectId: project.id, now: this.parts.now() }, rate);
  }

  /** GET /projects/{id}/export (ak_, sk_ of the project): the range rules of GET /metrics, up to ten years. */
  exportEvents(meta: RequestMeta, projectId: string, query: ExportQuery): Outcome<ExportStream> {
    const gate = this.parts.admission.admitProject(meta, projectId);
    if (!gate.ok) return gate;
    const { project, rate } = gate.value;
    const backend = this.parts.backend;
    const range = resolveRange({ date: query.date, from: query.from, to: query.to }, dayOf(this.parts.now(), project.timezone), MAX_EXPORT_DAYS);
    if (!range.ok) return fail('invalid_request', range.message, {}, rate);
    return { ok: true, value: { from: range.from, to: range.to, chunks: backend.exportEvents(project.id, range.from, range.to) }, rate };
  }

  /** An admitted read, answered by the backend; a backend that cannot answer now is a 503 with Retry-After. */
  private async read<T extends MetricsResponse | RealtimeResponse>(q: ReadQuery, rate: RateInfo): Promise<Outcome<T>> {
    const out = await this.parts.backend.read(q);
    if ('unavailable' in out) return fail('unavailable', out.unavailable, { retryAfterSeconds: 1 }, rate);
    return { ok: true, value: out.value as T, rate };
  }
}
