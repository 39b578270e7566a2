/**
 * The open column segments' budget, as the operator metrics see it: the bounds past which a projection seals its open
 * segments (besides OPEN_EVENTS_BOUND and the others of column-projection.ts), why each bound flush happened, and the
 * figures of several projections (a cluster node's partitions) summed.
 */

/**
 * Heap bytes of open segments (SegmentBuilder.bytes: arrays, dictionaries, new ids) before a flush. Events of a usual
 * size (~110–130 B estimated) reach it about when they reach OPEN_EVENTS_BOUND; events that carry many values no
 * other event has reach it first. At 64 MiB, 1M events with every field new peaked at 618 MiB; at 32, 324 MiB.
 */
export const OPEN_BYTES_BOUND = 32 * 2 ** 20;
/**
 * One project's open bytes before a flush: no tenant's traffic holds more of the node's memory in open columns. A
 * flush seals every open segment; for the other projects it costs a few more small segments, merged when their day
 * goes quiet.
 */
export const PROJECT_OPEN_BYTES = 16 * 2 ** 20;

/** Why open segments were sealed before their interval: which bound they reached. */
export type SealReason = 'events' | 'history' | 'days' | 'bytes' | 'project_bytes';
export const SEAL_REASONS: readonly SealReason[] = ['events', 'history', 'days', 'bytes', 'project_bytes'];

/** What the operator metrics show of the open columns. */
export interface OpenColumnStats {
  events: number;
  bytes: number;
  /** the open bytes of the project holding most */
  largestProjectBytes: number;
  /** flushes each bound caused since start */
  seals: Record<SealReason, number>;
}

/** The open columns of several projections (a cluster node's partitions) as one. */
export function sumOpenStats(all: readonly OpenColumnStats[]): OpenColumnStats {
  const out: OpenColumnStats = { events: 0, bytes: 0, largestProjectBytes: 0, seals: { events: 0, history: 0, days: 0, bytes: 0, project_bytes: 0 } };
  for (const s of all) {
    out.events += s.events;
    out.bytes += s.bytes;
    out.largestProjectBytes = Math.max(out.largestProjectBytes, s.largestProjectBytes);
    for (const r of SEAL_REASONS) out.seals[r] += s.seals[r];
  }
  return out;
}
