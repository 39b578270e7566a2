/**
 * Answers a question (CONTRACT.md "Questions: POST /query") over the segments of a range, one day at a time: the
 * caller feeds each day's segments (in log order) to `addDay` and yields to its event loop between days, then asks
 * `finish`. Long because the per-day pipeline (remap dictionaries, zone check, flatten, visit table, visit filters,
 * events grouped by visit, rows) is one piece whose steps share reusable buffers.
 *
 * Values are compared as question-wide codes: each segment's dictionary is mapped once onto the question's
 * dictionaries ("spaces"), and every filter is a table over a space, filled as values are interned, so `contains`
 * runs once per distinct value and never per event. Per-event loops read typed arrays and allocate nothing.
 */

import { hash53 } from '../hash.ts';
import type { Dimension, Filter, FunnelQuestion, FunnelStepAnswer, Goal, Metric, Question, QueryAnswer, QueryRow, TimeDimension } from '../query/types.ts';
import { type Codes, type SegmentView, type ValueColumn } from './segment.ts';
import { dayBucket, dayHours, rangeBuckets } from './time-buckets.ts';

/** Codes of one space stay below this, so up to two codes compose into one exact number (2 × 26 bits < 53). */
const CODE_BITS = 2 ** 26;
const T_MAX = 2 ** 31 - 1;
const T_MIN = -(2 ** 31);
const PAGE_VIEW = 'page_view';

type Test = (s: string) => boolean;

/** A table over a space: match[code] for every interned value (code 0: no value). */
class Table {
  match: Uint8Array;
  constructor(
    readonly test: Test,
    noValue: boolean,
    size: number,
  ) {
    this.match = new Uint8Array(Math.max(16, size * 2));
    this.match[0] = noValue ? 1 : 0;
  }
}

/** A question-wide dictionary of one kind of value. */
class Space {
  readonly map = new Map<string, number>();
  readonly values: string[] = [''];
  readonly tables: Table[] = [];

  code(s: string): number {
    let c = this.map.get(s);
    if (c !== undefined) return c;
    c = this.values.length;
    if (c >= CODE_BITS) throw new RangeError(`more than ${CODE_BITS} distinct values in one question`);
    this.values.push(s);
    this.map.set(s, c);
    for (const t of this.tables) {
      if (c >= t.match.length) {
        const m = new Uint8Array(t.match.length * 2);
        m.set(t.match);
        t.match = m;
      }
      t.match[c] = t.test(s) ? 1 : 0;
    }
    return c;
  }

  table(test: Test, noValue: boolean): Table {
    const t = new Table(test, noValue, this.values.length);
    for (let c = 1; c < this.values.length; c++) t.match[c] = test(this.values[c]!) ? 1 : 0;
    this.tables.push(t);
    return t;
  }
}

/** A page goal's pattern: `*` is any run of characters, the rest literal, matched against the whole path. */
export function pagePattern(pattern: string): Test {
  const re = new RegExp(`^${pattern.split('*').map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`, 's');
  return (s) => re.test(s);
}

const VISIT_COLUMNS: Partial<Record<Dimension, ValueColumn>> = {
  source: 'source',
  utmMedium: 'utmMedium',
  utmCampaign: 'utmCampaign',
  country: 'country',
  device: 'device',
  browser: 'browser',
  os: 'os',
};

/** The space a dimension's values live in. */
function spaceOf(d: Dimension): string {
  if (d in VISIT_COLUMNS) return VISIT_COLUMNS[d]!;
  if (d === 'entryPage' || d === 'exitPage' || d === 'page') return 'path';
  if (d === 'event') return 'name';
  if (d === 'goal') return 'goal';
  if (d.startsWith('time:')) return 'time';
  return d; // prop:<key>
}

const isVisitLevel = (d: Dimension): boolean => d in VISIT_COLUMNS || d === 'entryPage' || d === 'exitPage';

function filterTest(op: Filter[0], dim: Dimension, values: string[]): { test: Test; noValue: boolean } {
  const up = dim === 'country';
  if (op === 'is' || op === 'isNot') {
    const set = new Set(up ? values.map((v) => v.toUpperCase()) : values);
    const has: Test = up ? (s) => set.has(s.toUpperCase()) : (s) => set.has(s);
    return op === 'is' ? { test: has, noValue: false } : { test: (s) => !has(s), noValue: true };
  }
  const needles = values.map((v) => v.toLowerCase());
  const has: Test = (s) => {
    const l = s.toLowerCase();
    return needles.some((n) => l.includes(n));
  };
  return op === 'contains' ? { test: has, noValue: false } : { test: (s) => !has(s), noValue: true };
}

