/** This file is long because one day's state, its visits and every breakdown live together, with the lazy wrapper that holds it. */
import { CappedCounter } from './capped-counter.ts';
import type { DayFigures, RangePart } from './day-view.ts';
import { hash53 } from './hash.ts';
import { HyperLogLog } from './hyperloglog.ts';
import { intern } from './intern.ts';
import { EXACT_USERS_PER_DAY, HLL_PRECISION, MAX_PROP_KEYS_PER_DAY, MAX_PROP_VALUES, MAX_REVENUE_CURRENCIES, UNKNOWN_NAME } from './limits.ts';
import { NumberCounts } from './number-table.ts';
import type { DaySnapshot } from './day-snapshot.ts';
import { SealedPart, sealedFromSnapshot, type SealedDay } from './sealed-day.ts';
import type { StoredEvent } from './types.ts';
import { VisitTable } from './visit-table.ts';

/**
 * The insight breakdowns (CONTRACT "Insights"), by their JSON name: each a CappedCounter of sessions, so snapshots and
 * sealing handle them as one list. entryPages counts a session at its first page_view of the day; the others at the
 * session's first event of the day.
 */
export const INSIGHT_BREAKDOWNS = ['entryPages', 'browsers', 'operatingSystems', 'utmMediums', 'utmCampaigns'] as const;
export type InsightBreakdown = (typeof INSIGHT_BREAKDOWNS)[number];

export function newInsights(): Record<InsightBreakdown, CappedCounter> {
  return {
    entryPages: new CappedCounter(),
    browsers: new CappedCounter(),
    operatingSystems: new CappedCounter(),
    utmMediums: new CappedCounter(),
    utmCampaigns: new CappedCounter(),
  };
}

/**
 * Revenue and tracked props are named breakdowns too, so sealing, snapshots and range reads treat every insight as a
 * list of (name, CappedCounter): revenue as two counters keyed by currency (unrounded sums of `value`, and purchase
 * counts), each tracked key as `props.<key>`.
 */
export const REVENUE_TOTAL = 'revenue.total';
export const REVENUE_PURCHASES = 'revenue.purchases';
export const PROPS_PREFIX = 'props.';

const CURRENCY = /^[A-Za-z]{3}$/;

/**
 * Everything one project's day needs to answer /metrics exactly while the day is live (events may still arrive
 * for it). A session is a (sessionId, day) pair, so a session crossing midnight counts on both days and every
 * figure sums exactly over days. Held by a DayAggregate, which may keep it as stored bytes until first touched.
 */
class DayState {
  pageviews = 0;
  /** sessions with exactly one page_view */
  bounces = 0;
  /** sessions with at least one page_view */
  sessionsWithPageview = 0;
  /** bot hits (acknowledged, not counted as traffic) */
  bots = 0;
  /** hash53(sessionId) -> page_views of that session on this day (typed-array table: see number-table.ts) */
  sessions = new NumberCounts();
  /** hash53(sessionId) -> the visit's visitor (hash53 of StoredEvent.user) and the time of its first event */
  visits = new VisitTable();
  /**
   * hash53(visitor) -> visits it is the visitor of: a visit whose visitor moves to an earlier event leaves its old
   * visitor, which stops counting at 0 (its entry stays, at 0, as the table has no removal)
   */
  users = new NumberCounts();
  /** visitors with at least one visit: the day's exact `users` */
  userCount = 0;
  /**
   * built once the day passes EXACT_USERS_PER_DAY; derivable from `users`, so never snapshotted. Dropped when a
   * visitor stops counting (a sketch cannot forget one) and built again when next read.
   */
  private sketchOf: HyperLogLog | undefined;
  readonly sources = new CappedCounter();
  readonly countries = new CappedCounter();
  readonly devices = new CappedCounter();
  readonly pages = new CappedCounter();
  readonly events = new CappedCounter();
  readonly insights = newInsights();
  /** ISO 4217 code (upper case) -> unrounded sum of `value` / purchases; at most MAX_REVENUE_CURRENCIES codes */
  readonly revenueTotals = new CappedCounter(MAX_REVENUE_CURRENCIES);
  readonly revenuePurchases = new CappedCounter(MAX_REVENUE_CURRENCIES);
  /** tracked property key -> event counts by value (MAX_PROP_VALUES each); at most MAX_PROP_KEYS_PER_DAY keys */
  props: Map<string, CappedCounter> | undefined;

  constructor(readonly day: string) {}

