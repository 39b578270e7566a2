import type { RecentEvent } from './types.ts';

export interface RingEntry extends RecentEvent {
  day: string;
}

/**
 * Strings that repeat from event to event (event names, URLs, sources, countries, devices, days) are shared by every
 * ring entry that holds them instead of one copy per entry: a ring entry is then its object and its session id
 * (~150 bytes instead of ~350). The table is bounded; when full it starts over (entries keep their strings).
 */
const INTERNED_MAX = 100_000;
let interned = new Map<string, string>();

function intern(s: string): string {
  const hit = interned.get(s);
  if (hit !== undefined) return hit;
  if (interned.size >= INTERNED_MAX) interned = new Map();
  interned.set(s, s);
  return s;
}

const PACKED_FIELDS = 9;

/** A fixed-size ring of the newest events of one project; the oldest is overwritten. Grows to `capacity` as needed. */
export class RecentRing {
  private items: (RingEntry | undefined)[] = [];
  private next = 0;
  private count = 0;
  /** bumped on every push: a snapshot re-encodes only rings that changed since the last one */
  version = 0;

  constructor(readonly capacity: number) {}

  /** Keeps `entry` (its repeating strings replaced by shared copies). */
  push(entry: RingEntry): void {
    entry.day = intern(entry.day);
    entry.event = intern(entry.event);
    entry.url = intern(entry.url);
    entry.referrer = intern(entry.referrer);
    entry.source = intern(entry.source);
    entry.country = intern(entry.country);
    entry.device = intern(entry.device);
    this.version++;
    if (this.count < this.capacity) {
      // Still filling: append (a project that sends 10 events holds 10 slots, not 1,000).
      this.items.push(entry);
      this.count++;
      this.next = this.count % this.capacity;
      return;
    }
    this.items[this.next] = entry;
    this.next = (this.next + 1) % this.capacity;
  }

  /** Newest first. */
  *newestFirst(): Generator<RingEntry> {
    const n = this.count;
    const size = this.items.length;
    for (let i = 1; i <= n; i++) {
      const e = this.items[(this.next - i + size) % size];
      if (e) yield e;
    }
  }

  /**
   * Oldest first, flattened: 9 values per entry (day, ts, event, url, referrer, source, country, device, sessionId).
   * One array of strings and numbers serializes and restores several times faster than as many objects.
   */
  packed(): Array<string | number> {
    const out: Array<string | number> = new Array(this.count * PACKED_FIELDS);
    let i = out.length;
    for (const e of this.newestFirst()) {
      i -= PACKED_FIELDS;
      out[i] = e.day;
      out[i + 1] = e.ts;
      out[i + 2] = e.event;
      out[i + 3] = e.url;
      out[i + 4] = e.referrer;
      out[i + 5] = e.source;
      out[i + 6] = e.country;
      out[i + 7] = e.device;
      out[i + 8] = e.sessionId;
    }
    return out;
  }

  /** Pushes back what packed() gave, oldest first. */
  pushPacked(p: ReadonlyArray<string | number>): void {
    for (let i = 0; i + PACKED_FIELDS <= p.length; i += PACKED_FIELDS) {
      this.push({
        day: p[i] as string,
        ts: p[i + 1] as number,
        event: p[i + 2] as string,
        url: p[i + 3] as string,
        referrer: p[i + 4] as string,
        source: p[i + 5] as string,
        country: p[i + 6] as string,
        device: p[i + 7] as string,
        sessionId: p[i + 8] as string,
      });
    }
  }

  /** Oldest first (snapshot order, so pushing them back restores the ring). */
  oldestFirst(): RingEntry[] {
    return [...this.newestFirst()].reverse();
  }
}
