/**
 * Answers a question (CONTRACT.md "Questions: POST /query") over day tables (day-table.ts), one day at a time: the
 * caller feeds each day's table to `addDay` and yields to its event loop between days, then asks `finish`. This file is long because
 * the per-day pipeline (map the day's dictionaries, resolve filters to day-code tables, pass visits, walk
 * their events, count rows and visitors) is one piece whose steps share reusable buffers.
 *
 * Values are compared as question-wide codes: each day's dictionary is mapped once onto the question's dictionaries
 * ("spaces"), every filter is a table over a space (so `contains` runs once per distinct value), and per day each
 * table is composed into a match array over the day's own codes. The day's events come grouped by visit, with the
 * visit table (first / last time, page views, entry / exit, visitor, first-event values) already built. Per-event
 * loops read typed arrays and allocate nothing; rows are counted in typed arrays indexed by row number.
 */

import { isRevenueMetric, type Dimension, type Filter, type FunnelQuestion, type FunnelStepAnswer, type Goal, type Metric, type Question, type QueryAnswer, type QueryRow, type TimeDimension } from '../query/types.ts';
import { PAGE_VIEW, visitLists, type DayTable, type VisitValueColumn } from './day-table.ts';
import { Distinct, PairSet } from './distinct.ts';
import { NO_FIGURES, type GroupFigures } from './revenue.ts';
import type { Codes, ValueColumn } from './segment.ts';
import { dayBucket, dayHours, rangeBuckets } from './time-buckets.ts';

/** Codes of one space stay below this, so up to two codes compose into one exact number (2 × 26 bits < 53). */
const CODE_BITS = 2 ** 26;
/** time:hour: a day's events fall in 15-minute slots from −15 h to +40 h around its UTC midnight (time-buckets.ts). */
const SLOT_MS = 15 * 60_000;
const SLOT_FROM_MS = -15 * 3_600_000;
const SLOTS = (55 * 3_600_000) / SLOT_MS;

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


/** Per day: a question table over a space composed into a match array over the day's codes of that space. */
function compose(t: Table, remap: Int32Array): Uint8Array {
  const out = new Uint8Array(remap.length);
  out[0] = t.match[0]!;
  for (let c = 1; c < remap.length; c++) out[c] = t.match[remap[c]!]!;
  return out;
}

function anyOne(m: Uint8Array): boolean {
  for (let i = 0; i < m.length; i++) if (m[i] === 1) return true;
  return false;
}

const EMPTY = new Uint32Array(0);

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
 * What every run shares: the question's spaces and filters, and per day the dictionaries mapped onto them, the
 * filters as day-code match arrays, and which visits pass the visit-level filters.
 */
abstract class DayScan {
  protected readonly spaces = new Map<string, Space>();
  protected readonly visitFilters: ValueFilter[] = [];
  protected readonly eventFilters: Array<ValueFilter | GoalFilter> = [];
  /** spaces whose day dictionaries a day maps (name always) */
  protected readonly needed = new Set<string>(['name']);
  protected needVisitors = false;

  // the current day
  protected dt!: DayTable;
  protected dayIndex = -1;
  protected readonly remaps = new Map<string, Int32Array>();
  /** day name code → 1 for page_view */
  protected pvDay = new Uint8Array(0);
  /** name and path per event, set when the day's events are walked (a visit-level question never reads them) */
  protected NAME: Codes = EMPTY;
  private eventColumnsReady = false;
  protected PATH: Codes = EMPTY;
  protected TIME: Int32Array = new Int32Array(0);
  /** events at or after this time (ms from the day's UTC midnight) are not selected: `until` on the last day */
  protected cutoff = Infinity;
  protected vPass = new Uint8Array(0);
  private vMark = new Uint8Array(0);
  // event filters of the day: value filters as (codes, match), goal filters as (names, paths, negate)
  protected efCodes: Codes[] = [];
  /** the same columns as stored (visit lists are kept per stored column) */
  protected efRaw: Codes[] = [];
  protected efMatch: Uint8Array[] = [];
  protected gfNames: Uint8Array[] = [];
  protected gfPaths: Uint8Array[] = [];
  protected gfNegate: boolean[] = [];
  /** visitors seen today: per row (row × U + visitor) */
  protected readonly pairs = new PairSet();
  /**
   * reusable Int32 copies of the day's per-visit columns: the per-visit loops then read one array type (per-event
   * columns are read as stored: a question touches only the events of its candidate visits, so copying them all costs more)
   */
  private readonly scratch: Int32Array[] = [];
  private scratchUsed = 0;

  /** Per-visit codes widened into a reusable Int32Array (valid until the next day). */
  protected widen(codes: Codes | Int32Array): Int32Array {
    const i = this.scratchUsed++;
    let a = this.scratch[i];
    if (!a || a.length < codes.length) this.scratch[i] = a = new Int32Array(Math.max(codes.length, (a?.length ?? 0) * 2));
    a.set(codes);
    return a;
  }

  constructor(visitFilters: Filter[]) {
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
      this.needed.add('path');
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
    if (dim === 'goal' || dim.startsWith('time:')) return;
    this.needed.add(spaceOf(dim));
  }

