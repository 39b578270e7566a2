// long because every route's wire handling (bodies, CORS, headers, shutdown drain) is one class; the rules are in the engine.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { exportLine } from '../core/history-line.ts';
import { guardJson } from '../core/json-guard.ts';
import { clientIp } from '../enrich/index.ts';
import {
  failure,
  type AnalyticsEngine,
  type EngineError,
  type ErrorCode,
  type Failure,
  type Gate,
  type Outcome,
  type RateInfo,
  type RequestMeta,
} from '../engine/types.ts';
import { CONNECTION_LIMITS, ConnectionGuard, type GuardLimits, type Refusal } from '../net/connection-guard.ts';
import { buildTracker } from '../tracker/build.ts';
import type { OperatorMetrics } from '../engine/operator-metrics.ts';
import { MAX_QUERY_BODY_BYTES } from '../core/query/schema.ts';
import { openApiDocument } from './openapi.ts';
import { checkQuery, pageQuery, type ExportQueryParams, type ListProjectsQueryParams, type MetricsQueryParams, type RealtimeQueryParams } from '../engine/request-params.ts';
import { bodyEncoding, readBody } from './read-body.ts';

/**
 * The HTTP face: parses the wire, calls the engine, maps outcomes to status codes and headers. It holds no rules
 * of its own beyond the wire: body size, content type, JSON syntax.
 */

/** Node's default (16 KiB) made explicit: a bearer key and a long Referer fit many times over. */
const MAX_HEADER_BYTES = 16 * 1024;
/** A client has this long to send its headers (slowloris). */
const HEADERS_TIMEOUT_MS = 10_000;
/** And this long for the whole request: 1 MiB at 35 KB/s; slower clients are cut off. */
const REQUEST_TIMEOUT_MS = 30_000;
/** Idle keep-alive connections close after this; beacons rarely reuse connections longer. */
const KEEP_ALIVE_TIMEOUT_MS = 5_000;
/** Node's default made explicit: the two timeouts above are enforced at most this late. */
const CONNECTIONS_CHECKING_INTERVAL_MS = 30_000;
/** Browsers cap preflight caching (Chromium at 2 h); asking for more changes nothing. */
const PREFLIGHT_MAX_AGE_S = 7200;
/** /script.js is re-validated daily; /script.<hash>.js never changes, so it is cached for a year. */
const SCRIPT_MAX_AGE_S = 86_400;
const IMMUTABLE_MAX_AGE_S = 31_536_000;
/** At shutdown, in-flight requests get this long to finish; those still running then are answered 503 and closed. */
export const HTTP_DRAIN_MS = 5_000;

const EXPOSED = 'Retry-After, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset';

/** What a mounted face (MCP over HTTP) gets: the request, the caller, and the HTTP face's body reader and error answer. */
export interface MountRequest {
  engine: AnalyticsEngine;
  meta: RequestMeta;
  req: IncomingMessage;
  res: ServerResponse;
  readJson: () => Promise<{ ok: true; value: unknown } | (Failure & { tooLarge?: boolean; aborted?: boolean })>;
  send: (out: Failure) => void;
}

/** Static pages served under a path prefix (the dashboard): no key, no JSON; a refusal comes back as a Failure. */
export interface PageMount {
  owns(pathname: string): boolean;
  serve(req: IncomingMessage, res: ServerResponse, pathname: string): Promise<Failure | undefined>;
}

export interface HttpOptions {
  host: string;
  port: number;
  trustProxy: boolean;
  /** overrides of the timeouts below (tests use short ones); absent = the defaults above */
  headersTimeoutMs?: number;
  requestTimeoutMs?: number;
  keepAliveTimeoutMs?: number;
  /** how often Node checks requests against headersTimeout/requestTimeout */
  connectionsCheckingIntervalMs?: number;
  /** operator metrics: requests by endpoint and outcome */
  ops?: OperatorMetrics | undefined;
  /** connection caps (tests use small ones); the first request's headers are due within headersTimeoutMs */
  maxConnections?: number;
  maxConnectionsPerIp?: number;
  /** other faces the service wires in (faces never import each other): POST /mcp, and the dashboard's pages */
  mcp?: (r: MountRequest) => Promise<void>;
  pages?: PageMount;
}

