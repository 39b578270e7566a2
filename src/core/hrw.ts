import { hash53 } from './hash.ts';

/**
 * Rendezvous (highest random weight) hashing: every node computes, for a partition, a weight per member and the
 * highest wins. All nodes that see the same members pick the same owner without talking; adding or removing a member
 * moves only the partitions that member wins or won (about 1/N of them), never reshuffles the others.
 */

/** The weight of `nodeId` for `partition` (a 53-bit integer; the separator keeps `1`+`2x` apart from `12`+`x`). */
export function hrw(partition: number, nodeId: string): number {
  return hash53(`${partition}\u0000${nodeId}`);
}

/** The member with the highest weight for `partition` (ties, which 2^53 values make rare, go to the greater id). */
export function preferredOwner(partition: number, nodeIds: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestWeight = -1;
  for (const id of nodeIds) {
    const w = hrw(partition, id);
    if (w > bestWeight || (w === bestWeight && best !== undefined && id > best)) {
      best = id;
      bestWeight = w;
    }
  }
  return best;
}