  /** The day's codes of a space (per event; per visit for visit-level columns). */
  protected eventCodes(space: string): Codes {
    const v = this.dt.view;
    if (space.startsWith('prop:')) return v.prop(space.slice(5))?.codes ?? EMPTY;
    return v.column(space as ValueColumn);
  }

  protected visitCodes(dim: Dimension): Codes {
    const t = this.dt.table;
    if (dim === 'entryPage') return t.entry;
    if (dim === 'exitPage') return t.exit;
    return t.col(VISIT_COLUMNS[dim] as VisitValueColumn);
  }

  /** Loads a day: false when its dictionaries show no event can be selected (the day is then skipped). */
  protected load(dt: DayTable): boolean {
    if (dt.view.n === 0) return false;
    this.scratchUsed = 0;
    this.dt = dt;
    this.dayIndex++;
    const view = dt.view;
    for (const space of this.needed) {
      const dict = space.startsWith('prop:') ? view.prop(space.slice(5))?.dict : view.dict(space as ValueColumn);
      const s = this.space(space);
      const out = new Int32Array((dict?.length ?? 0) + 1);
      if (dict) for (let i = 0; i < dict.length; i++) out[i + 1] = s.code(dict[i]!);
      this.remaps.set(space, out);
    }
    const names = view.dict('name');
    this.pvDay = new Uint8Array(names.length + 1);
    for (let i = 0; i < names.length; i++) if (names[i] === PAGE_VIEW) this.pvDay[i + 1] = 1;
    this.eventColumnsReady = false;

    const vfCodes: Codes[] = [];
    const vfMatch: Uint8Array[] = [];
    for (const f of this.visitFilters) {
      const m = compose(f.table, this.remaps.get(f.space)!);
      if (!anyOne(m)) return false;
      vfCodes.push(this.visitCodes(f.dim));
      vfMatch.push(m);
    }
    this.efCodes = [];
    this.efRaw = [];
    this.efMatch = [];
    this.gfNames = [];
    this.gfPaths = [];
    this.gfNegate = [];
    for (const f of this.eventFilters) {
      if (f.kind === 'goal') {
        this.gfNames.push(compose(f.names, this.remaps.get('name')!));
        this.gfPaths.push(compose(f.paths, this.remaps.get('path')!));
        this.gfNegate.push(f.negate);
        continue;
      }
      const m = compose(f.table, this.remaps.get(f.space)!);
      if (!anyOne(m)) return false;
      const codes = this.eventCodes(f.space);
      if (codes.length === 0) {
        if (m[0] !== 1) return false; // the day has no such property: only "no value" could pass
        continue; // every event has no value, and that passes
      }
      this.efCodes.push(codes);
      this.efRaw.push(codes);
      this.efMatch.push(m);
    }

    const { V, start } = dt.table;
    if (this.vPass.length < V) this.vPass = new Uint8Array(Math.max(V, this.vPass.length * 2));
    const pass = this.vPass;
    const nf = vfCodes.length;
    for (let v = 0; v < V; v++) {
      let ok = start[v]! < start[v + 1]!;
      for (let f = 0; ok && f < nf; f++) ok = vfMatch[f]![vfCodes[f]![v]!] === 1;
      pass[v] = ok ? 1 : 0;
    }
    // an event filter no event without a value passes: only visits with an event of a passing value can be selected
    for (let f = 0; f < this.efCodes.length; f++) if (this.efMatch[f]![0] === 0) this.onlyVisitsWith(this.efRaw[f]!, this.efMatch[f]!);
    for (const [codes, match] of this.candidates()) this.onlyVisitsWith(codes, match);
    this.pairs.clear();
    return true;
  }

  /** More (codes, match) pairs that every selected visit must have an event of (the funnel's first step). */
  protected candidates(): Array<[Codes, Uint8Array]> {
    return [];
  }

  /** Keeps in vPass only the visits with at least one event whose code passes `match`. */
  protected onlyVisitsWith(codes: Codes, match: Uint8Array): void {
    const t = this.dt.table;
    const lists = visitLists(t, codes, match.length - 1);
    if (this.vMark.length < t.V) this.vMark = new Uint8Array(Math.max(t.V, this.vMark.length * 2));
    const mark = this.vMark;
    mark.fill(0, 0, t.V);
    for (let c = 1; c < match.length; c++) {
      if (match[c] !== 1) continue;
      for (let i = lists.at[c]!; i < lists.at[c + 1]!; i++) mark[lists.visits[i]!] = 1;
    }
    const pass = this.vPass;
    for (let v = 0; v < t.V; v++) pass[v]! &= mark[v]!;
  }

  protected eventColumns(): void {
    if (this.eventColumnsReady) return;
    this.eventColumnsReady = true;
    const view = this.dt.view;
    this.NAME = view.column('name');
    this.TIME = view.time;
    this.PATH = this.needed.has('path') ? view.column('path') : this.NAME;
  }

  /** Does event k pass every event-level filter (and the day's cut-off time)? */
  protected eventPasses(k: number): boolean {
    if (this.TIME[k]! >= this.cutoff) return false;
    const ef = this.efCodes;
    for (let f = 0; f < ef.length; f++) if (this.efMatch[f]![ef[f]![k]!] !== 1) return false;
    const gn = this.gfNames;
    for (let f = 0; f < gn.length; f++) {
      const name = this.NAME[k]!;
      const hit = gn[f]![name] === 1 || (this.pvDay[name] === 1 && this.gfPaths[f]![this.PATH[k]!] === 1);
      if (hit === this.gfNegate[f]) return false;
    }
    return true;
  }