/** `query` has passed the route's schema in engine/request-params.ts (routes without one: every parameter, first value). */
type Handler = (req: IncomingMessage, res: ServerResponse, url: URL, query: Record<string, string>, params: string[]) => Promise<void> | void;

/** Routes with path parameters (`{id}`, `{keyId}`: one path segment each), tried after the exact routes. */
const PROJECT_ROUTE = /^\/projects\/([^/]+)$/;
const KEYS_ROUTE = /^\/projects\/([^/]+)\/keys$/;
const KEY_ROUTE = /^\/projects\/([^/]+)\/keys\/([^/]+)$/;
const HISTORY_ROUTE = /^\/projects\/([^/]+)\/history$/;
const EXPORT_ROUTE = /^\/projects\/([^/]+)\/export$/;
/** An export is written in pieces of about this size: few syscalls, little held per slow reader. */
const EXPORT_WRITE_BYTES = 64 * 1024;
const GOALS_ROUTE = /^\/projects\/([^/]+)\/goals$/;
const GOAL_ROUTE = /^\/projects\/([^/]+)\/goals\/([^/]+)$/;
/** Route templates: query schemas and metrics labels are per template (never per id: that would be unbounded). */
const PARAM_TEMPLATES = new Map([
  [PROJECT_ROUTE, '/projects/{id}'],
  [KEYS_ROUTE, '/projects/{id}/keys'],
  [KEY_ROUTE, '/projects/{id}/keys/{keyId}'],
  [HISTORY_ROUTE, '/projects/{id}/history'],
  [EXPORT_ROUTE, '/projects/{id}/export'],
  [GOALS_ROUTE, '/projects/{id}/goals'],
  [GOAL_ROUTE, '/projects/{id}/goals/{goalId}'],
]);

export function statusOf(code: ErrorCode): number {
  switch (code) {
    case 'invalid_json':
    case 'invalid_event':
    case 'invalid_request':
      return 400;
    case 'unauthorized':
      return 401;
    case 'forbidden':
      return 403;
    case 'not_found':
      return 404;
    case 'method_not_allowed':
      return 405;
    case 'conflict':
      return 409;
    case 'payload_too_large':
      return 413;
    case 'unsupported_media_type':
      return 415;
    case 'rate_limited':
    case 'quota_exceeded':
      return 429;
    case 'internal':
      return 500;
    case 'unavailable':
      return 503;
    default: {
      const never: never = code;
      return never;
    }
  }
}

export class HttpFace {
  readonly server: Server;
  /** accepts TCP connections and hands the admitted ones to `server` */
  readonly listener: NetServer;
  readonly guard: ConnectionGuard;
  private readonly routes: Record<string, Record<string, Handler>>;
  private readonly paramRoutes: Array<[RegExp, Record<string, Handler>]>;
  /** the error code each answer carried, for operator metrics */
  private readonly outcomes = new WeakMap<ServerResponse, string>();
  /** connections that have sent at least one request's headers */
  private readonly started = new WeakSet<Socket>();
  /** responses in progress, and how many per connection */
  private readonly active = new Set<ServerResponse>();
  private readonly busy = new Map<Socket, number>();
  private closing = false;

