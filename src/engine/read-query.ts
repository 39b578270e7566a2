import { REALTIME_MINUTES } from '../core/limits.ts';
import { metrics } from '../core/metrics.ts';
import type { MetricsResponse, RealtimeResponse } from '../core/types.ts';
import type { SealedSource } from '../core/day-view.ts';
import type { AnalyticsState } from '../core/state.ts';

/** A state to read from, once it has folded everything acknowledged before the read began (read barrier). */
export interface ReadView {
  state: AnalyticsState;
  sealed: SealedSource | undefined;
}

/**
 * A read the engine has admitted and resolved (range, comparison, clock), as plain JSON: answered from local state,
 * or sent to the partition's owner (cluster mode) which answers it with this same function.
 */
export type ReadQuery =
  | {
      kind: 'metrics';
      projectId: string;
      timezone: string;
      from: string;
      to: string;
      trackedProps?: string[] | undefined;
      compare?: { from: string; to: string } | undefined;
    }
  | { kind: 'realtime'; projectId: string; now: number };

export type ReadAnswer<Q extends ReadQuery> = Q extends { kind: 'metrics' } ? MetricsResponse : RealtimeResponse;

export function answerRead(view: ReadView, q: ReadQuery): MetricsResponse | RealtimeResponse {
  switch (q.kind) {
    case 'metrics':
      return metrics(view.state, q.projectId, q.timezone, q.from, q.to, { trackedProps: q.trackedProps, compare: q.compare, sealed: view.sealed });
    case 'realtime': {
      const figures = view.state.projects.get(q.projectId)?.realtime.read(q.now);
      return {
        projectId: q.projectId,
        visitors: figures?.visitors ?? 0,
        pageviews: figures?.pageviews ?? 0,
        perMinute: figures?.perMinute ?? new Array<number>(REALTIME_MINUTES).fill(0),
        pages: figures?.pages ?? {},
        sources: figures?.sources ?? {},
      };
    }
    default: {
      const never: never = q;
      throw new Error(`unknown read ${JSON.stringify(never)}`);
    }
  }
}