/** Growable typed buffers reused across days. */
function ensureI32(a: Int32Array, n: number): Int32Array<ArrayBuffer> {
  return a.length >= n ? (a as never) : new Int32Array(Math.max(n, a.length * 2));
}
function ensureF64(a: Float64Array, n: number): Float64Array<ArrayBuffer> {
  return a.length >= n ? (a as never) : new Float64Array(Math.max(n, a.length * 2));
}
function ensureU8(a: Uint8Array, n: number): Uint8Array<ArrayBuffer> {
  return a.length >= n ? (a as never) : new Uint8Array(Math.max(n, a.length * 2));
}

/** A visit-level or event-level filter on a value space. */
interface ValueFilter {
  kind: 'value';
  dim: Dimension;
  space: string;
  table: Table;
}
/** `goal is [names]`: the event completes one of the named goals. */
interface GoalFilter {
  kind: 'goal';
  names: Table;
  paths: Table;
  negate: boolean;
}

/**
 * What every run shares: the question's spaces, the day's flattened columns, its visit table and events grouped by
 * visit. QueryRun and FunnelRun add what they count.
 */
abstract class DayScan {
  protected readonly spaces = new Map<string, Space>();
  protected readonly visitFilters: ValueFilter[] = [];
  protected readonly eventFilters: Array<ValueFilter | GoalFilter> = [];
  /** spaces whose per-event codes a day needs (besides name) */
  protected readonly eventSpaces = new Set<string>();
  /** visit-level value columns whose first-event codes a day needs */
  protected readonly visitSpaces = new Set<ValueColumn>();
  protected needPath = false;
  protected needVisitors = false;
  protected pvTable: Table;

  // the day's flattened events (question-wide codes) and its visits
  protected n = 0;
  protected V = 0;
  protected T = new Int32Array(0);
  protected VIS = new Int32Array(0);
  protected NAME = new Int32Array(0);
  protected PATH = new Int32Array(0);
  protected readonly EV = new Map<string, Int32Array>();
  protected vFirstT = new Int32Array(0);
  protected vFirstK = new Int32Array(0);
  protected vLastT = new Int32Array(0);
  protected vPv = new Int32Array(0);
  protected vEntryT = new Int32Array(0);
  protected vEntry = new Int32Array(0);
  protected vExitT = new Int32Array(0);
  protected vExit = new Int32Array(0);
  protected vPass = new Uint8Array(0);
  protected readonly vCodes = new Map<ValueColumn, Int32Array>();
  protected vUserHash = new Float64Array(0);
  /** events of passing visits grouped by visit (log order inside a visit), and where each visit's run starts */
  protected ORDER = new Int32Array(0);
  protected vStart = new Int32Array(0);
  protected day = '';
  protected segs: readonly SegmentView[] = [];
  protected segStart: number[] = [];
  private remaps: Array<Map<string, Int32Array>> = [];

  constructor(
    protected readonly timeZone: string,
    visitFilters: Filter[],
  ) {
    this.pvTable = this.space('name').table((s) => s === PAGE_VIEW, false);
    for (const [op, dim, values] of visitFilters) this.addFilter(op, dim, values, []);
  }

  protected space(name: string): Space {
    let s = this.spaces.get(name);
    if (!s) this.spaces.set(name, (s = new Space()));
    return s;
  }

  protected addFilter(op: Filter[0], dim: Dimension, values: string[], goals: readonly Goal[]): void {
    if (dim === 'goal') {
      const named = goals.filter((g) => values.includes(g.name));
      const events = new Set(named.filter((g) => g.event !== undefined).map((g) => g.event!));
      const pages = named.filter((g) => g.page !== undefined).map((g) => pagePattern(g.page!));
      this.needPath = true;
      this.eventFilters.push({
        kind: 'goal',
        names: this.space('name').table((s) => events.has(s), false),
        paths: this.space('path').table((s) => pages.some((p) => p(s)), false),
        negate: op === 'isNot',
      });
      return;
    }
    const { test, noValue } = filterTest(op, dim, values);
    const space = spaceOf(dim);
    const f: ValueFilter = { kind: 'value', dim, space, table: this.space(space).table(test, noValue) };
    this.need(dim);
    if (isVisitLevel(dim)) this.visitFilters.push(f);
    else this.eventFilters.push(f);
  }