  protected get anyEventFilter(): boolean {
    return this.efCodes.length > 0 || this.gfNames.length > 0 || this.cutoff !== Infinity;
  }

  /** The day's cut-off: `until` (HH:MM local) on the question's last day, as ms from the day's UTC midnight; else none. */
  protected cutoffFor(day: string, last: string, until: string | undefined, timeZone: string): number {
    if (until === undefined || day !== last) return Infinity;
    const h = dayHours(day, timeZone);
    const hour = `${day}T${until.slice(0, 2)}`;
    // the first local hour at or after `until`'s (an hour a DST change skips starts with the next one)
    let i = h.labels.findIndex((l) => l >= hour);
    if (i < 0) return Infinity;
    const minutes = h.labels[i] === hour ? Number(until.slice(3, 5)) : 0;
    return h.starts[i]! + minutes * 60_000;
  }
}

const round1 = (x: number): number => Math.round(x * 10) / 10;
const round2 = (x: number): number => Math.round(x * 100) / 100;

/** Row counts in typed arrays indexed by row number; row 0 is the totals. */
class Rows {
  n = 1;
  visits: Float64Array = new Float64Array(64);
  pageviews: Float64Array = new Float64Array(64);
  events: Float64Array = new Float64Array(64);
  pvOfVisits: Float64Array = new Float64Array(64);
  bounces: Float64Array = new Float64Array(64);
  withPv: Float64Array = new Float64Array(64);
  durationMs: Float64Array = new Float64Array(64);
  /** the last visit (question-wide stamp) counted in the row */
  stamp: Float64Array = new Float64Array(64).fill(-1);
  readonly codes: number[][] = [[]];
  readonly distinct: Distinct[] = [new Distinct()];

  add(codes: number[]): number {
    if (this.n === this.visits.length) this.grow();
    this.codes.push(codes);
    this.distinct.push(new Distinct());
    return this.n++;
  }

  private grow(): void {
    const g = (a: Float64Array, fill = 0): Float64Array => {
      const b = new Float64Array(a.length * 2).fill(fill);
      b.set(a);
      return b;
    };
    this.visits = g(this.visits);
    this.pageviews = g(this.pageviews);
    this.events = g(this.events);
    this.pvOfVisits = g(this.pvOfVisits);
    this.bounces = g(this.bounces);
    this.withPv = g(this.withPv);
    this.durationMs = g(this.durationMs);
    this.stamp = g(this.stamp, -1);
  }
}

export class QueryRun extends DayScan {
  private readonly dims: Dimension[];
  private readonly goalSpace: Space;
  /** per goal: its event name (question code), or its page table */
  private readonly goalMatchers: Array<{ name?: string; page?: Table }> = [];
  private readonly rows = new Rows();
  /** one dimension: row number by question code; several: composite key → row number */
  private rowOf = new Int32Array(64);
  private readonly rowMap = new Map<number, number>();
  /** several dimensions: per level, (id of the codes before, code) → id (revenue adds a fourth to three) */
  private readonly levels: Array<Map<number, number>> = [];
  private stampSeq = 0;
  private readonly timeDim: TimeDimension | undefined;
  private readonly visitLevelOnly: boolean;
  /** events and pageviews are asked (else a visit-level row stops at the visit's first selected event) */
  private readonly needEventCounts: boolean;
  /** bounceRate, viewsPerVisit or visitDuration is asked (their sums per visit) */
  private readonly needVisitMetrics: boolean;
  /** per visitor of the day: the first row it was counted in (−1: none yet); other rows go through the PairSet */
  private userRow = new Int32Array(0);
  private readonly codes = [0, 0, 0];
  private seenToday = new Uint8Array(0);

  constructor(
    private readonly timeZone: string,
    private readonly goals: readonly Goal[],
    private readonly q: Question,
  ) {
    super([]);
    for (const [op, dim, values] of q.filters) this.addFilter(op, dim, values, goals);
    this.dims = q.dimensions;
    for (const d of this.dims) this.need(d);
    this.timeDim = this.dims.find((d): d is TimeDimension => d.startsWith('time:'));
    this.goalSpace = this.space('goal');
    for (const g of goals) this.goalSpace.code(g.name);
    if (this.dims.includes('goal')) {
      this.needed.add('path');
      for (const g of goals) this.goalMatchers.push(g.event !== undefined ? { name: g.event } : { page: this.space('path').table(pagePattern(g.page ?? ''), false) });
    }
    if (this.timeDim) for (const b of rangeBuckets(this.timeDim, q.from, q.to, timeZone)) this.space('time').code(b);
    this.needVisitors = q.metrics.includes('visitors') || q.metrics.includes('conversionRate');
    this.visitLevelOnly = this.dims.every(isVisitLevel);
    this.needEventCounts = q.metrics.includes('events') || q.metrics.includes('pageviews');
    this.needVisitMetrics = q.metrics.some((m) => m === 'bounceRate' || m === 'viewsPerVisit' || m === 'visitDuration');
  }

