import type { RecentEvent } from './types.ts';

export interface RingEntry extends RecentEvent {
  day: string;
}

/** A fixed-size ring of the newest events of one project; the oldest is overwritten. */
export class RecentRing {
  private readonly items: (RingEntry | undefined)[];
  private next = 0;
  private count = 0;

  constructor(readonly capacity: number) {
    this.items = new Array<RingEntry | undefined>(capacity);
  }

  push(e: RingEntry): void {
    this.items[this.next] = e;
    this.next = (this.next + 1) % this.capacity;
    if (this.count < this.capacity) this.count++;
  }

  /** Newest first. */
  *newestFirst(): Generator<RingEntry> {
    for (let i = 1; i <= this.count; i++) {
      const e = this.items[(this.next - i + this.capacity) % this.capacity];
      if (e) yield e;
    }
  }

  /** Oldest first (snapshot order, so pushing them back restores the ring). */
  oldestFirst(): RingEntry[] {
    return [...this.newestFirst()].reverse();
  }
}