  constructor(
    private readonly engine: AnalyticsEngine,
    private readonly options: HttpOptions,
  ) {
    this.routes = {
      '/analytics': { POST: (req, res) => this.ingest(req, res) },
      '/api/event': { POST: (req, res) => this.plausibleEvent(req, res) },
      '/api/v2/query': { POST: (req, res) => this.plausibleQuery(req, res) },
      '/metrics': { GET: (req, res, _url, query) => this.metrics(req, res, query) },
      '/metrics/realtime': { GET: (req, res, _url, query) => this.realtime(req, res, query) },
      '/projects': { GET: (req, res, _url, query) => this.listProjects(req, res, query), POST: (req, res) => this.createProject(req, res) },
      '/query': { POST: (req, res) => this.question(req, res, (meta, body) => this.engine.query(meta, body)) },
      '/query/funnel': { POST: (req, res) => this.question(req, res, (meta, body) => this.engine.funnel(meta, body)) },
      // HEAD answers as GET (same status and headers); Node's response leaves the body out for a HEAD request.
      '/health': { GET: (_req, res) => this.health(res), HEAD: (_req, res) => this.health(res) },
      '/mcp': {
        POST: (req, res) =>
          this.mount(res, this.options.mcp, { engine: this.engine, meta: this.meta(req), req, res, readJson: () => this.readJson(req), send: (out) => this.send(res, out) }),
      },
      '/openapi.json': { GET: (_req, res) => this.sendJson(res, 200, openApiDocument(this.engine.health().version)) },
      '/script.js': { GET: (req, res) => this.script(req, res, undefined), HEAD: (req, res) => this.script(req, res, undefined) },
    };
    this.paramRoutes = [
      [PROJECT_ROUTE, {
        PATCH: (req, res, _url, _query, [id]) => this.manageWithBody(req, res, (meta, body) => this.engine.updateProject(meta, id!, body)),
        DELETE: (req, res, _url, _query, [id]) => this.manage(req, res, (meta) => this.engine.deleteProject(meta, id!)),
      }],
      [KEYS_ROUTE, {
        GET: (req, res, _url, _query, [id]) => this.manage(req, res, (meta) => this.engine.listKeys(meta, id!)),
        POST: (req, res, _url, _query, [id]) => this.manageWithBody(req, res, (meta, body) => this.engine.createKey(meta, id!, body)),
      }],
      [KEY_ROUTE, {
        PATCH: (req, res, _url, _query, [id, keyId]) => this.manageWithBody(req, res, (meta, body) => this.engine.updateKey(meta, id!, keyId!, body)),
        DELETE: (req, res, _url, _query, [id, keyId]) => this.manage(req, res, (meta) => this.engine.revokeKey(meta, id!, keyId!)),
      }],
      [HISTORY_ROUTE, { POST: (req, res, _url, _query, [id]) => this.history(req, res, id!) }],
      [EXPORT_ROUTE, { GET: (req, res, _url, query, [id]) => this.exportEvents(req, res, query, id!) }],
      [GOALS_ROUTE, {
        GET: (req, res, _url, _query, [id]) => this.manage(req, res, (meta) => this.engine.listGoals(meta, id!)),
        POST: (req, res, _url, _query, [id]) => this.manageWithBody(req, res, (meta, body) => this.engine.createGoal(meta, id!, body)),
      }],
      [GOAL_ROUTE, {
        DELETE: (req, res, _url, _query, [id, goalId]) => this.manage(req, res, (meta) => this.engine.deleteGoal(meta, id!, goalId!)),
      }],
    ];
    this.server = createServer(
      {
        maxHeaderSize: MAX_HEADER_BYTES,
        headersTimeout: options.headersTimeoutMs ?? HEADERS_TIMEOUT_MS,
        requestTimeout: options.requestTimeoutMs ?? REQUEST_TIMEOUT_MS,
        keepAliveTimeout: options.keepAliveTimeoutMs ?? KEEP_ALIVE_TIMEOUT_MS,
        connectionsCheckingInterval: options.connectionsCheckingIntervalMs ?? CONNECTIONS_CHECKING_INTERVAL_MS,
      },
      (req, res) => this.track(req, res),
    );
    const limits: GuardLimits = {
      maxOpen: options.maxConnections ?? CONNECTION_LIMITS.maxOpen,
      // behind a trusted proxy every connection comes from the proxy: only the total cap applies
      maxPerIp: options.trustProxy ? 0 : (options.maxConnectionsPerIp ?? CONNECTION_LIMITS.maxPerIp),
      handshakeMs: options.headersTimeoutMs ?? HEADERS_TIMEOUT_MS,
    };
    this.guard = new ConnectionGuard(limits, refuseHttp);
    this.listener = createNetServer((socket) => {
      if (this.guard.admit(socket, (s) => this.started.has(s))) this.server.emit('connection', socket);
    });
  }