  addDay(day: string, dt: DayTable | undefined): void {
    if (day < this.q.from || day > this.q.to || !dt) return;
    this.cutoff = this.cutoffFor(day, this.q.to, this.q.until, this.timeZone);
    if (!this.load(dt)) return;
    if (this.dims.length === 0 || (this.dims.length === 1 && this.dims[0] !== 'goal')) {
      this.addDayGrouped(day, dt);
      return;
    }
    this.eventColumns();
    const { V, U, start } = dt.table;
    const dims = this.dims;
    const nd = dims.length;
    // per dimension: the day's codes (per visit or per event) and their question codes
    const dimCodes: Array<Codes | Int32Array> = [];
    const dimRemap: Int32Array[] = [];
    const dimKind: number[] = []; // 0 visit-level, 1 event-level, 2 goal, 3 hour, 4 whole-day bucket
    for (const d of dims) {
      if (isVisitLevel(d)) {
        dimKind.push(0);
        dimCodes.push(this.visitCodes(d));
        dimRemap.push(this.remaps.get(spaceOf(d))!);
      } else if (d === 'goal') {
        dimKind.push(2);
        dimCodes.push(EMPTY);
        dimRemap.push(new Int32Array(0));
      } else if (d === 'time:hour') {
        dimKind.push(3);
        dimCodes.push(this.dt.view.time);
        dimRemap.push(this.hourSlots(day));
      } else if (d.startsWith('time:')) {
        dimKind.push(4);
        dimCodes.push(EMPTY);
        dimRemap.push(Int32Array.of(this.space('time').code(dayBucket(d as TimeDimension, day))));
      } else {
        dimKind.push(1);
        dimCodes.push(this.eventCodes(spaceOf(d)));
        dimRemap.push(this.remaps.get(spaceOf(d))!);
      }
    }
    const goalNames: number[] = [];
    const goalPaths: Uint8Array[] = [];
    if (dims.includes('goal')) {
      const names = this.dt.view.dict('name');
      for (const m of this.goalMatchers) {
        goalNames.push(m.name !== undefined ? names.indexOf(m.name) + 1 || -1 : -1);
        goalPaths.push(m.page ? compose(m.page, this.remaps.get('path')!) : new Uint8Array(0));
      }
    }
    if (this.seenToday.length < U) this.seenToday = new Uint8Array(Math.max(U, this.seenToday.length * 2));
    else this.seenToday.fill(0, 0, U);
    if (this.userRow.length < U) this.userRow = new Int32Array(Math.max(U, this.userRow.length * 2));
    this.userRow.fill(-1, 0, U);
    const needEventCounts = this.needEventCounts;
    const pass = this.vPass;
    const pvDay = this.pvDay;
    const NAME = this.NAME;
    const vPv = dt.table.pv;
    const rows = this.rows;
    const codes = this.codes;
    const eventLevel = this.anyEventFilter || !this.visitLevelOnly;
    for (let v = 0; v < V; v++) {
      if (pass[v] !== 1) continue;
      const a = start[v]!;
      const b = start[v + 1]!;
      if (!eventLevel) {
        rows.events[0]! += b - a;
        rows.pageviews[0]! += vPv[v]!;
        this.addVisit(0, v);
        if (nd === 0) continue;
        const r = this.visitRow(v, dimCodes, dimRemap);
        if (r < 0) continue;
        rows.events[r]! += b - a;
        rows.pageviews[r]! += vPv[v]!;
        this.addVisit(r, v);
        continue;
      }
      const stamp = ++this.stampSeq;
      let selected = false;
      // all dimensions visit-level: the visit's one row, found at its first selected event
      let visitRow = -2;
      for (let k = a; k < b; k++) {
        if (!this.eventPasses(k)) continue;
        selected = true;
        const pv = pvDay[NAME[k]!]!;
        rows.events[0]!++;
        rows.pageviews[0]! += pv;
        if (nd === 0) {
          if (!needEventCounts) break;
          continue;
        }
        if (this.visitLevelOnly) {
          if (visitRow === -2) visitRow = this.visitRow(v, dimCodes, dimRemap);
          if (visitRow >= 0) this.count(visitRow, v, stamp, pv);
          if (!needEventCounts) break;
          continue;
        }
        let goalDim = -1;
        let ok = true;
        for (let d = 0; d < nd; d++) {
          const kind = dimKind[d]!;
          let c: number;
          if (kind === 0) c = dimRemap[d]![dimCodes[d]![v]!]!;
          else if (kind === 1) c = k < dimCodes[d]!.length ? dimRemap[d]![dimCodes[d]![k]!]! : 0;
          else if (kind === 3) c = dimRemap[d]![slotOf(dimCodes[d]![k]!)]!;
          else if (kind === 4) c = dimRemap[d]![0]!;
          else {
            goalDim = d;
            c = 1;
          }
          if (c === 0) {
            ok = false;
            break;
          }
          codes[d] = c;
        }
        if (!ok) continue;
        if (goalDim < 0) {
          this.count(this.row(codes), v, stamp, pv);
          continue;
        }
        const name = NAME[k]!;
        for (let g = 0; g < goalNames.length; g++) {
          const hit = goalNames[g]! >= 0 ? goalNames[g] === name : pvDay[name] === 1 && goalPaths[g]![this.PATH[k]!] === 1;
          if (!hit) continue;
          codes[goalDim] = g + 1;
          this.count(this.row(codes), v, stamp, pv);
        }
      }
      if (selected) this.addVisit(0, v);
    }
  }