  protected need(dim: Dimension): void {
    if (dim === 'entryPage' || dim === 'exitPage' || dim === 'page') this.needPath = true;
    else if (dim in VISIT_COLUMNS) this.visitSpaces.add(VISIT_COLUMNS[dim]!);
    else if (dim === 'event' || dim === 'goal' || dim.startsWith('time:')) return;
    else this.eventSpaces.add(dim);
  }

  /** Per segment: its dictionary of `space` mapped onto the question's (index: segment code). */
  private remap(seg: SegmentView, space: string): Int32Array {
    const dict = space.startsWith('prop:') ? seg.prop(space.slice(5))?.dict : seg.dict(space as ValueColumn);
    const s = this.space(space);
    const out = new Int32Array((dict?.length ?? 0) + 1);
    if (dict) for (let i = 0; i < dict.length; i++) out[i + 1] = s.code(dict[i]!);
    return out;
  }

  /** Could any value of a day's segments pass this table? (zone facts: dictionaries say which values occur) */
  private anyMatch(space: string, table: Table): boolean {
    if (table.match[0] === 1) return true;
    for (const m of this.remaps) {
      const r = m.get(space)!;
      for (let i = 1; i < r.length; i++) if (table.match[r[i]!] === 1) return true;
    }
    return false;
  }

  /** Loads a day: false when zone facts show no event can be selected (the day is then skipped). */
  protected load(day: string, segs: readonly SegmentView[]): boolean {
    this.day = day;
    this.segs = segs;
    this.remaps = [];
    let n = 0;
    this.segStart = [];
    for (const seg of segs) {
      this.segStart.push(n);
      n += seg.n;
    }
    this.n = n;
    if (n === 0) return false;
    const spaces = new Set<string>(['name', ...this.eventSpaces, ...this.visitSpaces]);
    if (this.needPath) spaces.add('path');
    for (const seg of segs) {
      const m = new Map<string, Int32Array>();
      for (const s of spaces) m.set(s, this.remap(seg, s));
      this.remaps.push(m);
    }
    for (const f of this.visitFilters) if (!this.anyMatch(f.space, f.table)) return false;
    for (const f of this.eventFilters) if (f.kind === 'value' && !this.anyMatch(f.space, f.table)) return false;

    this.T = ensureI32(this.T, n);
    this.VIS = ensureI32(this.VIS, n);
    this.NAME = ensureI32(this.NAME, n);
    if (this.needPath) this.PATH = ensureI32(this.PATH, n);
    for (const s of this.eventSpaces) this.EV.set(s, ensureI32(this.EV.get(s) ?? new Int32Array(0), n));
    let V = 0;
    for (let si = 0; si < segs.length; si++) {
      const seg = segs[si]!;
      const at = this.segStart[si]!;
      const m = this.remaps[si]!;
      this.T.set(seg.time, at);
      this.VIS.set(seg.visit, at);
      const v = seg.visit;
      for (let i = 0; i < v.length; i++) if (v[i]! >= V) V = v[i]! + 1;
      copyMapped(seg.column('name'), m.get('name')!, this.NAME, at);
      if (this.needPath) copyMapped(seg.column('path'), m.get('path')!, this.PATH, at);
      for (const s of this.eventSpaces) {
        const dst = this.EV.get(s)!;
        const p = seg.prop(s.slice(5));
        if (p) copyMapped(p.codes, m.get(s)!, dst, at);
        else dst.fill(0, at, at + seg.n);
      }
    }
    this.V = V;
    this.visitTable();
    return true;
  }

