/**
 * A day table: every event of one project-day as one segment with day-wide dictionaries, its events grouped by visit
 * (then by time, then log order), plus the visit table that questions read: where each visit's events start, its
 * first / last time, page views, entry / exit page, visitor and first-event values, and a hash of every visitor.
 * A closed day's segments are merged into one such segment once and stored with its visit table (codec.ts), so a
 * question never rebuilds it; a day still taking events is merged on the heap when asked.
 */

import { hash53 } from '../hash.ts';
import { Interner, remapDict, type Codes, type PropColumn } from './codes.ts';
import { mergeProps, type PropIndex } from './props.ts';
import { VALUE_COLUMNS, type SegmentView, type ValueColumn } from './segment.ts';

/** Value columns a visit takes from its first event (CONTRACT.md: visit-level dimensions). */
export const VISIT_VALUE_COLUMNS = ['source', 'utmMedium', 'utmCampaign', 'country', 'device', 'browser', 'os'] as const;
export type VisitValueColumn = (typeof VISIT_VALUE_COLUMNS)[number];

export const PAGE_VIEW = 'page_view';

export interface VisitTable {
  /** visits (codes 0..V-1) and visitors (codes 0..U-1) of the day */
  readonly V: number;
  readonly U: number;
  /** events of visit v are start[v] .. start[v+1]-1 of the segment (V + 1 entries) */
  readonly start: Int32Array;
  readonly firstT: Int32Array;
  readonly lastT: Int32Array;
  readonly pv: Codes;
  /** path codes (of the segment's path dictionary) of the first / last page_view; 0: none */
  readonly entry: Codes;
  readonly exit: Codes;
  readonly user: Codes;
  /** hash53 of each visitor id (index: visitor code) */
  readonly userHash: Float64Array;
  col(c: VisitValueColumn): Codes;
}

/** A segment whose events are grouped by visit, with its visit table. */
export interface DayTable {
  readonly view: SegmentView;
  readonly table: VisitTable;
}

/**
 * Merges the segments of one project-day (in log order; their visit and visitor codes are day-level) into one
 * segment grouped by visit, and computes its visit table.
 */