  // day-level group accumulators (index: the day's code of the one dimension; hour: the hour's index), reused
  private gVisits = new Float64Array(0);
  private gPageviews = new Float64Array(0);
  private gEvents = new Float64Array(0);
  private gPvOfVisits = new Float64Array(0);
  private gBounces = new Float64Array(0);
  private gWithPv = new Float64Array(0);
  private gDuration = new Float64Array(0);
  private gLastVisit = new Int32Array(0);
  private gRow = new Int32Array(0);
  private gTouched = new Int32Array(0);
  private gRemapNow: Int32Array = new Int32Array(0);
  private vPvNow: Int32Array = new Int32Array(0);
  private vUserNow: Int32Array = new Int32Array(0);

  /**
   * No dimension or one (not goal): each selected visit or event falls in one group of the day, counted in typed
   * arrays by day code and folded into the rows once at the end of the day.
   */
  private addDayGrouped(day: string, dt: DayTable): void {
    const { V, U, start, firstT, lastT, userHash } = dt.table;
    const vPv = (this.vPvNow = this.widen(dt.table.pv));
    const user = (this.vUserNow = this.widen(dt.table.user));
    const dim = this.dims[0];
    // kind: 0 none, 1 per visit, 2 per event, 3 hour
    let kind = 0;
    let vCodes: Int32Array = new Int32Array(0);
    let eCodes: Codes | Int32Array = EMPTY;
    let gRemap: Int32Array = Int32Array.of(0);
    let hourOfSlot = new Int32Array(0);
    if (dim === undefined) kind = 0;
    else if (isVisitLevel(dim)) {
      kind = 1;
      vCodes = this.widen(this.visitCodes(dim));
      gRemap = this.remaps.get(spaceOf(dim))!;
    } else if (dim === 'time:hour') {
      kind = 3;
      eCodes = dt.view.time;
      const slots = this.hourSlots(day);
      // slot → hour index (group), and hour index → question code
      hourOfSlot = new Int32Array(SLOTS);
      const codes: number[] = [0];
      for (let s = 0; s < SLOTS; s++) {
        if (codes[codes.length - 1] !== slots[s]) codes.push(slots[s]!);
        hourOfSlot[s] = codes.length - 1;
      }
      gRemap = Int32Array.from(codes);
    } else if (dim.startsWith('time:')) {
      kind = 0;
      gRemap = Int32Array.of(this.space('time').code(dayBucket(dim as TimeDimension, day)));
    } else {
      kind = 2;
      eCodes = this.eventCodes(spaceOf(dim));
      gRemap = this.remaps.get(spaceOf(dim))!;
    }
    const G = gRemap.length;
    if (this.gVisits.length < G) {
      const n = Math.max(G, this.gVisits.length * 2);
      this.gVisits = new Float64Array(n);
      this.gPageviews = new Float64Array(n);
      this.gEvents = new Float64Array(n);
      this.gPvOfVisits = new Float64Array(n);
      this.gBounces = new Float64Array(n);
      this.gWithPv = new Float64Array(n);
      this.gDuration = new Float64Array(n);
      this.gLastVisit = new Int32Array(n);
      this.gRow = new Int32Array(n);
      this.gTouched = new Int32Array(n);
    }
    const { gVisits, gPageviews, gEvents, gPvOfVisits, gBounces, gWithPv, gDuration, gLastVisit, gRow, gTouched } = this;
    gLastVisit.fill(-1, 0, G);
    gRow.fill(-1, 0, G);
    let touched = 0;
    if (this.seenToday.length < U) this.seenToday = new Uint8Array(Math.max(U, this.seenToday.length * 2));
    else this.seenToday.fill(0, 0, U);
    if (this.userRow.length < U) this.userRow = new Int32Array(Math.max(U, this.userRow.length * 2));
    this.userRow.fill(-1, 0, U);
    this.gRemapNow = gRemap;
    const seen = this.seenToday;
    const needVisitors = this.needVisitors;
    const rows = this.rows;
    const total = rows.distinct[0]!;
    const dayIndex = this.dayIndex;
    const pass = this.vPass;
    const pvDay = this.pvDay;
    const filtered = this.anyEventFilter;
    const walk = filtered || kind >= 2;
    if (walk) this.eventColumns();
    const NAME = this.NAME;
    const needEventCounts = this.needEventCounts || kind >= 2;
    const eLen = eCodes.length;
    let tVisits = 0;
    let tPageviews = 0;
    let tEvents = 0;
    let tPvOfVisits = 0;
    let tBounces = 0;
    let tWithPv = 0;
    let tDuration = 0;
    for (let v = 0; v < V; v++) {
      if (pass[v] !== 1) continue;
      const a = start[v]!;
      const b = start[v + 1]!;
      let selEvents = 0;
      let selPv = 0;
      if (!walk) {
        selEvents = b - a;
        selPv = vPv[v]!;
      } else {
        for (let k = a; k < b; k++) {
          if (filtered && !this.eventPasses(k)) continue;
          const p = pvDay[NAME[k]!]!;
          selEvents++;
          selPv += p;
          if (kind >= 2) {
            const g = kind === 2 ? (k < eLen ? eCodes[k]! : 0) : hourOfSlot[slotOf(eCodes[k]!)]!;
            if (gRemap[g] === 0) continue;
            if (gEvents[g]!++ === 0) gTouched[touched++] = g;
            gPageviews[g]! += p;
            if (gLastVisit[g] === v) continue;
            gLastVisit[g] = v;
            this.groupVisit(g, v, dt, dayIndex);
          } else if (!needEventCounts) break;
        }
        if (selEvents === 0) continue;
      }
      const pv = vPv[v]!;
      const dur = lastT[v]! - firstT[v]!;
      tVisits++;
      tEvents += selEvents;
      tPageviews += selPv;
      tPvOfVisits += pv;
      if (pv === 1) tBounces++;
      if (pv >= 1) tWithPv++;
      tDuration += dur;
      if (needVisitors) {
        const u = user[v]!;
        if (seen[u] === 0) {
          seen[u] = 1;
          total.add(userHash[u]!, dayIndex);
        }
      }
      if (kind === 1 || (kind === 0 && G === 1 && gRemap[0] !== 0)) {
        const g = kind === 1 ? vCodes[v]! : 0;
        if (gRemap[g] === 0) continue;
        if (gVisits[g] === 0 && gEvents[g] === 0) gTouched[touched++] = g;
        gEvents[g]! += selEvents;
        gPageviews[g]! += selPv;
        this.groupVisit(g, v, dt, dayIndex);
      }
    }
    rows.visits[0]! += tVisits;
    rows.pageviews[0]! += tPageviews;
    rows.events[0]! += tEvents;
    rows.pvOfVisits[0]! += tPvOfVisits;
    rows.bounces[0]! += tBounces;
    rows.withPv[0]! += tWithPv;
    rows.durationMs[0]! += tDuration;
    for (let i = 0; i < touched; i++) {
      const g = gTouched[i]!;
      const r = this.groupRow(g);
      rows.visits[r]! += gVisits[g]!;
      rows.pageviews[r]! += gPageviews[g]!;
      rows.events[r]! += gEvents[g]!;
      rows.pvOfVisits[r]! += gPvOfVisits[g]!;
      rows.bounces[r]! += gBounces[g]!;
      rows.withPv[r]! += gWithPv[g]!;
      rows.durationMs[r]! += gDuration[g]!;
      gVisits[g] = 0;
      gPageviews[g] = 0;
      gEvents[g] = 0;
      gPvOfVisits[g] = 0;
      gBounces[g] = 0;
      gWithPv[g] = 0;
      gDuration[g] = 0;
    }
  }