  /**
   * Every capped breakdown by the name of its field in the metrics answer. Sealing, snapshots and reads go through
   * this list, so a new breakdown is one line here (and its counting in apply), with no new sealed format.
   */
  breakdowns(): Array<[string, CappedCounter]> {
    return [
      ['trafficSources', this.sources],
      ['countries', this.countries],
      ['devices', this.devices],
      ['pages', this.pages],
      ['events', this.events],
      ...this.namedInsights(),
    ];
  }

  /** The counter called `name` (a breakdown or a named insight, see namedInsight), for restoring a snapshot. */
  breakdown(name: string): CappedCounter | undefined {
    switch (name) {
      case 'trafficSources':
        return this.sources;
      case 'countries':
        return this.countries;
      case 'devices':
        return this.devices;
      case 'pages':
        return this.pages;
      case 'events':
        return this.events;
      default:
        return this.namedInsight(name);
    }
  }

  /** `session` is hash53(e.sessionId), when the caller has it already. */
  apply(e: StoredEvent, session = hash53(e.sessionId)): void {
    this.events.add(e.event);
    const isPageview = e.event === 'page_view';
    if (isPageview) {
      this.pageviews++;
      this.pages.add(e.path || '/');
    }

    const s = session;
    this.countVisitor(s, hash53(e.user), e.ts);
    const pv = this.sessions.get(s); // -1: the session's first event of the day
    if (pv < 0) {
      // The session's first event of the day decides its source, country and device.
      this.sources.add(e.source);
      this.countries.add(e.country);
      this.devices.add(e.device);
      this.insights.browsers.add(e.browser ?? UNKNOWN_NAME);
      this.insights.operatingSystems.add(e.os ?? UNKNOWN_NAME);
      if (e.utmMedium !== undefined) this.insights.utmMediums.add(e.utmMedium);
      if (e.utmCampaign !== undefined) this.insights.utmCampaigns.add(e.utmCampaign);
    }
    if (e.props !== undefined) this.applyProps(e.props);
    if (e.event === 'purchase' || e.rev === 1) this.applyPurchase(e);
    if (isPageview) {
      if (pv <= 0) this.insights.entryPages.add(e.path || '/');
      const next = (pv < 0 ? 0 : pv) + 1;
      this.sessions.set(s, next);
      if (next === 1) {
        this.sessionsWithPageview++;
        this.bounces++;
      } else if (next === 2) {
        this.bounces--;
      }
    } else if (pv < 0) {
      this.sessions.set(s, 0);
    }
  }

  /**
   * The visit's visitor is the one of its earliest event (equal times: the one folded first), so a later-folded
   * event stamped before the visit's first moves the visit to its visitor.
   */
  private countVisitor(session: number, visitor: number, ts: number): void {
    const slot = this.visits.find(session);
    if (slot < 0) {
      this.visits.add(session, visitor, ts);
      this.addVisit(visitor);
      return;
    }
    if (ts >= this.visits.firstAt(slot)) return;
    const old = this.visits.visitorAt(slot);
    this.visits.setAt(slot, visitor, ts);
    if (old === visitor) return;
    this.addVisit(visitor);
    const left = this.users.get(old) - 1;
    this.users.set(old, left);
    if (left === 0) {
      this.userCount--;
      this.sketchOf = undefined;
    }
  }

  private addVisit(visitor: number): void {
    const n = this.users.get(visitor);
    this.users.set(visitor, n < 0 ? 1 : n + 1);
    if (n > 0) return;
    this.userCount++;
    if (this.sketchOf) this.sketchOf.add(visitor);
    else if (this.userCount > EXACT_USERS_PER_DAY) this.buildSketch();
  }

  /** The sketch as held now, for a snapshot (none built for it: a dropped one is built at restore). */
  heldSketch(): { sketch?: Uint8Array } {
    return this.sketchOf ? { sketch: this.sketchOf.registers } : {};
  }

  /** The day's visitors as a sketch once there are more than EXACT_USERS_PER_DAY (built here when it was dropped). */
  get sketch(): HyperLogLog | undefined {
    if (this.sketchOf === undefined && this.userCount > EXACT_USERS_PER_DAY) this.buildSketch();
    return this.sketchOf;
  }

  private applyProps(props: Record<string, string>): void {
    const byKey = (this.props ??= new Map());
    for (const key of Object.keys(props)) {
      let c = byKey.get(key);
      if (c === undefined) {
        if (byKey.size >= MAX_PROP_KEYS_PER_DAY) continue;
        c = new CappedCounter(MAX_PROP_VALUES);
        byKey.set(key, c);
      }
      c.add(props[key]!);
    }
  }