export function mergeDay(segs: readonly SegmentView[]): DayTable {
  const steps = mergeDaySteps(segs);
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/**
 * mergeDay in steps (a busy day takes a few hundred ms in all): the caller resumes it and may yield to its event
 * loop between steps (after the sort, each column, the visit table).
 */
export function* mergeDaySteps(segs: readonly SegmentView[]): Generator<void, DayTable> {
  let n = 0;
  let V = 0;
  let U = 0;
  let firstSeq = Infinity;
  let lastSeq = 0;
  let minT = Infinity;
  let maxT = -Infinity;
  for (const s of segs) {
    // a stored segment parses each dictionary on first use (the JSON of up to 100,000 ids, tens of ms): a step each
    n += s.n;
    V = Math.max(V, s.visitBase + s.visitDict().length);
    yield;
    U = Math.max(U, s.userBase + s.userDict().length);
    yield;
    if (s.n > 0) {
      firstSeq = Math.min(firstSeq, s.firstSeq);
      lastSeq = Math.max(lastSeq, s.lastSeq);
      minT = Math.min(minT, s.minT);
      maxT = Math.max(maxT, s.maxT);
    }
  }
  const dayStart = segs[0]?.dayStart ?? 0;
  const visits: string[] = new Array<string>(V).fill('');
  const users: string[] = new Array<string>(U).fill('');
  for (const s of segs) {
    const vd = s.visitDict();
    for (let i = 0; i < vd.length; i++) visits[s.visitBase + i] = vd[i]!;
    const ud = s.userDict();
    for (let i = 0; i < ud.length; i++) users[s.userBase + i] = ud[i]!;
  }
  // where each event goes: a stable counting sort by visit, then by time inside each visit (insertion: mostly sorted)
  const start = new Int32Array(V + 1);
  for (const s of segs) {
    const v = s.visit;
    for (let i = 0; i < v.length; i++) start[v[i]! + 1]!++;
  }
  for (let v = 0; v < V; v++) start[v + 1]! += start[v]!;
  const cursor = start.slice(0, V);
  const srcSeg = new Int32Array(n);
  const srcIdx = new Int32Array(n);
  const time = new Int32Array(n);
  for (let si = 0; si < segs.length; si++) {
    const s = segs[si]!;
    const v = s.visit;
    const t = s.time;
    for (let i = 0; i < v.length; i++) {
      const at = cursor[v[i]!]!++;
      srcSeg[at] = si;
      srcIdx[at] = i;
      time[at] = t[i]!;
    }
  }
  for (let v = 0; v < V; v++) {
    const a = start[v]!;
    const b = start[v + 1]!;
    for (let j = a + 1; j < b; j++) {
      const t = time[j]!;
      if (time[j - 1]! <= t) continue;
      const ss = srcSeg[j]!;
      const si = srcIdx[j]!;
      let i = j - 1;
      while (i >= a && time[i]! > t) {
        time[i + 1] = time[i]!;
        srcSeg[i + 1] = srcSeg[i]!;
        srcIdx[i + 1] = srcIdx[i]!;
        i--;
      }
      time[i + 1] = t;
      srcSeg[i + 1] = ss;
      srcIdx[i + 1] = si;
    }
  }
  yield;
  const visit = new Uint32Array(n);
  for (let v = 0; v < V; v++) visit.fill(v, start[v]!, start[v + 1]!);
  const gather = (get: (s: SegmentView, si: number) => Codes | undefined, maps: Int32Array[]): Uint32Array => {
    const srcs = segs.map(get);
    const out = new Uint32Array(n);
    for (let k = 0; k < n; k++) {
      const si = srcSeg[k]!;
      const src = srcs[si];
      if (src) out[k] = maps[si]![src[srcIdx[k]!]!]!;
    }
    return out;
  };
  const user = new Uint32Array(n);
  for (let k = 0; k < n; k++) user[k] = segs[srcSeg[k]!]!.user[srcIdx[k]!]!;
  const cols = new Map<ValueColumn, Uint32Array>();
  const dicts = new Map<ValueColumn, string[]>();
  for (const c of VALUE_COLUMNS) {
    const into = new Interner();
    const maps = segs.map((s) => remapDict(s.dict(c), into));
    cols.set(c, gather((s) => s.column(c), maps));
    dicts.set(c, into.values);
    yield;
  }
  // Properties are merged when asked: a question reads the keys it names (one dense column each, from each segment's
  // entries of that key), the store's merge reads them all; the day holds nothing of the keys nobody asks.
  const asked = new Map<string, PropColumn | undefined>();
  const prop = (key: string): PropColumn | undefined => {
    if (asked.has(key)) return asked.get(key);
    const srcs = segs.map((s) => s.prop(key));
    let col: PropColumn | undefined;
    if (srcs.some((p) => p !== undefined)) {
      const into = new Interner();
      const maps = srcs.map((p) => remapDict(p?.dict, into));
      col = { codes: gather((_, si) => srcs[si]?.codes, maps), dict: into.values };
    }
    asked.set(key, col);
    return col;
  };
  let props: PropIndex | undefined;
  const view: SegmentView = {
    n,
    firstSeq: n > 0 ? firstSeq : 0,
    lastSeq,
    dayStart,
    minT,
    maxT,
    visitBase: 0,
    userBase: 0,
    time,
    visit,
    user,
    column: (c) => cols.get(c)!,
    dict: (c) => dicts.get(c)!,
    visitDict: () => visits,
    userDict: () => users,
    props: () =>
      (props ??= mergeProps(
        segs.map((s) => s.props()),
        segs.map((s) => s.n),
        srcSeg,
        srcIdx,
      )),
    prop,
  };
  const userHash = visitorHashes(view, U);
  yield;
  const table = visitTable(view, start, V, U, userHash);
  yield;
  return { view, table };
}

/** The visit table of a segment whose events are grouped by visit (start: where each visit's events begin). */
/** hash53 of each visitor id of a merged day (index: visitor code). */
function visitorHashes(view: SegmentView, U: number): Float64Array {
  const ud = view.userDict();
  const out = new Float64Array(U);
  for (let u = 0; u < ud.length; u++) out[u] = hash53(ud[u]!);
  return out;
}

export function visitTable(view: SegmentView, start: Int32Array, V: number, U: number, userHash: Float64Array): VisitTable {
  const time = view.time;
  const name = view.column('name');
  const path = view.column('path');
  const user = view.user;
  const nameDict = view.dict('name');
  const pvCode = nameDict.indexOf(PAGE_VIEW) + 1; // 0: the day has no page view
  const firstT = new Int32Array(V);
  const lastT = new Int32Array(V);
  const pv = new Uint32Array(V);
  const entry = new Uint32Array(V);
  const exit = new Uint32Array(V);
  const vUser = new Uint32Array(V);
  const firstIdx = new Int32Array(V);
  for (let v = 0; v < V; v++) {
    const a = start[v]!;
    const b = start[v + 1]!;
    firstIdx[v] = a;
    if (a === b) continue;
    firstT[v] = time[a]!;
    lastT[v] = time[b - 1]!;
    vUser[v] = user[a]!;
    let count = 0;
    for (let k = a; k < b; k++) {
      if (name[k] !== pvCode || pvCode === 0) continue;
      if (count === 0) entry[v] = path[k]!;
      exit[v] = path[k]!;
      count++;
    }
    pv[v] = count;
  }
  const vcols = new Map<VisitValueColumn, Uint32Array>();
  for (const c of VISIT_VALUE_COLUMNS) {
    const codes = view.column(c);
    const out = new Uint32Array(V);
    for (let v = 0; v < V; v++) if (start[v]! < start[v + 1]!) out[v] = codes[firstIdx[v]!]!;
    vcols.set(c, out);
  }
  return { V, U, start, firstT, lastT, pv, entry, exit, user: vUser, userHash, col: (c) => vcols.get(c)! };
}

/** For each code of an event column: the visits with at least one event of that code (CSR: lists[at[c] .. at[c+1]-1]). */
export interface VisitLists {
  at: Int32Array;
  visits: Int32Array;
}

const listsCache = new WeakMap<VisitTable, Map<Codes, VisitLists>>();

/**
 * The visit lists of one event column of a day (built on first use and kept while the day's table is cached), so a
 * selective event filter walks only the visits that can pass it.
 */
export function visitLists(t: VisitTable, codes: Codes, dictSize: number): VisitLists {
  let byCol = listsCache.get(t);
  if (!byCol) listsCache.set(t, (byCol = new Map()));
  let l = byCol.get(codes);
  if (l) return l;
  const C = dictSize + 1;
  const last = new Int32Array(C).fill(-1);
  const at = new Int32Array(C + 1);
  const { V, start } = t;
  for (let v = 0; v < V; v++) {
    for (let k = start[v]!; k < start[v + 1]!; k++) {
      const c = codes[k]!;
      if (last[c] === v) continue;
      last[c] = v;
      at[c + 1]!++;
    }
  }
  for (let c = 0; c < C; c++) at[c + 1]! += at[c]!;
  const cursor = at.slice(0, C);
  const visits = new Int32Array(at[C]!);
  last.fill(-1);
  for (let v = 0; v < V; v++) {
    for (let k = start[v]!; k < start[v + 1]!; k++) {
      const c = codes[k]!;
      if (last[c] === v) continue;
      last[c] = v;
      visits[cursor[c]!++] = v;
    }
  }
  l = { at, visits };
  byCol.set(codes, l);
  return l;
}