  listen(): Promise<number> {
    return new Promise((resolve, reject) => {
      this.listener.once('error', reject);
      this.listener.listen(this.options.port, this.options.host, () => {
        this.listener.off('error', reject);
        // The http server never listens itself; 'listening' is what starts its headersTimeout/requestTimeout checks.
        this.server.emit('listening');
        resolve((this.listener.address() as AddressInfo).port);
      });
    });
  }

  /**
   * Stops accepting connections, closes every connection with no request in progress (idle keep-alive and silent
   * ones alike), lets in-flight requests finish for up to `drainMs`, then answers those still running 503 and closes
   * everything. Resolves when no connection is left.
   */
  async close(drainMs: number = HTTP_DRAIN_MS): Promise<void> {
    this.closing = true;
    const stopped = new Promise<void>((resolve) => this.listener.close(() => resolve()));
    this.guard.destroyAll((s) => this.busy.has(s));
    const deadline = Date.now() + drainMs;
    while (this.active.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    for (const res of this.active) {
      if (!res.headersSent) {
        res.setHeader('Connection', 'close');
        this.send(res, failure('unavailable', 'the service is shutting down; retry', { retryAfterSeconds: 1 }));
      }
    }
    // let those answers reach the wire, then nothing is left open
    await new Promise((r) => setTimeout(r, 50));
    this.guard.destroyAll();
    this.server.closeAllConnections();
    this.server.close(() => {}); // stops its timeout checks (it reports "not running": it never listened itself)
    await stopped;
  }

  /** Every request: note its connection as a real client and as busy until the response is done. */
  private track(req: IncomingMessage, res: ServerResponse): void {
    const socket = req.socket;
    this.started.add(socket);
    this.active.add(res);
    this.busy.set(socket, (this.busy.get(socket) ?? 0) + 1);
    this.guard.note(socket, 'busy');
    if (this.closing) res.setHeader('Connection', 'close');
    res.once('close', () => {
      this.active.delete(res);
      const n = (this.busy.get(socket) ?? 1) - 1;
      if (n <= 0) {
        this.busy.delete(socket);
        this.guard.note(socket, 'idle');
      } else this.busy.set(socket, n);
      if (this.closing) socket.destroySoon();
    });
    void this.handle(req, res);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const url = new URL(req.url ?? '/', 'http://localhost');
      this.cors(req, res);
      if (req.method === 'OPTIONS') return this.preflight(req, res, url.pathname);
      const scriptMatch = /^\/script\.([0-9a-f]{8,64})\.js$/.exec(url.pathname);
      if (scriptMatch && (req.method === 'GET' || req.method === 'HEAD')) return await this.script(req, res, scriptMatch[1]!);
      let route = this.routes[url.pathname];
      let params: string[] = [];
      let endpoint = route ? url.pathname : scriptMatch ? '/script.js' : this.options.pages?.owns(url.pathname) === true ? '/dashboard' : 'unknown';
      if (!route) {
        for (const [pattern, handlers] of this.paramRoutes) {
          const m = pattern.exec(url.pathname);
          if (m) {
            route = handlers;
            params = m.slice(1).map(safeDecode);
            endpoint = PARAM_TEMPLATES.get(pattern)!;
            break;
          }
        }
      }
      const ops = this.options.ops;
      if (ops) res.once('finish', () => ops.request('http', endpoint, this.outcomes.get(res) ?? (res.statusCode < 400 ? 'ok' : String(res.statusCode))));
      if (this.options.pages?.owns(url.pathname) === true) {
        const refused = await this.options.pages.serve(req, res, url.pathname);
        return refused ? this.send(res, refused) : undefined;
      }
      if (!route) return this.send(res, failure('not_found', `no route ${req.method ?? ''} ${url.pathname}`));
      const handler = route[req.method ?? ''];
      if (!handler) {
        res.setHeader('Allow', [...Object.keys(route), 'OPTIONS'].join(', '));
        return this.send(res, failure('method_not_allowed', `${req.method ?? ''} is not allowed on ${url.pathname}`));
      }
      const query = checkQuery(endpoint, req.method!, url.searchParams);
      if (!query.ok) {
        req.resume();
        return this.send(res, failure('invalid_request', query.message, { details: query.names.map((name) => ({ path: name, message: query.message })) }));
      }
      await handler(req, res, url, query.value, params);
    } catch (err) {
      // Faults never leak internals; the message is for operators, in the log.
      console.error('internal error:', err);
      if (!res.headersSent) this.send(res, failure('internal', 'internal error'));
      else res.destroy();
    }
  }