  /** First / last times, entry / exit pages, page views and first-event values of each visit of the day. */
  private visitTable(): void {
    const { n, V, T, VIS, NAME, PATH } = this;
    this.vFirstT = ensureI32(this.vFirstT, V);
    this.vFirstK = ensureI32(this.vFirstK, V);
    this.vLastT = ensureI32(this.vLastT, V);
    this.vPv = ensureI32(this.vPv, V);
    this.vEntryT = ensureI32(this.vEntryT, V);
    this.vEntry = ensureI32(this.vEntry, V);
    this.vExitT = ensureI32(this.vExitT, V);
    this.vExit = ensureI32(this.vExit, V);
    const { vFirstT, vFirstK, vLastT, vPv, vEntryT, vEntry, vExitT, vExit } = this;
    vFirstT.fill(T_MAX, 0, V);
    vLastT.fill(T_MIN, 0, V);
    vPv.fill(0, 0, V);
    vEntryT.fill(T_MAX, 0, V);
    vExitT.fill(T_MIN, 0, V);
    vEntry.fill(0, 0, V);
    vExit.fill(0, 0, V);
    const pv = this.pvTable.match;
    const path = this.needPath;
    for (let k = 0; k < n; k++) {
      const v = VIS[k]!;
      const t = T[k]!;
      // first: earliest time, then log order (strict <); last: latest time, then log order (>=)
      if (t < vFirstT[v]!) {
        vFirstT[v] = t;
        vFirstK[v] = k;
      }
      if (t >= vLastT[v]!) vLastT[v] = t;
      if (pv[NAME[k]!] === 1) {
        vPv[v]!++;
        if (path) {
          if (t < vEntryT[v]!) {
            vEntryT[v] = t;
            vEntry[v] = PATH[k]!;
          }
          if (t >= vExitT[v]!) {
            vExitT[v] = t;
            vExit[v] = PATH[k]!;
          }
        }
      }
    }
    // first-event values, read from the first event's segment
    for (const c of this.visitSpaces) this.vCodes.set(c, ensureI32(this.vCodes.get(c) ?? new Int32Array(0), V));
    const needUser = this.needVisitors;
    if (needUser) this.vUserHash = ensureF64(this.vUserHash, V);
    const userHashes = needUser ? this.dayUserHashes() : undefined;
    for (let v = 0; v < V; v++) {
      const k = vFirstK[v]!;
      if (vFirstT[v] === T_MAX) continue; // a code no event of these segments uses
      const si = this.segmentOf(k);
      const seg = this.segs[si]!;
      const i = k - this.segStart[si]!;
      for (const c of this.visitSpaces) this.vCodes.get(c)![v] = this.remaps[si]!.get(c)![seg.column(c)[i]!]!;
      if (userHashes) this.vUserHash[v] = userHashes[seg.user[i]!]!;
    }
  }

  private segmentOf(k: number): number {
    const s = this.segStart;
    let lo = 0;
    let hi = s.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (s[mid]! <= k) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  /** Hash of each day-level visitor code of the day (from each segment's new visitor ids). */
  private dayUserHashes(): Float64Array {
    let U = 0;
    for (const seg of this.segs) U = Math.max(U, seg.userBase + seg.userDict().length);
    const out = new Float64Array(U);
    for (const seg of this.segs) {
      const d = seg.userDict();
      for (let i = 0; i < d.length; i++) out[seg.userBase + i] = hash53(d[i]!);
    }
    return out;
  }

  /** Visits passing every visit-level filter, and their events grouped by visit (a stable counting sort). */
  protected groupVisits(): void {
    const { n, V, VIS } = this;
    this.vPass = ensureU8(this.vPass, V);
    const pass = this.vPass;
    for (let v = 0; v < V; v++) {
      let ok = this.vFirstT[v] !== T_MAX;
      for (let f = 0; ok && f < this.visitFilters.length; f++) ok = this.visitFilters[f]!.table.match[this.visitCode(this.visitFilters[f]!.dim, v)] === 1;
      pass[v] = ok ? 1 : 0;
    }
    this.vStart = ensureI32(this.vStart, V + 1);
    const start = this.vStart;
    start.fill(0, 0, V + 1);
    for (let k = 0; k < n; k++) if (pass[VIS[k]!] === 1) start[VIS[k]! + 1]!++;
    for (let v = 0; v < V; v++) start[v + 1]! += start[v]!;
    this.ORDER = ensureI32(this.ORDER, start[V]!);
    const cursor = start.slice(0, V);
    for (let k = 0; k < n; k++) {
      const v = VIS[k]!;
      if (pass[v] === 1) this.ORDER[cursor[v]!++] = k;
    }
  }

  /** The visit-level value of visit v for a visit-level dimension (0: none). */
  protected visitCode(dim: Dimension, v: number): number {
    if (dim === 'entryPage') return this.vEntry[v]!;
    if (dim === 'exitPage') return this.vExit[v]!;
    return this.vCodes.get(VISIT_COLUMNS[dim]!)![v]!;
  }

  /** Does event k pass every event-level filter? */
  protected eventPasses(k: number): boolean {
    const fs = this.eventFilters;
    for (let f = 0; f < fs.length; f++) {
      const x = fs[f]!;
      if (x.kind === 'goal') {
        const name = this.NAME[k]!;
        const hit = x.names.match[name] === 1 || (this.pvTable.match[name] === 1 && x.paths.match[this.PATH[k]!] === 1);
        if (hit === x.negate) return false;
      } else {
        const codes = x.space === 'name' ? this.NAME : x.space === 'path' ? this.PATH : this.EV.get(x.space)!;
        if (x.table.match[codes[k]!] !== 1) return false;
      }
    }
    return true;
  }
}

function copyMapped(src: Codes, map: Int32Array, dst: Int32Array, at: number): void {
  for (let i = 0; i < src.length; i++) dst[at + i] = map[src[i]!]!;
}

/** Counts of one row (or the totals). */
class Acc {
  visits = 0;
  pageviews = 0;
  events = 0;
  pvOfVisits = 0;
  bounces = 0;
  withPv = 0;
  durationMs = 0;
  stamp = -1;
  readonly visitors = new Set<number>();
  constructor(readonly codes: number[]) {}
}

const round1 = (x: number): number => Math.round(x * 10) / 10;
const round2 = (x: number): number => Math.round(x * 100) / 100;

export class QueryRun extends DayScan {
  private readonly dims: Dimension[];
  private readonly goalSpace: Space;
  /** per goal: the name code of its event, or its page table */
  private readonly goalMatchers: Array<{ name?: number; page?: Table }> = [];
  private readonly totals = new Acc([]);
  private readonly rows = new Map<number, Acc>();
  private readonly pairs = new Map<number, number>();
  private stamp = 0;
  private readonly timeDim: TimeDimension | undefined;
  private readonly needPerEvent: boolean;

