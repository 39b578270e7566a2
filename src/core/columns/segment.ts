/**
 * A segment: the events of one project-day, in log order, as dictionary-encoded columns. The open segment is built
 * on the heap by SegmentBuilder; a sealed one is the same columns encoded into one Buffer (codec.ts) and read back as
 * typed-array views. The evaluator reads both through SegmentView.
 *
 * Codes: for the value columns (name, path, source, ...) and every property, code 0 is "no value" and code k is
 * `dict[k - 1]`. Properties are kept sparsely (props.ts): one entry per (event, key) present. Visits and visitors are numbered per project-day across all of the day's segments (code = index),
 * so a visit's events in several segments share one code; each segment's dictionary holds only the ids it added.
 */

import { freeNow } from '../free-now.ts';
import { hash53 } from '../hash.ts';
import { NumberCounts } from '../number-table.ts';
import type { Scalar, StoredEvent } from '../types.ts';
import { DICT_ENTRY_BYTES, Interner, type Codes, type PropColumn } from './codes.ts';
import { groupByKey, scanProp, type PropEntries, type PropIndex } from './props.ts';

export { Interner, type Codes, type PropColumn } from './codes.ts';

/** The value columns, in their stored order. */
export const VALUE_COLUMNS = ['name', 'path', 'source', 'country', 'device', 'browser', 'os', 'utmMedium', 'utmCampaign'] as const;
export type ValueColumn = (typeof VALUE_COLUMNS)[number];

/** Browser and OS names when the User-Agent parser named none (as GET /metrics counts them). */
export const UNKNOWN = 'Unknown';

/** What the evaluator reads of a segment, open or sealed. */
export interface SegmentView {
  readonly n: number;
  readonly firstSeq: number;
  readonly lastSeq: number;
  /** ms since epoch of the day's UTC midnight; event time = dayStart + time[i] */
  readonly dayStart: number;
  readonly minT: number;
  readonly maxT: number;
  /** day-level visit and visitor codes this segment's dictionaries start at, and how many they add */
  readonly visitBase: number;
  readonly userBase: number;
  readonly time: Int32Array;
  readonly visit: Codes;
  readonly user: Codes;
  column(c: ValueColumn): Codes;
  dict(c: ValueColumn): readonly string[];
  /** session ids of visit codes visitBase.. */
  visitDict(): readonly string[];
  /** visitor ids (StoredEvent.user) of codes userBase.. */
  userDict(): readonly string[];
  /** every property entry, grouped by key (encoding, merging) */
  props(): PropIndex;
  /** one property as a column of codes over the events (0: not carried), built when asked */
  prop(key: string): PropColumn | undefined;
}

/**
 * The property entry an event with revenue carries (StoredEvent.rev: Plausible's Events API revenue): revenue:<CUR>
 * counts it as a purchase whatever its name. A key no client sends (it starts with NUL).
 */
export const REVENUE_MARK = '\u0000revenue';

/** A property value as the contract names it: strings as is, numbers as String(n), true/false, null. */
export function propString(v: Scalar): string {
  return v === null ? 'null' : typeof v === 'string' ? v : String(v);
}

/** First capacity of an open segment's arrays, doubled as events arrive: most project-days of a free-tier host hold a few events, and
 * thousands of them are open between two flushes (256 cost ~15 KiB each, 8 about 1 KiB). */
const INITIAL_CAPACITY = 8;

/** Heap bytes of a new visit or visitor id besides its characters: an array slot, the string header, its numbering entry. */
const ID_ENTRY_BYTES = DICT_ENTRY_BYTES + 25;

/** The entry arrays of a segment without properties (most events carry none). */
const NO_ENTRIES: Uint32Array<ArrayBuffer> = new Uint32Array(0);

/** A copy of `a` in `capacity` slots (a new array: views handed out before keep their entries). */
function grow(a: Uint32Array, capacity: number): Uint32Array<ArrayBuffer> {
  const b = new Uint32Array(capacity);
  b.set(a);
  return b;
}

/** The fixed columns of an open segment, in one buffer: time, visit, visitor, then VALUE_COLUMNS in order. */
const FIXED_COLUMNS = 3 + VALUE_COLUMNS.length;

/**
 * Day-level numbering of visits and visitors, kept across the day's segments (and reloaded from them after a restart),
 * by hash53 of the id, as the day aggregates count them: ~25 bytes an entry in typed arrays where a Map of the id
 * strings took ~55 and kept every string alive (a day of 100,000 visits held ~17 MB, now ~5).
 */
export class DayIds {
  readonly visits = new NumberCounts();
  readonly users = new NumberCounts();
  /** every event of this project-day up to this log sequence is in a sealed segment */
  coveredSeq = 0;
  nextSegNo = 0;

