import { intern } from './intern.ts';
import { MAX_INDEX_ID, StringIndex, stringHash } from './string-index.ts';
import type { RecentEvent } from './types.ts';

export interface RingEntry extends RecentEvent {
  day: string;
}

/** String fields of an entry, in column order; the session id is last (it is the only one not interned). */
const STRING_FIELDS = 8;
const SESSION = 7;
/** Slots a ring starts with; it doubles up to its capacity (a project that sent 3 events holds 4 slots). */
const FIRST_SLOTS = 4;
/**
 * Ids are Uint16 (and the index's, MAX_INDEX_ID): each string is held once, so at most STRING_FIELDS × capacity, and
 * one entry's more while a push holds the new strings before it releases the overwritten ones.
 */
const MAX_IDS = MAX_INDEX_ID + 1;
/** The ids of the entry a push overwrites (scratch: pushes never interleave). */
const evicted = new Uint16Array(STRING_FIELDS);
/** An id no string has (MAX_INDEX_ID is the largest): an overwritten field whose string the new entry keeps. */
const NO_ID = 0xffff;

/**
 * The ring as plain data (snapshots): the columns as they are in memory (slot order, `next` the oldest slot once
 * full) and the string table (holes where ids are free). Captured with a copy of each array, restored without
 * decoding an entry.
 */
export interface PackedRing {
  count: number;
  next: number;
  ts: Float64Array;
  ids: Uint16Array;
  strings: Array<string | undefined>;
}

/** A ring as a snapshot stored it, not decoded yet (see RecentRing.sleep). */
export interface StoredRing {
  /** the ring's snapshot form as the store wrote it (restored from a file: read from there when asked for) */
  readonly bytes: Uint8Array;
  /** `bytes.length`, known without reading them */
  length: number;
  /** where `bytes` start in the snapshot file they were read from (see StoredDay.at) */
  at?: number;
  /** that file */
  readonly file?: string;
  /** their CRC-32, when the store knows it without reading them (see StoredDay.crc) */
  readonly crc?: number;
  load(): PackedRing | Array<string | number>;
}

/**
 * A fixed-size ring of the newest events of one project, kept compact: an entry is its time in a Float64Array and
 * eight 16-bit ids into the ring's own string table (day, event, url, referrer, source, country, device, session id),
 * 24 bytes plus its share of the distinct strings (~150 bytes an entry as objects). Each string is held once per ring
 * with a count of the entries using it, and freed when the last one is overwritten. Entries are decoded only when a
 * read walks them. The oldest entry is overwritten once `capacity` are held.
 */
export class RecentRing {
  private ts: Float64Array | undefined;
  private ids: Uint16Array | undefined;
  private count = 0;
  private next = 0;
  private strings: Array<string | undefined> = [];
  /** entries referring to each id (at most STRING_FIELDS × capacity, so 16 bits): one typed array, not a list */
  private uses: Uint16Array<ArrayBuffer> = new Uint16Array(0);
  private index: StringIndex | undefined;
  private free: number[] | undefined;
  /** bumped on every push: a snapshot re-encodes only rings that changed since the last one */
  version = 0;
  /** set while the ring sleeps: restored from a snapshot and not touched since (see sleep) */
  private stored: StoredRing | undefined;

  constructor(readonly capacity: number) {
    if ((capacity + 1) * STRING_FIELDS > MAX_IDS) throw new Error(`a ring of ${capacity} entries needs more than 16-bit string ids`);
  }

  get size(): number {
    if (this.stored) this.wake();
    return this.count;
  }

  /**
   * Keeps a restored ring as its stored bytes until it is touched (a push or a read): startup decodes nothing, an
   * idle project's ring costs its bytes (~30 an entry), and snapshots write the bytes again as they are.
   */
  sleep(stored: StoredRing): void {
    if (this.count !== 0) throw new Error('only an empty ring can sleep');
    this.stored = stored;
  }

  private wake(): void {
    const stored = this.stored!;
    this.stored = undefined;
    const p = stored.load();
    if (Array.isArray(p)) this.pushFlat(p);
    else this.restorePacked(p);
  }