  constructor(
    timeZone: string,
    private readonly goals: readonly Goal[],
    private readonly q: Question,
  ) {
    super(timeZone, []);
    for (const [op, dim, values] of q.filters) this.addFilter(op, dim, values, goals);
    this.dims = q.dimensions;
    for (const d of this.dims) this.need(d);
    this.timeDim = this.dims.find((d): d is TimeDimension => d.startsWith('time:'));
    this.goalSpace = this.space('goal');
    for (const g of goals) this.goalSpace.code(g.name);
    if (this.dims.includes('goal')) {
      this.needPath = true;
      for (const g of goals) {
        this.goalMatchers.push(g.event !== undefined ? { name: this.space('name').code(g.event) } : { page: this.space('path').table(pagePattern(g.page ?? ''), false) });
      }
    }
    if (this.timeDim) for (const b of rangeBuckets(this.timeDim, q.from, q.to, timeZone)) this.space('time').code(b);
    this.needVisitors = q.metrics.includes('visitors') || q.metrics.includes('conversionRate');
    this.needPerEvent = this.dims.some((d) => !isVisitLevel(d));
  }

  addDay(day: string, segs: readonly SegmentView[]): void {
    if (day < this.q.from || day > this.q.to) return;
    if (!this.load(day, segs)) return;
    this.groupVisits();
    const { V, ORDER, vStart, dims } = this;
    const pvm = this.pvTable.match;
    const hours = this.timeDim === 'time:hour' ? dayHours(day, this.timeZone) : undefined;
    const hourCodes = hours?.labels.map((l) => this.space('time').code(l));
    const dayTime = this.timeDim && this.timeDim !== 'time:hour' ? this.space('time').code(dayBucket(this.timeDim, day)) : 0;
    const codes = [0, 0, 0];
    for (let v = 0; v < V; v++) {
      if (this.vPass[v] !== 1) continue;
      const stamp = ++this.stamp;
      let selected = false;
      for (let j = vStart[v]!; j < vStart[v + 1]!; j++) {
        const k = ORDER[j]!;
        if (!this.eventPasses(k)) continue;
        selected = true;
        const pv = pvm[this.NAME[k]!] === 1 ? 1 : 0;
        this.totals.events++;
        this.totals.pageviews += pv;
        if (dims.length === 0) continue;
        if (!this.needPerEvent && this.lastVisitRow?.stamp === stamp) {
          this.lastVisitRow.events++;
          this.lastVisitRow.pageviews += pv;
          continue;
        }
        let goalDim = -1;
        let ok = true;
        for (let d = 0; d < dims.length; d++) {
          const dim = dims[d]!;
          let c: number;
          if (isVisitLevel(dim)) c = this.visitCode(dim, v);
          else if (dim === 'goal') {
            goalDim = d;
            c = 1;
          } else if (dim === 'page') c = this.PATH[k]!;
          else if (dim === 'event') c = this.NAME[k]!;
          else if (dim === 'time:hour') c = hourCodes![hourIndex(hours!.starts, this.T[k]!)]!;
          else if (dim.startsWith('time:')) c = dayTime;
          else c = this.EV.get(dim)![k]!;
          if (c === 0) {
            ok = false;
            break;
          }
          codes[d] = c;
        }
        if (!ok) continue;
        if (goalDim < 0) this.count(codes, v, stamp, pv);
        else {
          const name = this.NAME[k]!;
          for (let g = 0; g < this.goalMatchers.length; g++) {
            const m = this.goalMatchers[g]!;
            const hit = m.name !== undefined ? m.name === name : pvm[name] === 1 && m.page!.match[this.PATH[k]!] === 1;
            if (!hit) continue;
            codes[goalDim] = g + 1;
            this.count(codes, v, stamp, pv);
          }
        }
      }
      if (selected) this.addVisit(this.totals, v);
    }
  }