  /** Takes over the numbering of a sealed segment of the day (restart, or a builder dropped while idle). */
  absorb(s: SegmentView, segNo: number): void {
    const v = s.visitDict();
    for (let i = 0; i < v.length; i++) this.visits.set(hash53(v[i]!), s.visitBase + i);
    const u = s.userDict();
    for (let i = 0; i < u.length; i++) this.users.set(hash53(u[i]!), s.userBase + i);
    if (s.lastSeq > this.coveredSeq) this.coveredSeq = s.lastSeq;
    if (segNo >= this.nextSegNo) this.nextSegNo = segNo + 1;
  }
}

/** The open segment of one project-day: appends events (in log order) into growable columns. */
export class SegmentBuilder implements SegmentView {
  n = 0;
  firstSeq = 0;
  lastSeq = 0;
  minT = Infinity;
  maxT = -Infinity;
  readonly visitBase: number;
  readonly userBase: number;
  private cap = INITIAL_CAPACITY;
  private t!: Int32Array;
  private v!: Uint32Array;
  private u!: Uint32Array;
  /** the value columns in VALUE_COLUMNS order (appends index them), and by name (reads) */
  private readonly colList: Array<{ codes: Uint32Array; dict: Interner }> = [];
  private readonly cols = new Map<ValueColumn, { codes: Uint32Array; dict: Interner }>();
  /** property entries in log order: event, key code (0-based), value code (1-based), doubled as they come */
  private pRow = NO_ENTRIES;
  private pKey = NO_ENTRIES;
  private pVal = NO_ENTRIES;
  private pCount = 0;
  private readonly propKeyDict = new Interner();
  private readonly propValueDict = new Interner();
  private readonly newVisits: string[] = [];
  private readonly newUsers: string[] = [];
  /** about what the new visit and visitor ids hold: their strings and their day numbering (NumberCounts, ~25 B) */
  private idBytes = 0;
  /**
   * Whether a view of the fixed columns' buffer was handed out since it was allocated: a buffer nobody viewed is freed
   * as soon as a larger one replaces it (freeNow); a viewed one is left to the collector, since a question may still
   * read it.
   */
  private viewed = false;

  constructor(
    readonly dayStart: number,
    readonly ids: DayIds,
  ) {
    this.visitBase = ids.visits.size;
    this.userBase = ids.users.size;
    for (const c of VALUE_COLUMNS) {
      const col = { codes: new Uint32Array(0), dict: new Interner() };
      this.colList.push(col);
      this.cols.set(c, col);
    }
    this.allocate(INITIAL_CAPACITY);
  }

  /**
   * New fixed columns of `cap` slots in one buffer, the entries so far copied: one allocation where there were twelve
   * (a segment of a few dozen events grows three times). New arrays, so views handed out before keep their entries.
   */
  private allocate(cap: number): void {
    const old = this.n > 0 && !this.viewed ? this.t : undefined;
    const buf = new ArrayBuffer(FIXED_COLUMNS * cap * 4);
    const at = (k: number) => k * cap * 4;
    const t = new Int32Array(buf, at(0), cap);
    const v = new Uint32Array(buf, at(1), cap);
    const u = new Uint32Array(buf, at(2), cap);
    if (this.n > 0) {
      t.set(this.t.subarray(0, this.n));
      v.set(this.v.subarray(0, this.n));
      u.set(this.u.subarray(0, this.n));
    }
    this.t = t;
    this.v = v;
    this.u = u;
    for (let k = 0; k < this.colList.length; k++) {
      const col = this.colList[k]!;
      const codes = new Uint32Array(buf, at(3 + k), cap);
      if (this.n > 0) codes.set(col.codes.subarray(0, this.n));
      col.codes = codes;
    }
    this.cap = cap;
    // the old buffer holds every fixed column, all copied above
    if (old) freeNow(old.buffer);
    this.viewed = false;
  }

  append(seq: number, e: StoredEvent): void {
    if (this.n === this.cap) this.enlarge();
    const i = this.n++;
    if (i === 0) this.firstSeq = seq;
    this.lastSeq = seq;
    const t = e.ts - this.dayStart;
    this.t[i] = t;
    if (t < this.minT) this.minT = t;
    if (t > this.maxT) this.maxT = t;
    const vh = hash53(e.sessionId);
    let vc = this.ids.visits.get(vh);
    if (vc < 0) {
      vc = this.ids.visits.size;
      this.ids.visits.set(vh, vc);
      this.newVisits.push(e.sessionId);
      this.idBytes += ID_ENTRY_BYTES + e.sessionId.length;
    }
    this.v[i] = vc;
    const uh = hash53(e.user);
    let uc = this.ids.users.get(uh);
    if (uc < 0) {
      uc = this.ids.users.size;
      this.ids.users.set(uh, uc);
      this.newUsers.push(e.user);
      this.idBytes += ID_ENTRY_BYTES + e.user.length;
    }
    this.u[i] = uc;
    // in VALUE_COLUMNS order
    this.set(0, i, e.event);
    this.set(1, i, e.path);
    this.set(2, i, e.source);
    this.set(3, i, e.country);
    this.set(4, i, e.device);
    this.set(5, i, e.browser ?? UNKNOWN);
    this.set(6, i, e.os ?? UNKNOWN);
    this.set(7, i, e.utmMedium);
    this.set(8, i, e.utmCampaign);
    for (const key in e.params) this.addEntry(i, key, propString(e.params[key]!));
    if (e.rev === 1) this.addEntry(i, REVENUE_MARK, '1');
  }