  /** A route another face serves; without that face wired in, the route is unknown here. */
  private async mount(res: ServerResponse, face: ((r: MountRequest) => Promise<void>) | undefined, r: MountRequest): Promise<void> {
    if (!face) {
      r.req.resume();
      return this.send(res, failure('not_found', `no route ${r.req.method ?? ''} /mcp`));
    }
    return face(r);
  }

  private meta(req: IncomingMessage): RequestMeta {
    const h = req.headers;
    const forwarded = Array.isArray(h['x-forwarded-for']) ? h['x-forwarded-for'].join(',') : h['x-forwarded-for'];
    return {
      authorization: h.authorization,
      origin: h.origin,
      referer: h.referer,
      ownPage: isOwnPage(h.origin, h.referer, this.options.trustProxy ? firstHeader(h['x-forwarded-host']) ?? h.host : h.host),
      ip: clientIp(req.socket.remoteAddress, forwarded, this.options.trustProxy),
      userAgent: h['user-agent'] ?? '',
    };
  }

  private async ingest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const meta = this.meta(req);
    const body = await this.readJson(req);
    if (!body.ok) return this.refuse(req, res, meta, 'ingest', body);
    const events = eventsOf(body.value);
    if (events === undefined) return this.refuse(req, res, meta, 'ingest', failure('invalid_request', '`events` must be an array of events'));
    const out = await this.engine.ingest({ ...meta, guarded: true }, events);
    if (out.ok) return this.sendJson(res, 200, { ok: true, ts: out.value.ts, accepted: out.value.accepted }, out.rate);
    return this.send(res, out);
  }

  /**
   * POST /api/event: Plausible's Events API (engine/plausible.ts). 202 with an empty body, as Plausible answers; an
   * event no site took (an unknown domain, or refused by its rules) is dropped with `x-plausible-dropped: 1`.
   */
  private async plausibleEvent(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const meta = this.meta(req);
    const body = await this.readJson(req);
    if (!body.ok) return this.send(res, body);
    const out = await this.engine.plausibleEvent({ ...meta, guarded: true }, body.value);
    if (!out.ok) return this.send(res, out);
    res.writeHead(202, { 'Content-Length': 0, 'Cache-Control': 'no-store', ...(out.value.dropped ? { 'x-plausible-dropped': '1' } : {}) });
    res.end();
  }

  /** POST /api/v2/query: Plausible's Stats API v2 (engine/plausible-stats.ts); errors as Plausible gives them, `{ "error" }`. */
  private async plausibleQuery(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const meta = this.meta(req);
    const body = await this.readJson(req, MAX_QUERY_BODY_BYTES);
    if (!body.ok) return this.sendJson(res, statusOf(body.error.code), { error: body.error.message });
    const out = await this.engine.plausibleQuery(meta, body.value);
    if (!out.ok) return this.sendJson(res, out.status, { error: out.error });
    this.sendJson(res, 200, out.value);
  }

  /** POST /projects/{id}/history: the body of POST /analytics. */
  private async history(req: IncomingMessage, res: ServerResponse, projectId: string): Promise<void> {
    const meta = this.meta(req);
    const body = await this.readJson(req);
    if (!body.ok) return this.refuse(req, res, meta, 'manage', body);
    const events = eventsOf(body.value);
    if (events === undefined) return this.refuse(req, res, meta, 'manage', failure('invalid_request', '`events` must be an array of events'));
    const out = await this.engine.history({ ...meta, guarded: true }, projectId, events);
    if (out.ok) return this.sendJson(res, 200, { ok: true, accepted: out.value.accepted, duplicates: out.value.duplicates }, out.rate);
    return this.send(res, out);
  }

  /**
   * GET /projects/{id}/export: NDJSON, one event a line, written as the engine hands out chunks. A write the socket
   * cannot take yet waits for 'drain', so a slow reader holds at most one chunk of the service's memory; a reader
   * that goes away stops the reading of the log.
   */
  private async exportEvents(req: IncomingMessage, res: ServerResponse, q: Record<string, string>, projectId: string): Promise<void> {
    req.resume();
    const query = q as ExportQueryParams;
    const out = this.engine.exportEvents(this.meta(req), projectId, { date: query.date, from: query.from, to: query.to });
    if (!out.ok) return this.send(res, out);
    const chunks = out.value.chunks;
    this.setRate(res, out.rate);
    res.writeHead(200, { 'Content-Type': 'application/x-ndjson; charset=utf-8', 'Cache-Control': 'no-store' });
    let gone = false;
    res.once('close', () => {
      gone = true;
    });
    const drained = () => new Promise<void>((resolve) => {
      const done = () => {
        res.off('drain', done);
        res.off('close', done);
        resolve();
      };
      res.on('drain', done);
      res.on('close', done);
    });
    try {
      let buf = '';
      for await (const chunk of chunks) {
        for (const e of chunk) {
          buf += `${JSON.stringify(exportLine(e))}\n`;
          if (buf.length >= EXPORT_WRITE_BYTES) {
            const more = res.write(buf);
            buf = '';
            if (!more && !gone) await drained();
            if (gone) return;
          }
        }
      }
      if (buf !== '') res.write(buf);
      res.end();
    } catch (err) {
      console.error('export failed:', err);
      res.destroy();
    } finally {
      await chunks.return(undefined);
    }
  }

  private async metrics(req: IncomingMessage, res: ServerResponse, q: MetricsQueryParams): Promise<void> {
    const out = await this.engine.metrics(this.meta(req), { date: q.date, from: q.from, to: q.to, projectId: q.projectId, compare: q.compare });
    if (out.ok) return this.sendJson(res, 200, out.value, out.rate);
    return this.send(res, out);
  }

  private async realtime(req: IncomingMessage, res: ServerResponse, q: RealtimeQueryParams): Promise<void> {
    const out = await this.engine.realtime(this.meta(req), { projectId: q.projectId });
    if (out.ok) return this.sendJson(res, 200, out.value, out.rate);
    return this.send(res, out);
  }

  private listProjects(req: IncomingMessage, res: ServerResponse, q: ListProjectsQueryParams): void {
    const out = this.engine.listProjects(this.meta(req), pageQuery(q));
    if (out.ok) return this.sendJson(res, 200, out.value, out.rate);
    return this.send(res, out);
  }

  /** A management call without a body. */
  private async manage(req: IncomingMessage, res: ServerResponse, call: (meta: RequestMeta) => Outcome<unknown> | Promise<Outcome<unknown>>): Promise<void> {
    const meta = this.meta(req);
    req.resume();
    const out = await call(meta);
    if (out.ok) return this.sendJson(res, 200, out.value, out.rate);
    return this.send(res, out);
  }

  /** A management call with a JSON body. */
  private async manageWithBody(req: IncomingMessage, res: ServerResponse, call: (meta: RequestMeta, body: unknown) => Promise<Outcome<unknown>>): Promise<void> {
    const meta = this.meta(req);
    const body = await this.readJson(req);
    if (!body.ok) return this.refuse(req, res, meta, 'manage', body);
    const out = await call(meta, body.value);
    if (out.ok) return this.sendJson(res, 200, out.value, out.rate);
    return this.send(res, out);
  }

  /** POST /query and /query/funnel: a JSON body of at most 64 KiB, behind the read gate. */
  private async question(req: IncomingMessage, res: ServerResponse, call: (meta: RequestMeta, body: unknown) => Promise<Outcome<unknown>>): Promise<void> {
    const meta = this.meta(req);
    const body = await this.readJson(req, MAX_QUERY_BODY_BYTES);
    if (!body.ok) return this.refuse(req, res, meta, 'read', body);
    const out = await call(meta, body.value);
    if (out.ok) return this.sendJson(res, 200, out.value, out.rate);
    return this.send(res, out);
  }

  private async createProject(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const meta = this.meta(req);
    const body = await this.readJson(req);
    if (!body.ok) return this.refuse(req, res, meta, 'manage', body);
    const out = await this.engine.createProject(meta, body.value);
    if (out.ok) return this.sendJson(res, 200, out.value, out.rate);
    return this.send(res, out);
  }

  private health(res: ServerResponse): void {
    const h = this.engine.health();
    this.sendJson(res, h.status === 'ok' ? 200 : 503, h);
  }

  /** `pinnedHash` is the hash of a /script.<hash>.js request: only the current build's hash may be cached forever. */
  private async script(req: IncomingMessage, res: ServerResponse, pinnedHash: string | undefined): Promise<void> {
    const build = await buildTracker();
    if (pinnedHash !== undefined && pinnedHash !== build.hash) {
      return this.send(res, failure('not_found', `no script version ${pinnedHash}; the current one is /script.${build.hash}.js`));
    }
    res.setHeader('ETag', `"${build.hash}"`);
    res.setHeader('Cross-Origin-Resource-Policy', 'cross-origin');
    res.setHeader('Vary', 'Origin, Accept-Encoding');
    res.setHeader(
      'Cache-Control',
      pinnedHash !== undefined
        ? `public, max-age=${IMMUTABLE_MAX_AGE_S}, immutable`
        : `public, max-age=${SCRIPT_MAX_AGE_S}, stale-while-revalidate=${SCRIPT_MAX_AGE_S}`,
    );
    if (req.headers['if-none-match'] === `"${build.hash}"`) {
      res.writeHead(304).end();
      return;
    }
    const headers: Record<string, string | number> = { 'Content-Type': 'application/javascript; charset=utf-8' };
    // Content-Length is set here, not left to end(): a HEAD answer (no body) carries the same headers as GET.
    const gzip = /\bgzip\b/.test(req.headers['accept-encoding'] ?? '');
    const body = gzip ? build.gzip : build.code;
    if (gzip) headers['Content-Encoding'] = 'gzip';
    headers['Content-Length'] = Buffer.byteLength(body);
    res.writeHead(200, headers).end(body);
  }

  /** Reads and parses a JSON body; a failure says what to answer once the caller has passed the gate. */
  private async readJson(req: IncomingMessage, maxBytes?: number): Promise<JsonBody> {
    const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (type !== 'application/json' && type !== 'text/plain') {
      req.resume();
      return wireFail('unsupported_media_type', 'send Content-Type: application/json (or text/plain for beacons)');
    }
    const encoding = bodyEncoding(req.headers['content-encoding']);
    if (encoding === undefined) {
      req.resume();
      return wireFail('unsupported_media_type', 'send the body plain or with Content-Encoding: gzip');
    }
    const body = await readBody(req, encoding, maxBytes);
    if (!body.ok) {
      if (body.reason === 'aborted') return { ...wireFail('invalid_request', body.message), aborted: true };
      // the rest of a body that does not inflate is unread: answer, then close the connection
      if (body.reason === 'bad_encoding') return { ...wireFail('invalid_request', body.message), tooLarge: true };
      return { ...wireFail('payload_too_large', body.message), tooLarge: true };
    }
    let text = body.text;
    if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    if (!/\S/.test(text)) { // no copy of the body, unlike trim()
      return wireFail('invalid_json', 'the body is empty; send a JSON event, array of events or {"events": [...]}');
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      return wireFail('invalid_json', `the body is not valid JSON: ${err instanceof Error ? err.message : 'parse error'}`);
    }
    const guard = guardJson(value);
    if (!guard.ok) return wireFail('invalid_request', guard.message, [{ path: guard.path, message: guard.message }]);
    return { ok: true, value };
  }

  /** Answers a body the face could not use, after the engine's gate (401/403/429 win over a bad body). */
  private refuse(req: IncomingMessage, res: ServerResponse, meta: RequestMeta, endpoint: Gate, body: JsonFailure): void {
    if (body.aborted) return; // the client went away mid-body: nobody to answer
    const out = this.engine.refuse(meta, endpoint, body.error);
    if (body.tooLarge) {
      // Stop reading: tell the client, then close the connection so it cannot keep streaming at us.
      res.setHeader('Connection', 'close');
      this.send(res, out);
      req.socket.end();
      return;
    }
    this.send(res, out);
  }

  private cors(req: IncomingMessage, res: ServerResponse): void {
    const origin = req.headers.origin;
    res.setHeader('Vary', 'Origin');
    if (!origin) return;
    res.setHeader('Access-Control-Allow-Origin', origin);
    res.setHeader('Access-Control-Expose-Headers', EXPOSED);
  }

  private preflight(req: IncomingMessage, res: ServerResponse, pathname: string): void {
    res.setHeader('Access-Control-Allow-Methods', 'GET, POST, PATCH, DELETE, OPTIONS');
    // A browser-based MCP client sends the protocol version header on every request after initialize.
    res.setHeader('Access-Control-Allow-Headers', pathname === '/mcp' ? 'Authorization, Content-Type, Mcp-Protocol-Version' : 'Authorization, Content-Type');
    res.setHeader('Access-Control-Max-Age', String(PREFLIGHT_MAX_AGE_S));
    res.setHeader('Allow', 'GET, POST, PATCH, DELETE, OPTIONS');
    req.resume();
    res.writeHead(204).end();
  }

  private send(res: ServerResponse, out: Failure): void {
    const { code, message, details, retryAfterSeconds } = out.error;
    if (retryAfterSeconds !== undefined) res.setHeader('Retry-After', String(retryAfterSeconds));
    this.outcomes.set(res, code);
    const error: Record<string, unknown> = { code, message };
    if (details && details.length > 0) error.details = details;
    this.sendJson(res, statusOf(code), { ok: false, error }, out.rate);
  }

  private setRate(res: ServerResponse, rate: RateInfo | undefined): void {
    if (rate) {
      res.setHeader('RateLimit-Limit', String(rate.limit));
      res.setHeader('RateLimit-Remaining', String(rate.remaining));
      res.setHeader('RateLimit-Reset', String(rate.resetSeconds));
    }
  }

  private sendJson(res: ServerResponse, status: number, body: unknown, rate?: RateInfo): void {
    this.setRate(res, rate);
    const json = JSON.stringify(body);
    res.writeHead(status, {
      'Content-Type': 'application/json; charset=utf-8',
      'Content-Length': Buffer.byteLength(json),
      'Cache-Control': 'no-store',
    });
    res.end(json);
  }
}