  /** A purchase counts when `value` is a finite number and `currency` three letters (upper-cased). */
  private applyPurchase(e: StoredEvent): void {
    const value = e.params.value;
    const currency = e.params.currency;
    if (typeof value !== 'number' || !Number.isFinite(value) || typeof currency !== 'string' || !CURRENCY.test(currency)) return;
    const code = currency.toUpperCase();
    // Past the cap a new currency is dropped (revenue has no "(other)": sums of different currencies mean nothing).
    if (!this.revenuePurchases.has(code) && this.revenuePurchases.size >= MAX_REVENUE_CURRENCIES) return;
    this.revenueTotals.add(code, value);
    this.revenuePurchases.add(code);
  }

  /** The insight counters by name: INSIGHT_BREAKDOWNS, the two revenue counters, one per tracked prop key. */
  namedInsights(): Array<[string, CappedCounter]> {
    const out: Array<[string, CappedCounter]> = INSIGHT_BREAKDOWNS.map((name) => [name, this.insights[name]]);
    out.push([REVENUE_TOTAL, this.revenueTotals], [REVENUE_PURCHASES, this.revenuePurchases]);
    if (this.props) for (const [key, c] of this.props) out.push([PROPS_PREFIX + key, c]);
    return out;
  }

  /** The counter called `name` (see namedInsights), a props one created when absent; undefined for other names. */
  namedInsight(name: string): CappedCounter | undefined {
    if (name.startsWith(PROPS_PREFIX)) {
      const key = name.slice(PROPS_PREFIX.length);
      const byKey = (this.props ??= new Map());
      let c = byKey.get(key);
      if (c === undefined) byKey.set(key, (c = new CappedCounter(MAX_PROP_VALUES)));
      return c;
    }
    if (name === REVENUE_TOTAL) return this.revenueTotals;
    if (name === REVENUE_PURCHASES) return this.revenuePurchases;
    return (INSIGHT_BREAKDOWNS as readonly string[]).includes(name) ? this.insights[name as InsightBreakdown] : undefined;
  }

  /** The state a snapshot describes (its tables as they were in memory; sketches rebuilt, as they are derived). */
  static restore(ds: DaySnapshot): DayState {
    const d = new DayState(ds.day);
    d.pageviews = ds.pageviews;
    d.bounces = ds.bounces;
    d.sessionsWithPageview = ds.sessionsWithPageview;
    d.bots = ds.bots;
    d.visits = VisitTable.fromRaw(ds.visits);
    if (ds.visitPageviews) {
      // the compact form: sessions are the visits' keys with their page views; visitors' visits are counted
      const v = ds.visits;
      if (ds.visitPageviews.length !== v.keys.length) throw new Error('a day whose page views do not match its visits');
      d.sessions = NumberCounts.fromRaw({ keys: v.keys, values: ds.visitPageviews, hasZero: false, zeroValue: 0, size: v.keys.length });
      d.users = countVisitors(v.visitors);
    } else {
      if (!ds.sessions || !ds.users) throw new Error('a day without its sessions');
      d.sessions = NumberCounts.fromRaw(ds.sessions);
      d.users = NumberCounts.fromRaw(ds.users);
    }
    if (ds.userCount !== undefined) d.userCount = ds.userCount;
    else {
      d.users.forEachEntry((_, n) => {
        if (n > 0) d.userCount++;
      });
    }
    // Same rule as the live path: a sketch exists once the day has passed the exact threshold.
    if (d.userCount > EXACT_USERS_PER_DAY) {
      const held = ds.sketch;
      if (held?.length === 1 << HLL_PRECISION) d.sketchOf = new HyperLogLog(held.byteOffset % 4 === 0 ? held : held.slice());
      else d.buildSketch();
    }
    for (const [name, pairs] of Object.entries(ds.breakdowns)) {
      const c = d.breakdown(name);
      if (c) for (const [k, v] of pairs) c.set(intern(k), v);
    }
    return d;
  }

  buildSketch(): void {
    const h = new HyperLogLog();
    this.forEachUser((u) => h.add(u));
    this.sketchOf = h;
  }

  // RangePart: a live day read directly.

  figures(): DayFigures[] {
    return [
      {
        date: this.day,
        users: this.userCount,
        sessions: this.sessions.size,
        pageviews: this.pageviews,
        bounces: this.bounces,
        sessionsWithPageview: this.sessionsWithPageview,
        bots: this.bots,
      },
    ];
  }

  sumBreakdown(name: string, into: Map<string, number>): void {
    // a prop key this day never saw adds nothing (and creates nothing)
    if (name.startsWith(PROPS_PREFIX)) this.props?.get(name.slice(PROPS_PREFIX.length))?.sumInto(into);
    else this.breakdown(name)?.sumInto(into);
  }