  private lastVisitRow: Acc | undefined;

  private count(codes: number[], v: number, stamp: number, pv: number): void {
    const acc = this.row(codes);
    acc.events++;
    acc.pageviews += pv;
    if (acc.stamp !== stamp) {
      acc.stamp = stamp;
      this.addVisit(acc, v);
    }
    this.lastVisitRow = acc;
  }

  private row(codes: number[]): Acc {
    const nd = this.dims.length;
    let key = codes[0]!;
    if (nd >= 2) {
      const pairKey = codes[0]! * CODE_BITS + codes[1]!;
      key = this.pairs.get(pairKey) ?? -1;
      if (key < 0) this.pairs.set(pairKey, (key = this.pairs.size + 1));
      if (nd === 3) key = key * CODE_BITS + codes[2]!;
    }
    let acc = this.rows.get(key);
    if (!acc) this.rows.set(key, (acc = new Acc(codes.slice(0, nd))));
    return acc;
  }

  private addVisit(acc: Acc, v: number): void {
    acc.visits++;
    const pv = this.vPv[v]!;
    acc.pvOfVisits += pv;
    if (pv === 1) acc.bounces++;
    if (pv >= 1) acc.withPv++;
    acc.durationMs += this.vLastT[v]! - this.vFirstT[v]!;
    if (this.needVisitors) acc.visitors.add(this.vUserHash[v]!);
  }

  /** Visitors of the whole selection (the denominator of conversionRate, from a run without goal filters). */
  totalVisitors(): number {
    return this.totals.visitors.size;
  }