/** A connection over a cap gets a complete HTTP answer before it is closed, so the client can tell why. */
function refuseHttp(socket: Socket, why: Refusal): void {
  const message =
    why === 'too_many_from_ip'
      ? 'too many open connections from your address; close idle connections and retry'
      : 'the service has too many open connections; retry shortly';
  const body = JSON.stringify({ ok: false, error: { code: 'unavailable', message } });
  socket.end(
    'HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\nRetry-After: 1\r\n' +
      `Connection: close\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}

interface JsonFailure extends Failure {
  /** 413: the connection is closed after the answer */
  tooLarge?: boolean;
  /** the client went away before the body ended */
  aborted?: boolean;
}
type JsonBody = { ok: true; value: unknown } | JsonFailure;

function wireFail(code: ErrorCode, message: string, details?: EngineError['details']): JsonFailure {
  return failure(code, message, details ? { details } : {});
}

/** The events of a POST /analytics or /history body: an array, `{"events": [...]}` or one event; undefined when `events` is not an array. */
function eventsOf(value: unknown): unknown[] | undefined {
  if (Array.isArray(value)) return value;
  if (isObject(value) && 'events' in value && !('event' in value)) return Array.isArray(value.events) ? value.events : undefined;
  return [value];
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/**
 * Whether a request comes from one of the service's own pages: its Origin (or, a same-origin GET sending none, its
 * Referer) names the host the request was sent to. Behind a proxy the service trusts, the host it forwarded.
 */
export function isOwnPage(origin: string | undefined, referer: string | undefined, host: string | undefined): boolean {
  const from = origin ?? referer;
  if (from === undefined || host === undefined || from === 'null') return false;
  try {
    return new URL(from).host.toLowerCase() === host.toLowerCase();
  } catch {
    return false;
  }
}

function firstHeader(v: string | string[] | undefined): string | undefined {
  const s = Array.isArray(v) ? v[0] : v;
  return s?.split(',')[0]?.trim() || undefined;
}