  forEachUser(fn: (hash: number) => void): void {
    this.users.forEachEntry((u, n) => {
      if (n > 0) fn(u);
    });
  }

  /** Every counted visitor's hash. */
  userHashes(): Float64Array {
    const out = new Float64Array(this.userCount);
    let i = 0;
    this.forEachUser((u) => (out[i++] = u));
    return out;
  }
}

/** visitor -> visits, from each visit's visitor (a snapshot's compact form). */
function countVisitors(visitors: Float64Array): NumberCounts {
  const users = new NumberCounts(visitors.length);
  for (let i = 0; i < visitors.length; i++) {
    const v = visitors[i]!;
    const n = users.get(v);
    users.set(v, n < 0 ? 1 : n + 1);
  }
  return users;
}

/** A live day as a snapshot stored it, not decoded yet: its name and sequences, its bytes and how to decode them. */
export interface StoredDay {
  day: string;
  firstSeq: number;
  lastSeq: number;
  /**
   * the day's snapshot form as the store wrote it (what a later snapshot writes again while the day sleeps); a day
   * restored from a file reads them from there each time they are asked for (they are not held in memory)
   */
  readonly bytes: Uint8Array;
  /** `bytes.length`, known without reading them */
  length: number;
  /** where `bytes` start in the snapshot file they are in (the writer copies them from there, not from memory) */
  at?: number;
  /** that file, when they are in one */
  readonly file?: string;
  /**
   * their CRC-32, when the store knows it without reading them (a file this process wrote, or a reference): a
   * snapshot then references them without reading them again
   */
  readonly crc?: number;
  load(): DaySnapshot;
  /**
   * Bytes held in memory only: frees them at once, once the day has moved onto a copy elsewhere (rehome), instead of
   * leaving them to the next full collection (they were allocated long before and live in the old generation).
   */
  release?(): void;
}

/**
 * One project's live day: its name and log sequences, and its aggregates (DayState), which are created on the first
 * event, or restored from a snapshot. A day may sleep: held as its snapshot bytes only (~half of its tables at their
 * load) until an event or sealing wakes it. Every day starts asleep after a restart (startup decodes nothing, an idle
 * project's days cost their bytes), and the engine puts days nobody writes to back to sleep (sleep). Reads do not
 * wake a day: they use its sealed form, built from the bytes when first read (scalars, breakdowns, users as hashes or
 * a sketch), so a dashboard's 30-day read neither rebuilds 30 days of tables nor keeps them. A sleeping day is
 * written to the next snapshot as its bytes.
 */
export class DayAggregate implements RangePart {
  /** sequence of the first record folded into this instance: names its sealed segment, so re-sealing overwrites */
  firstSeq = 0;
  /** sequence of the last record folded into this instance */
  lastSeq = 0;
  /** true once the reducer has handed the day over for sealing */
  sealing = false;
  /** receive time before which a day that took history stays live (HISTORY_QUIET_MS after its last history event) */
  heldUntil = 0;
  private state: DayState | undefined;
  private stored: StoredDay | undefined;
  /** while asleep, once read: the day's sealed form and a read view of it (dropped when the day wakes) */
  private asleepForm: { form: SealedDay; part: SealedPart } | undefined;

  constructor(readonly day: string) {}

  /** A day restored asleep (see the class comment). */
  static asleep(s: StoredDay): DayAggregate {
    const d = new DayAggregate(s.day);
    d.firstSeq = s.firstSeq;
    d.lastSeq = s.lastSeq;
    d.stored = s;
    return d;
  }

  /** A day restored from its snapshot form. */
  static restore(ds: DaySnapshot): DayAggregate {
    const d = new DayAggregate(ds.day);
    d.firstSeq = ds.firstSeq;
    d.lastSeq = ds.lastSeq;
    d.state = DayState.restore(ds);
    return d;
  }

  /**
   * Puts an awake day to sleep as `s`: its snapshot form (daySnapshot) encoded by the caller as of its current
   * sequences. Its tables are dropped; the next event or sealing restores them from the bytes.
   */
  sleep(s: StoredDay): void {
    if (s.day !== this.day || s.firstSeq !== this.firstSeq || s.lastSeq !== this.lastSeq) throw new Error(`a day sleeps only as its own bytes (${this.day} ${this.firstSeq}-${this.lastSeq})`);
    this.state = undefined;
    this.asleepForm = undefined;
    this.stored = s;
  }

  /** Whether the day is held as its bytes only (see the class comment). */
  get isAsleep(): boolean {
    return this.state === undefined;
  }