  push(entry: RingEntry): void {
    if (this.stored) this.wake();
    this.version++;
    let slot: number;
    const evicting = this.count === this.capacity;
    // The newest entry before this one: most fields of a project's next event repeat it (its day, event, source,
    // country, device, often its visit), and comparing with it spares a lookup in the string index.
    const newest = this.count === 0 ? -1 : (evicting ? this.next + this.capacity - 1 : this.count - 1) % this.capacity;
    if (!evicting) {
      slot = this.count;
      if (this.ts === undefined || slot === this.ts.length) this.grow();
      this.count++;
      this.next = this.count % this.capacity;
    } else {
      slot = this.next;
      this.next = (this.next + 1) % this.capacity;
    }
    const ids = this.ids!;
    const at = slot * STRING_FIELDS;
    const near = newest * STRING_FIELDS;
    // Take the new strings before releasing the old ones, so a string both hold is never freed and re-added.
    if (evicting) for (let i = 0; i < STRING_FIELDS; i++) evicted[i] = ids[at + i]!;
    this.ts![slot] = entry.ts;
    ids[at] = this.refNear(entry.day, true, near);
    ids[at + 1] = this.refNear(entry.event, true, near + 1);
    ids[at + 2] = this.refNear(entry.url, true, near + 2);
    ids[at + 3] = this.refNear(entry.referrer, true, near + 3);
    ids[at + 4] = this.refNear(entry.source, true, near + 4);
    ids[at + 5] = this.refNear(entry.country, true, near + 5);
    ids[at + 6] = this.refNear(entry.device, true, near + 6);
    ids[at + SESSION] = this.refNear(entry.sessionId, false, near + SESSION);
    // Count the new entry's uses, then release the overwritten one's: a field that names the string it overwrites
    // (its day, event, country, device, often more) changes no count and touches none.
    const uses = this.uses;
    for (let i = 0; i < STRING_FIELDS; i++) {
      const id = ids[at + i]!;
      if (evicting && evicted[i] === id) evicted[i] = NO_ID;
      else uses[id]!++;
    }
    if (evicting) for (let i = 0; i < STRING_FIELDS; i++) if (evicted[i] !== NO_ID) this.unref(evicted[i]!);
  }

  /**
   * ref(s), or the id at `near` (the newest entry's field, read before this push writes over it) when it holds s.
   * Neither counts the use: push does, once the entry's ids are known.
   */
  private refNear(s: string, shared: boolean, near: number): number {
    if (near >= 0) {
      const id = this.ids![near]!;
      if (this.strings[id] === s) return id;
    }
    return this.ref(s, shared);
  }

  private grow(): void {
    const slots = this.ts === undefined ? Math.min(FIRST_SLOTS, this.capacity) : Math.min(this.ts.length * 2, this.capacity);
    const ts = new Float64Array(slots);
    const ids = new Uint16Array(slots * STRING_FIELDS);
    if (this.ts) {
      ts.set(this.ts);
      ids.set(this.ids!);
    }
    this.ts = ts;
    this.ids = ids;
  }

  private ref(s: string, shared: boolean): number {
    this.index ??= new StringIndex();
    const h = stringHash(s);
    let id = this.index.find(s, h, this.strings);
    if (id === -1) {
      id = this.free?.pop() ?? this.strings.length;
      this.strings[id] = shared ? intern(s) : s;
      if (id >= this.uses.length) this.uses = grownUses(this.uses, id + 1);
      this.uses[id] = 0;
      this.index.add(id, h);
    }
    return id;
  }

  private unref(id: number): void {
    if (--this.uses[id]! > 0) return;
    this.index!.remove(id, stringHash(this.strings[id]!));
    this.strings[id] = undefined;
    (this.free ??= []).push(id);
  }

  private entry(slot: number): RingEntry {
    const ids = this.ids!;
    const s = this.strings;
    const at = slot * STRING_FIELDS;
    return {
      day: s[ids[at]!]!,
      ts: this.ts![slot]!,
      event: s[ids[at + 1]!]!,
      url: s[ids[at + 2]!]!,
      referrer: s[ids[at + 3]!]!,
      source: s[ids[at + 4]!]!,
      country: s[ids[at + 5]!]!,
      device: s[ids[at + 6]!]!,
      sessionId: s[ids[at + SESSION]!]!,
    };
  }