  /** The row of day group g (its question code gRemap[g]). */
  private groupRow(g: number): number {
    let r = this.gRow[g]!;
    if (r < 0) {
      this.codes[0] = this.gRemapNow[g]!;
      this.gRow[g] = r = this.row(this.codes);
    }
    return r;
  }

  /** Visit v counted in day group g: its visit metrics, and its visitor once per group and day. */
  private groupVisit(g: number, v: number, dt: DayTable, dayIndex: number): void {
    this.gVisits[g]!++;
    if (this.needVisitMetrics) {
      const t = dt.table;
      const pv = this.vPvNow[v]!;
      this.gPvOfVisits[g]! += pv;
      if (pv === 1) this.gBounces[g]!++;
      if (pv >= 1) this.gWithPv[g]!++;
      this.gDuration[g]! += t.lastT[v]! - t.firstT[v]!;
    }
    if (!this.needVisitors) return;
    const u = this.vUserNow[v]!;
    const first = this.userRow[u]!;
    if (first === g) return;
    if (first < 0) this.userRow[u] = g;
    else if (!this.pairs.add(g * dt.table.U + u)) return;
    let r = this.gRow[g]!;
    if (r < 0) r = this.groupRow(g);
    this.rows.distinct[r]!.add(dt.table.userHash[u]!, dayIndex);
  }

  /** Question code of each 15-minute slot of the day for time:hour. */
  private hourSlots(day: string): Int32Array {
    const h = dayHours(day, this.timeZone);
    const space = this.space('time');
    const out = new Int32Array(SLOTS);
    let i = 0;
    for (let s = 0; s < SLOTS; s++) {
      const off = SLOT_FROM_MS + s * SLOT_MS;
      while (i + 1 < h.starts.length && h.starts[i + 1]! <= off) i++;
      out[s] = space.code(h.labels[i]!);
    }
    return out;
  }

  private visitRow(v: number, dimCodes: Array<Codes | Int32Array>, dimRemap: Int32Array[]): number {
    const codes = this.codes;
    for (let d = 0; d < this.dims.length; d++) {
      const c = dimRemap[d]![dimCodes[d]![v]!]!;
      if (c === 0) return -1;
      codes[d] = c;
    }
    return this.row(codes);
  }

  private count(r: number, v: number, stamp: number, pv: number): void {
    const rows = this.rows;
    rows.events[r]!++;
    rows.pageviews[r]! += pv;
    if (rows.stamp[r] !== stamp) {
      rows.stamp[r] = stamp;
      this.addVisit(r, v);
    }
  }