  /** The stored bytes while the day sleeps, else undefined. */
  storedBytes(): Uint8Array | undefined {
    return this.stored?.bytes;
  }

  /** Where the stored bytes are in a snapshot file, while the day sleeps on bytes in one. */
  storedAt(): { file: string; at: number; length: number; crc?: number } | undefined {
    const s = this.stored;
    return s?.at === undefined || s.file === undefined ? undefined : { file: s.file, at: s.at, length: s.length, ...(s.crc === undefined ? {} : { crc: s.crc }) };
  }

  /** The stored bytes the day sleeps on (the object itself: see rehome), undefined while it is awake. */
  get storedDay(): StoredDay | undefined {
    return this.state === undefined ? this.stored : undefined;
  }

  /**
   * Moves a sleeping day from the bytes `from` to `to`, the same snapshot form of the same sequences kept elsewhere
   * (in a snapshot file instead of memory); false when the day woke or slept again on other bytes since `from`.
   */
  rehome(from: StoredDay, to: StoredDay): boolean {
    if (this.state !== undefined || this.stored !== from) return false;
    if (to.day !== from.day || to.firstSeq !== from.firstSeq || to.lastSeq !== from.lastSeq) throw new Error(`a day moves only onto its own bytes (${this.day} ${this.firstSeq}-${this.lastSeq})`);
    this.stored = to;
    return true;
  }

  /** While asleep: the day's sealed form (what sealDay gives), built from its bytes without waking it. */
  sealedForm(): SealedDay | undefined {
    return this.state || !this.stored ? undefined : this.asleepRead().form;
  }

  private get s(): DayState {
    return this.state ?? this.wake();
  }

  /** What reads use: the awake state, or the sealed form of a sleeping day. */
  private get r(): DayState | SealedPart {
    return this.state ?? (this.stored ? this.asleepRead().part : this.wake());
  }

  private asleepRead(): { form: SealedDay; part: SealedPart } {
    if (this.asleepForm) return this.asleepForm;
    const form = sealedFromSnapshot(this.stored!.load());
    return (this.asleepForm = { form, part: new SealedPart(form) });
  }

  /** A day's figures while it has no state: those of its sealed form (or of a new, empty day). */
  private asleepFigures(): DayFigures {
    return this.r.figures()[0]!;
  }

  private wake(): DayState {
    const stored = this.stored;
    this.stored = undefined;
    this.asleepForm = undefined;
    this.state = stored ? DayState.restore(stored.load()) : new DayState(this.day);
    return this.state;
  }

  get pageviews(): number {
    return this.state ? this.state.pageviews : this.asleepFigures().pageviews;
  }
  get bounces(): number {
    return this.state ? this.state.bounces : this.asleepFigures().bounces;
  }
  get sessionsWithPageview(): number {
    return this.state ? this.state.sessionsWithPageview : this.asleepFigures().sessionsWithPageview;
  }
  /** bot hits (acknowledged, not counted as traffic) */
  get bots(): number {
    return this.state ? this.state.bots : this.asleepFigures().bots;
  }
  set bots(n: number) {
    this.s.bots = n;
  }
  get sessions(): NumberCounts {
    return this.s.sessions;
  }
  /** visitor -> visits (see DayState.users; entries at 0 do not count) */
  get users(): NumberCounts {
    return this.s.users;
  }
  get visits(): VisitTable {
    return this.s.visits;
  }
  /** the day's exact distinct visitors */
  get userCount(): number {
    return this.state ? this.state.userCount : this.asleepFigures().users;
  }
  userHashes(): Float64Array {
    return this.s.userHashes();
  }
  get sketch(): HyperLogLog | undefined {
    return this.r.sketch;
  }
  heldSketch(): { sketch?: Uint8Array } {
    return this.s.heldSketch();
  }

  apply(e: StoredEvent, session = hash53(e.sessionId)): void {
    this.s.apply(e, session);
  }
  breakdowns(): Array<[string, CappedCounter]> {
    return this.s.breakdowns();
  }
  breakdown(name: string): CappedCounter | undefined {
    return this.s.breakdown(name);
  }
  namedInsights(): Array<[string, CappedCounter]> {
    return this.s.namedInsights();
  }
  figures(): readonly DayFigures[] {
    return this.r.figures();
  }
  sumBreakdown(name: string, into: Map<string, number>): void {
    this.r.sumBreakdown(name, into);
  }
  forEachUser(fn: (hash: number) => void): void {
    this.r.forEachUser(fn);
  }
}

export function formatRate(numerator: number, denominator: number): string {
  if (denominator === 0) return '0.0%';
  return `${((numerator / denominator) * 100).toFixed(1)}%`;
}
