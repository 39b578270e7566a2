import type { IncomingMessage, ServerResponse } from 'node:http';
import { failure, type Failure } from '../engine/types.ts';
import { buildDashboard } from './build.ts';

/**
 * GET /dashboard and its assets under /dashboard/. The page itself holds no data and no key: everything it shows
 * comes from GET /metrics, /metrics/realtime and /projects, which it calls with the key the person types in.
 */

/** Hashed asset names never change content, so browsers may keep them for a year. */
const IMMUTABLE_MAX_AGE_S = 31_536_000;

/**
 * Only our own script and stylesheet, calls to our own origin, no frames, no form submission (the key must never
 * leave in a form), no referrer (a dashboard URL is nobody's business).
 */
const CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

export function isDashboardPath(pathname: string): boolean {
  return pathname === '/dashboard' || pathname.startsWith('/dashboard/');
}

/** Answers a /dashboard request, or returns the failure the HTTP face should send. */
export async function serveDashboard(req: IncomingMessage, res: ServerResponse, pathname: string): Promise<Failure | undefined> {
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.setHeader('Allow', 'GET, HEAD, OPTIONS');
    return failure('method_not_allowed', `${req.method ?? ''} is not allowed on ${pathname}`);
  }
  if (pathname === '/dashboard/') {
    // The page's relative paths resolve from /dashboard; a fragment (#key=…) survives the redirect.
    res.writeHead(308, { Location: '../dashboard', 'Cache-Control': 'no-store' }).end();
    return undefined;
  }
  const build = await buildDashboard();
  const name = pathname.slice('/dashboard/'.length);
  const asset = pathname === '/dashboard' ? build.html : build.assets.get(name);
  if (!asset) return failure('not_found', `no dashboard file ${pathname}`);
  const headers: Record<string, string> = {
    'Content-Type': asset.contentType,
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    Vary: 'Accept-Encoding',
    'Cache-Control': asset === build.html ? 'no-cache' : `public, max-age=${IMMUTABLE_MAX_AGE_S}, immutable`,
  };
  if (asset === build.html) {
    headers['Content-Security-Policy'] = CSP;
    headers['X-Frame-Options'] = 'DENY';
  }
  const gzip = /\bgzip\b/.test(req.headers['accept-encoding'] ?? '');
  if (gzip) headers['Content-Encoding'] = 'gzip';
  const body = gzip ? asset.gzip : asset.body;
  headers['Content-Length'] = String(body.length);
  res.writeHead(200, headers).end(body);
  return undefined;
}