  finish(baseVisitors = 0): QueryAnswer {
    const metrics = this.q.metrics;
    const values = (a: Acc): number[] => metrics.map((m) => metricOf(m, a, baseVisitors));
    const totals = values(this.totals);
    if (this.dims.length === 0) return { results: [{ dimensions: [], metrics: totals }], totals, totalRows: 1 };
    const dimSpaces = this.dims.map((d) => this.space(spaceOf(d)));
    const accs = [...this.rows.values()];
    if (this.dims.length === 1 && (this.timeDim || this.dims[0] === 'goal')) {
      const have = new Set(accs.map((a) => a.codes[0]!));
      const all = this.space(this.dims[0] === 'goal' ? 'goal' : 'time');
      for (const b of (this.timeDim ? rangeBuckets(this.timeDim, this.q.from, this.q.to, this.timeZone) : this.goals.map((g) => g.name))) {
        const c = all.code(b);
        if (!have.has(c)) {
          have.add(c);
          accs.push(new Acc([c]));
        }
      }
    }
    let rows: QueryRow[] = accs.map((a) => ({ dimensions: a.codes.map((c, i) => dimSpaces[i]!.values[c]!), metrics: values(a) }));
    const order = this.q.orderBy.map(([name, dir]) => {
      const mi = metrics.indexOf(name as Metric);
      const di = this.dims.indexOf(name as Dimension);
      return { mi, di, sign: dir === 'desc' ? -1 : 1 };
    });
    rows.sort((a, b) => {
      for (const o of order) {
        const c = o.mi >= 0 ? a.metrics[o.mi]! - b.metrics[o.mi]! : o.di >= 0 ? cmp(a.dimensions[o.di]!, b.dimensions[o.di]!) : 0;
        if (c !== 0) return c * o.sign;
      }
      for (let i = 0; i < a.dimensions.length; i++) {
        const c = cmp(a.dimensions[i]!, b.dimensions[i]!);
        if (c !== 0) return c;
      }
      return 0;
    });
    const totalRows = rows.length;
    rows = rows.slice(this.q.offset, this.q.offset + this.q.limit);
    return { results: rows, totals, totalRows };
  }
}

const cmp = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

function hourIndex(starts: number[], t: number): number {
  let i = 0;
  while (i + 1 < starts.length && starts[i + 1]! <= t) i++;
  return i;
}

function metricOf(m: Metric, a: Acc, baseVisitors: number): number {
  switch (m) {
    case 'visitors':
      return a.visitors.size;
    case 'visits':
      return a.visits;
    case 'pageviews':
      return a.pageviews;
    case 'events':
      return a.events;
    case 'bounceRate':
      return a.withPv === 0 ? 0 : round1((a.bounces / a.withPv) * 100);
    case 'viewsPerVisit':
      return a.visits === 0 ? 0 : round2(a.pvOfVisits / a.visits);
    case 'visitDuration':
      return a.visits === 0 ? 0 : Math.round(a.durationMs / a.visits / 1000);
    case 'conversionRate':
      return baseVisitors === 0 ? 0 : round1((a.visitors.size / baseVisitors) * 100);
  }
}

/** The question conversionRate divides by: the same selection without goal filters and without dimensions. */
export function baseQuestion(q: Question): Question | undefined {
  if (!q.metrics.includes('conversionRate')) return undefined;
  return { ...q, metrics: ['visitors'], dimensions: [], filters: q.filters.filter(([, d]) => d !== 'goal'), orderBy: [], offset: 0, limit: 1 };
}

export class FunnelRun extends DayScan {
  private readonly steps: Array<{ name?: number; page?: Table }>;
  private readonly visits: number[];
  private readonly visitors: Array<Set<number>>;

  constructor(
    timeZone: string,
    private readonly q: FunnelQuestion,
  ) {
    super(timeZone, q.filters);
    this.needVisitors = true;
    this.steps = q.steps.map((s) => {
      if (s.event !== undefined) return { name: this.space('name').code(s.event) };
      this.needPath = true;
      return { page: this.space('path').table(pagePattern(s.page ?? ''), false) };
    });
    this.visits = q.steps.map(() => 0);
    this.visitors = q.steps.map(() => new Set<number>());
  }

  addDay(day: string, segs: readonly SegmentView[]): void {
    if (day < this.q.from || day > this.q.to) return;
    if (!this.load(day, segs)) return;
    this.groupVisits();
    const { V, ORDER, vStart, T, NAME, PATH, steps } = this;
    const pvm = this.pvTable.match;
    for (let v = 0; v < V; v++) {
      if (this.vPass[v] !== 1) continue;
      const a = vStart[v]!;
      const b = vStart[v + 1]!;
      // by time, then log order: an insertion sort (a visit's events come mostly in time order already)
      for (let j = a + 1; j < b; j++) {
        const k = ORDER[j]!;
        const t = T[k]!;
        let i = j - 1;
        while (i >= a && T[ORDER[i]!]! > t) {
          ORDER[i + 1] = ORDER[i]!;
          i--;
        }
        ORDER[i + 1] = k;
      }
      let s = 0;
      for (let j = a; j < b && s < steps.length; j++) {
        const k = ORDER[j]!;
        const st = steps[s]!;
        const name = NAME[k]!;
        const hit = st.name !== undefined ? st.name === name : pvm[name] === 1 && st.page!.match[PATH[k]!] === 1;
        if (hit) {
          this.visits[s]!++;
          this.visitors[s]!.add(this.vUserHash[v]!);
          s++;
        }
      }
    }
  }

  finish(): FunnelStepAnswer[] {
    const first = this.visits[0]!;
    return this.q.steps.map((st, i) => ({
      label: st.label,
      visits: this.visits[i]!,
      visitors: this.visitors[i]!.size,
      conversionRate: first === 0 ? 0 : round1((this.visits[i]! / first) * 100),
      dropoff: i === 0 ? 0 : this.visits[i - 1]! - this.visits[i]!,
    }));
  }
}
