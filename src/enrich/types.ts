/**
 * The public shapes of enrichment. The engine codes against these; src/store implements SaltStore on LMDB.
 * Nothing here holds a client IP or a raw User-Agent beyond the call that receives it.
 */

/** What one request tells us about its sender. Used in memory only; never written anywhere. */
export interface ClientFacts {
  ip: string;
  userAgent: string;
}

export interface Enrichment {
  /** isbot(UA) or a headless-browser marker; an empty UA or a plain HTTP library (server-to-server callers) is not a bot */
  bot: boolean;
  /** 'desktop' | 'mobile' | 'tablet' | 'smarttv' | 'console' | 'wearable' | 'embedded' | 'unknown' */
  device: string;
  /** ISO 3166-1 alpha-2, upper case, or 'Unknown' (non-public address, not in the database, no database) */
  country: string;
  /** browser name as ua-parser-js reports it, e.g. 'Chrome', 'Mobile Safari' (page context) */
  browser?: string;
  /** operating system name, e.g. 'iOS', 'Windows' (page context) */
  os?: string;
}

export interface DailySalt {
  /** UTC day, YYYY-MM-DD */
  day: string;
  /** hex of 32 random bytes */
  key: string;
}

export interface SaltStore {
  load(): Promise<DailySalt[]>;
  /** replaces the whole set; a shared store (cluster) answers the salts it holds, which another node may have chosen */
  save(salts: DailySalt[]): Promise<void | DailySalt[]>;
}

export interface Enricher {
  /** Per request, not per event: UA facts come from a bounded LRU keyed by UA, the country from one mmdb lookup. */
  classify(client: ClientFacts): Enrichment;
  /**
   * HMAC-SHA-256 under the salt of the UTC day of `now` over (projectId, ip, userAgent), truncated, base64url.
   * Stable within a UTC day, unrelated across days and projects.
   */
  anonymousSessionId(projectId: string, client: ClientFacts, now: number): string;
  /** Ensure today's salt exists, delete salts older than 48 h, persist the set. Called at start and on a timer. */
  rotateSalts(now: number): Promise<void>;
}

export interface EnricherOptions {
  /** an IP-to-country .mmdb; undefined means the CC0/CC BY database shipped in node_modules */
  geoDbPath?: string | undefined;
  salts: SaltStore;
  /** cluster: also create tomorrow's salt at each rotation, so every node has agreed on it before midnight */
  saltsAhead?: boolean;
  now: number;
}