  /** One property entry of event i. */
  private addEntry(i: number, key: string, value: string): void {
    if (this.pCount === this.pRow.length) this.enlargeProps();
    const j = this.pCount++;
    this.pRow[j] = i;
    this.pKey[j] = this.propKeyDict.code(key) - 1;
    this.pVal[j] = this.propValueDict.code(value);
  }

  /**
   * About what this open segment holds on the heap: its arrays, dictionaries and new ids, so a projection can bound
   * open segments by bytes as well as by events (an event may carry 25 long values no other event has).
   */
  bytes(): number {
    let b = this.cap * FIXED_COLUMNS * 4 + this.pRow.length * 12 + this.propKeyDict.bytes + this.propValueDict.bytes + this.idBytes;
    for (const c of this.colList) b += c.dict.bytes;
    return b;
  }

  /** New entry arrays of twice the room (new arrays: views handed out before keep theirs). */
  private enlargeProps(): void {
    const cap = Math.max(INITIAL_CAPACITY, this.pRow.length * 2);
    this.pRow = grow(this.pRow, cap);
    this.pKey = grow(this.pKey, cap);
    this.pVal = grow(this.pVal, cap);
  }

  /** The property entries appended so far. */
  private entries(): PropEntries {
    return {
      count: this.pCount,
      row: this.pRow,
      key: this.pKey,
      val: this.pVal,
      keys: this.propKeyDict.values,
      keyCount: this.propKeyDict.values.length,
      values: this.propValueDict.values,
    };
  }

  /** Column `k` of VALUE_COLUMNS at entry `i`. */
  private set(k: number, i: number, value: string | undefined): void {
    const col = this.colList[k]!;
    col.codes[i] = value === undefined || value === '' ? 0 : col.dict.code(value);
  }

  private enlarge(): void {
    this.allocate(this.cap * 2);
  }

  // SegmentView: views of the first n entries (later appends never change them; a grown array is a new one)
  get time(): Int32Array {
    this.viewed = true;
    return this.t.subarray(0, this.n);
  }
  get visit(): Codes {
    this.viewed = true;
    return this.v.subarray(0, this.n);
  }
  get user(): Codes {
    this.viewed = true;
    return this.u.subarray(0, this.n);
  }
  column(c: ValueColumn): Codes {
    this.viewed = true;
    return this.cols.get(c)!.codes.subarray(0, this.n);
  }
  dict(c: ValueColumn): readonly string[] {
    return this.cols.get(c)!.dict.values;
  }
  visitDict(): readonly string[] {
    return this.newVisits;
  }
  userDict(): readonly string[] {
    return this.newUsers;
  }
  props(): PropIndex {
    return groupByKey(this.entries());
  }
  prop(key: string): PropColumn | undefined {
    return scanProp(this.entries(), this.n, codeOf(this.propKeyDict, key));
  }

  /**
   * A frozen view of what is appended so far, for a question that reads while events keep arriving: fixed length
   * (dictionaries only grow at their end, so codes below n keep their meaning and nothing is copied).
   */
  freeze(): SegmentView {
    this.viewed = true;
    const n = this.n;
    const dicts = new Map<ValueColumn, string[]>();
    const cols = new Map<ValueColumn, Codes>();
    for (const [c, col] of this.cols) {
      cols.set(c, col.codes.subarray(0, n));
      dicts.set(c, col.dict.values);
    }
    const entries = this.entries();
    const keyDict = this.propKeyDict;
    let index: PropIndex | undefined;
    const asked = new Map<string, PropColumn | undefined>();
    const visits = this.newVisits;
    const users = this.newUsers;
    return {
      n,
      firstSeq: this.firstSeq,
      lastSeq: this.lastSeq,
      dayStart: this.dayStart,
      minT: this.minT,
      maxT: this.maxT,
      visitBase: this.visitBase,
      userBase: this.userBase,
      time: this.t.subarray(0, n),
      visit: this.v.subarray(0, n),
      user: this.u.subarray(0, n),
      column: (c) => cols.get(c)!,
      dict: (c) => dicts.get(c)!,
      visitDict: () => visits,
      userDict: () => users,
      props: () => (index ??= groupByKey(entries)),
      prop(key) {
        if (!asked.has(key)) asked.set(key, scanProp(entries, n, codeOf(keyDict, key)));
        return asked.get(key);
      },
    };
  }
}

/** 0-based code of `s` in an interner, or undefined when it has none. */
function codeOf(d: Interner, s: string): number | undefined {
  const c = d.map.get(s);
  return c === undefined ? undefined : c - 1;
}