  private row(codes: number[]): number {
    const nd = this.dims.length;
    if (nd === 1) {
      const c = codes[0]!;
      if (c >= this.rowOf.length) {
        const b = new Int32Array(Math.max(c + 1, this.rowOf.length * 2));
        b.set(this.rowOf);
        this.rowOf = b;
      }
      let r = this.rowOf[c]!;
      if (r === 0) this.rowOf[c] = r = this.rows.add([c]);
      return r;
    }
    // several: the codes before the last become one id, a level at a time (ids stay below CODE_BITS), then the last
    let id = codes[0]!;
    for (let d = 1; d < nd - 1; d++) {
      const level = (this.levels[d - 1] ??= new Map());
      const k = id * CODE_BITS + codes[d]!;
      let next = level.get(k);
      if (next === undefined) level.set(k, (next = level.size + 1));
      id = next;
    }
    const key = id * CODE_BITS + codes[nd - 1]!;
    let r = this.rowMap.get(key);
    if (r === undefined) this.rowMap.set(key, (r = this.rows.add(codes.slice(0, nd))));
    return r;
  }

  private addVisit(r: number, v: number): void {
    const rows = this.rows;
    const t = this.dt.table;
    rows.visits[r]!++;
    const pv = t.pv[v]!;
    rows.pvOfVisits[r]! += pv;
    if (pv === 1) rows.bounces[r]!++;
    if (pv >= 1) rows.withPv[r]!++;
    rows.durationMs[r]! += t.lastT[v]! - t.firstT[v]!;
    if (!this.needVisitors) return;
    const u = t.user[v]!;
    if (r === 0) {
      if (this.seenToday[u] === 1) return;
      this.seenToday[u] = 1;
    } else {
      const first = this.userRow[u]!;
      if (first === r) return;
      if (first < 0) this.userRow[u] = r;
      else if (!this.pairs.add(r * t.U + u)) return;
    }
    rows.distinct[r]!.add(t.userHash[u]!, this.dayIndex);
  }

  /**
   * Visitors of each group and of the whole selection, from this run of the base question (baseQuestion: without goal
   * filters, its dimensions those of the question other than `goal`): conversionRate's denominators.
   */
  baseVisitors(): GroupFigures {
    const answer = this.finish();
    const byGroup = new Map(answer.results.map((r) => [JSON.stringify(r.dimensions), r.metrics[0]!]));
    return { total: answer.totals[0]!, group: (dims) => byGroup.get(JSON.stringify(dims)) ?? 0 };
  }

