/** Scalar values allowed in eventParams and line items. */
export type Scalar = string | number | boolean | null;

export interface LineItem {
  item_id?: string;
  price?: number;
  quantity?: number;
  [field: string]: Scalar | undefined;
}

/**
 * One event as it is appended to the log and folded by the reducer: validated, normalized and enriched.
 * Everything the reducer needs is here, so replaying the log never consults a clock, a timezone table or a
 * User-Agent parser, and the result is byte-for-byte what was folded live.
 */
export interface StoredEvent {
  t: 'e';
  /** project id */
  p: string;
  /** event time, ms since epoch */
  ts: number;
  /** server receive time, ms since epoch (dedup window, monthly quota) */
  rt: number;
  /** calendar day of `ts` in the project's timezone, YYYY-MM-DD */
  day: string;
  event: string;
  /** as sent ('' when absent) */
  url: string;
  /** URL path without query or fragment ('' when there is no url) */
  path: string;
  /** normalized referrer ('' when direct) */
  referrer: string;
  /** traffic source of this event (utm_source, known name, host, or Direct) */
  source: string;
  sessionId: string;
  /** distinct-user identity: 'u:' userId, else 'f:' fingerprint, else 's:' sessionId */
  user: string;
  userId?: string;
  fingerprint?: string;
  country: string;
  device: string;
  params: Record<string, Scalar>;
  items?: LineItem[];
  eventId?: string;
  /** browser and OS names from the User-Agent parser (absent: the parser named none) */
  browser?: string;
  os?: string;
  /** utm_medium / utm_campaign of the event's URL (absent when the URL has none) */
  utmMedium?: string;
  utmCampaign?: string;
  /**
   * The project's tracked property keys this event carries, values as strings, stamped at ingest so counting starts
   * when a key is tracked and replay never consults project settings.
   */
  props?: Record<string, string>;
  /** page context: fields we keep but do not aggregate */
  ctx?: Record<string, unknown>;
  /**
   * 1: the event carried revenue (Plausible's Events API `revenue`): counted in revenue figures as a purchase is,
   * whatever its name (its value and currency are its `value` and `currency` params)
   */
  rev?: 1;
  /**
   * 1: sent through POST /projects/{id}/history: counted in its own day like any event, but not live traffic (never
   * in realtime), not against the monthly allowance, its eventId remembered for good instead of for 48 h.
   */
  h?: 1;
}

/** A bot hit: acknowledged, never counted as traffic, but counted in the project's `bots` figure. */
export interface BotRecord {
  t: 'b';
  p: string;
  day: string;
  rt: number;
}

/** An entry whose data was erased (its project was deleted); it keeps its place in the sequence. */
export interface ErasedRecord {
  t: 'x';
}

/**
 * Cluster mode: the receive clock of a partition that had no event for a while, written to its stream by the
 * partition's lease holder, so its closed days are sealed in log order like everywhere else (sealing follows the
 * records' receive times, and an idle partition would otherwise keep its days live for good).
 */
export interface ClockRecord {
  t: 'k';
  rt: number;
}

export type LogRecord = StoredEvent | BotRecord | ErasedRecord;

/** What a fold takes: the log's records, and in cluster mode also clock ticks. */
export type FoldRecord = LogRecord | ClockRecord;

export interface RecentEvent {
  ts: number;
  event: string;
  url: string;
  referrer: string;
  source: string;
  country: string;
  device: string;
  sessionId: string;
}

export type Breakdown = Record<string, number>;

export interface DailyFigures {
  date: string;
  users: number;
  sessions: number;
  pageviews: number;
  bounceRate: string;
}

/** The one JSON shape of GET /metrics (and GetMetrics over gRPC). */
export interface MetricsResponse {
  projectId: string;
  from: string;
  to: string;
  timezone: string;
  users: number;
  sessions: number;
  pageviews: number;
  bounceRate: string;
  trafficSources: Breakdown;
  countries: Breakdown;
  devices: Breakdown;
  pages: Breakdown;
  events: Breakdown;
  bots: number;
  recentEvents: RecentEvent[];
  daily: DailyFigures[];
  /** sessions by the path of their first page_view of the day */
  entryPages: Breakdown;
  browsers: Breakdown;
  operatingSystems: Breakdown;
  utmMediums: Breakdown;
  utmCampaigns: Breakdown;
  revenue: Record<string, RevenueFigure>;
  props: Record<string, Breakdown>;
  /** present when the query asked for `compare` */
  compare?: Comparison;
}

export interface RevenueFigure {
  /** sum of `value`, rounded to 2 decimals */
  total: number;
  purchases: number;
}

/** The headline figures of the comparison range (`compare=previous|year`). */
export interface Comparison {
  from: string;
  to: string;
  users: number;
  sessions: number;
  pageviews: number;
  bounceRate: string;
  daily: DailyFigures[];
}

/** The one JSON shape of GET /metrics/realtime (and GetRealtime over gRPC). */
export interface RealtimeResponse {
  projectId: string;
  /** distinct sessions seen in the last 5 minutes */
  visitors: number;
  /** page views of the last 30 minutes */
  pageviews: number;
  /** 30 integers, oldest first, the last is the current minute */
  perMinute: number[];
  /** page views by path, last 30 minutes, top 10 */
  pages: Breakdown;
  /** page views by traffic source, last 30 minutes, top 10 */
  sources: Breakdown;
}