  /** Newest first, each entry decoded as it is reached (a read stops after the few it shows). */
  *newestFirst(): Generator<RingEntry> {
    if (this.stored) this.wake();
    const n = this.count;
    for (let i = 1; i <= n; i++) yield this.entry((this.next - i + n) % n);
  }

  /** Oldest first (snapshot order, so pushing them back restores the ring). */
  oldestFirst(): RingEntry[] {
    return [...this.newestFirst()].reverse();
  }

  /** Where the stored bytes are in the snapshot file they came from, while the ring sleeps and that is known. */
  storedAt(): { file: string; at: number; length: number; crc?: number } | undefined {
    const s = this.stored;
    return s?.at === undefined || s.file === undefined ? undefined : { file: s.file, at: s.at, length: s.length, ...(s.crc === undefined ? {} : { crc: s.crc }) };
  }

  /** The ring as plain data: a copy of each column and of the string table, no per-entry work (asleep: its bytes). */
  packed(): PackedRing | Uint8Array {
    if (this.stored) return this.stored.bytes.slice();
    const slots = this.count;
    return {
      count: this.count,
      next: this.next,
      ts: this.ts ? this.ts.slice(0, slots) : new Float64Array(0),
      ids: this.ids ? this.ids.slice(0, slots * STRING_FIELDS) : new Uint16Array(0),
      strings: this.strings.slice(),
    };
  }

  /** Takes back what packed() gave (into an empty ring): counts the uses of each string again, nothing else. */
  restorePacked(p: PackedRing): void {
    if (this.count !== 0 || this.stored) throw new Error('restorePacked needs an empty ring');
    if (p.count === 0) return;
    if (p.count > this.capacity || p.ts.length !== p.count || p.ids.length !== p.count * STRING_FIELDS) throw new Error('a packed ring that does not fit');
    let slots = Math.min(FIRST_SLOTS, this.capacity);
    while (slots < p.count) slots = Math.min(slots * 2, this.capacity);
    this.ts = new Float64Array(slots);
    this.ts.set(p.ts);
    this.ids = new Uint16Array(slots * STRING_FIELDS);
    this.ids.set(p.ids);
    this.count = p.count;
    this.next = p.next;
    const strings = p.strings;
    const uses = new Uint16Array(strings.length);
    const shared = new Uint8Array(strings.length);
    for (let i = 0; i < p.ids.length; i++) {
      const id = p.ids[i]!;
      if (strings[id] === undefined) throw new Error('a packed ring refers to a missing string');
      uses[id]!++;
      if (i % STRING_FIELDS !== SESSION) shared[id] = 1;
    }
    this.index = new StringIndex();
    for (let id = 0; id < strings.length; id++) {
      const s = strings[id];
      if (s === undefined || uses[id] === 0) {
        strings[id] = undefined;
        (this.free ??= []).push(id);
        continue;
      }
      const kept = shared[id] ? intern(s) : s;
      strings[id] = kept;
      // A string both a session id and another field hold is one id (the table holds each string once).
      this.index.add(id, stringHash(kept));
    }
    this.strings = strings;
    this.uses = uses;
  }

  /**
   * Pushes back a ring in the flat form of snapshot version 3 (oldest first, 9 values per entry: day, ts, event, url,
   * referrer, source, country, device, sessionId), so older snapshot files still load.
   */
  pushFlat(p: ReadonlyArray<string | number>): void {
    if (this.stored) this.wake();
    for (let i = 0; i + 9 <= p.length; i += 9) {
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
}

/** `uses` with room for `n` ids, doubling (from FIRST_SLOTS × STRING_FIELDS) so appends stay amortized O(1). */
function grownUses(uses: Uint16Array, n: number): Uint16Array<ArrayBuffer> {
  let length = Math.max(uses.length, FIRST_SLOTS * STRING_FIELDS);
  while (length < n) length *= 2;
  const grown = new Uint16Array(length);
  grown.set(uses);
  return grown;
}