  /**
   * The answer. `base`: conversionRate's denominators (baseVisitors of the base question's run); `revenue`: by
   * currency, each row's `revenue:<CUR>` (revenue.ts, from runs of revenueQuestion over the same days).
   */
  finish(base: GroupFigures = NO_FIGURES, revenue: ReadonlyMap<string, GroupFigures> = new Map()): QueryAnswer {
    const metrics = this.q.metrics;
    const rows = this.rows;
    const visitors = new Map<number, number>();
    const goalAt = this.dims.indexOf('goal');
    const values = (r: number, dims?: readonly string[]): number[] => {
      const denominator = dims === undefined ? base.total : base.group(goalAt < 0 ? dims : dims.filter((_, i) => i !== goalAt));
      return metrics.map((m) => {
        if (!isRevenueMetric(m)) return metricOf(m, rows, r, denominator, visitors);
        const sums = revenue.get(m.slice('revenue:'.length)) ?? NO_FIGURES;
        return dims === undefined ? sums.total : sums.group(dims);
      });
    };
    const totals = values(0);
    if (this.dims.length === 0) return { results: [{ dimensions: [], metrics: totals }], totals, totalRows: 1 };
    const dimSpaces = this.dims.map((d) => this.space(spaceOf(d)));
    const list: Array<{ codes: number[]; r: number }> = [];
    for (let r = 1; r < rows.n; r++) list.push({ codes: rows.codes[r]!, r });
    if (this.dims.length === 1 && (this.timeDim || this.dims[0] === 'goal')) {
      const have = new Set(list.map((a) => a.codes[0]!));
      const all = this.space(this.dims[0] === 'goal' ? 'goal' : 'time');
      for (const b of this.timeDim ? rangeBuckets(this.timeDim, this.q.from, this.q.to, this.timeZone) : this.goals.map((g) => g.name)) {
        const c = all.code(b);
        if (!have.has(c)) {
          have.add(c);
          list.push({ codes: [c], r: -1 });
        }
      }
    }
    const zero = metrics.map(() => 0);
    let out: QueryRow[] = list.map((a) => {
      const dimensions = a.codes.map((c, i) => dimSpaces[i]!.values[c]!);
      return { dimensions, metrics: a.r < 0 ? zero : values(a.r, dimensions) };
    });
    const order = this.q.orderBy.map(([name, dir]) => {
      const mi = metrics.indexOf(name as Metric);
      const di = this.dims.indexOf(name as Dimension);
      return { mi, di, sign: dir === 'desc' ? -1 : 1 };
    });
    out.sort((a, b) => {
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
    const totalRows = out.length;
    out = out.slice(this.q.offset, this.q.offset + this.q.limit);
    return { results: out, totals, totalRows };
  }
}

const cmp = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

function slotOf(t: number): number {
  const s = Math.floor((t - SLOT_FROM_MS) / SLOT_MS);
  return s < 0 ? 0 : s >= SLOTS ? SLOTS - 1 : s;
}

function metricOf(m: Metric, rows: Rows, r: number, baseVisitors: number, cache: Map<number, number>): number {
  const visitors = (): number => {
    let x = cache.get(r);
    if (x === undefined) cache.set(r, (x = rows.distinct[r]!.count()));
    return x;
  };
  const visits = rows.visits[r]!;
  switch (m) {
    case 'visitors':
      return visitors();
    case 'visits':
      return visits;
    case 'pageviews':
      return rows.pageviews[r]!;
    case 'events':
      return rows.events[r]!;
    case 'bounceRate':
      return rows.withPv[r] === 0 ? 0 : round1((rows.bounces[r]! / rows.withPv[r]!) * 100);
    case 'viewsPerVisit':
      return visits === 0 ? 0 : round2(rows.pvOfVisits[r]! / visits);
    case 'visitDuration':
      return visits === 0 ? 0 : Math.round(rows.durationMs[r]! / visits / 1000);
    case 'conversionRate':
      return baseVisitors === 0 ? 0 : round1((visitors() / baseVisitors) * 100);
    default:
      return 0; // revenue:<CUR>: QueryRun.finish takes it from its own runs
  }
}

/**
 * The question conversionRate divides by: the same selection without goal filters, by the question's dimensions
 * other than `goal` (as Plausible: Google's visitors who converted ÷ Google's visitors), every row of it.
 */
export function baseQuestion(q: Question): Question | undefined {
  if (!q.metrics.includes('conversionRate')) return undefined;
  const dimensions = q.dimensions.filter((d) => d !== 'goal');
  return { ...q, metrics: ['visitors'], dimensions, filters: q.filters.filter(([, d]) => d !== 'goal'), orderBy: [], offset: 0, limit: Number.MAX_SAFE_INTEGER };
}

export class FunnelRun extends DayScan {
  private readonly steps: Array<{ name?: string; page?: Table }>;
  private readonly visits: number[];
  private readonly visitors: Distinct[];

  constructor(
    timeZone: string,
    private readonly q: FunnelQuestion,
  ) {
    super(q.filters);
    void timeZone;
    this.needVisitors = true;
    this.steps = q.steps.map((s) => {
      if (s.event !== undefined) return { name: s.event };
      this.needed.add('path');
      return { page: this.space('path').table(pagePattern(s.page ?? ''), false) };
    });
    this.visits = q.steps.map(() => 0);
    this.visitors = q.steps.map(() => new Distinct());
  }

  /** Only visits with an event matching the first step can reach any step. */
  protected override candidates(): Array<[Codes, Uint8Array]> {
    const first = this.steps[0]!;
    const view = this.dt.view;
    if (first.page) return [[view.column('path'), compose(first.page, this.remaps.get('path')!)]];
    const names = view.dict('name');
    const m = new Uint8Array(names.length + 1);
    const c = names.indexOf(first.name!) + 1;
    if (c > 0) m[c] = 1;
    return [[view.column('name'), m]];
  }

  addDay(day: string, dt: DayTable | undefined): void {
    if (day < this.q.from || day > this.q.to || !dt) return;
    if (!this.load(dt)) return;
    this.eventColumns();
    const { V, U, start, userHash } = dt.table;
    const user = this.widen(dt.table.user);
    const names = dt.view.dict('name');
    const ns = this.steps.length;
    // per step: the day code of its event name (−1: none today), or 0 and its page table over the day's paths
    const stepName = Int32Array.from(this.steps, (s) => (s.name !== undefined ? names.indexOf(s.name) + 1 || -1 : 0));
    const stepPath = this.steps.map((s) => (s.page ? compose(s.page, this.remaps.get('path')!) : new Uint8Array(0)));
    const { NAME, PATH, pvDay, vPass, pairs, visits, visitors, dayIndex } = this;
    for (let v = 0; v < V; v++) {
      if (vPass[v] !== 1) continue;
      const b = start[v + 1]!;
      let s = 0;
      let sn = stepName[0]!;
      let sp = stepPath[0]!;
      // the day table keeps a visit's events by time, then log order
      for (let k = start[v]!; k < b; k++) {
        const name = NAME[k]!;
        if (sn !== 0 ? sn !== name : pvDay[name] !== 1 || sp[PATH[k]!] !== 1) continue;
        visits[s]!++;
        const u = user[v]!;
        if (pairs.add(s * U + u)) visitors[s]!.add(userHash[u]!, dayIndex);
        if (++s === ns) break;
        sn = stepName[s]!;
        sp = stepPath[s]!;
      }
    }
  }

  finish(): FunnelStepAnswer[] {
    const first = this.visits[0]!;
    return this.q.steps.map((st, i) => ({
      label: st.label,
      visits: this.visits[i]!,
      visitors: this.visitors[i]!.count(),
      conversionRate: first === 0 ? 0 : round1((this.visits[i]! / first) * 100),
      dropoff: i === 0 ? 0 : this.visits[i - 1]! - this.visits[i]!,
    }));
  }
}
