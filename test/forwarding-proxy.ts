import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A small HTTP proxy in front of the real service, for tests that need to see or disturb the traffic between a
 * client and the service: it records every exchange it forwards, and a handler may answer a request itself instead.
 */

export interface Exchange {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  status: number;
  responseHeaders: IncomingHttpHeaders;
}

export interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** Decides what the client gets; `forward()` sends the request on to the service (and records the exchange). */
export type ProxyHandler = (req: IncomingMessage, res: ServerResponse, body: Buffer, forward: () => Promise<Answer>) => Promise<void> | void;

export interface Proxy {
  origin: string;
  log: Exchange[];
  close(): Promise<void>;
}

const passThrough: ProxyHandler = async (_req, res, _body, forward) => {
  const a = await forward();
  res.writeHead(a.status, a.headers).end(a.body);
};

export async function startProxy(target: string, handle: ProxyHandler = passThrough): Promise<Proxy> {
  const upstream = new URL(target);
  const log: Exchange[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const forward = () =>
        new Promise<Answer>((resolve) => {
          const out = http.request(
            { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: { ...req.headers, host: upstream.host } },
            (answer) => {
              const back: Buffer[] = [];
              answer.on('data', (c: Buffer) => back.push(c));
              answer.on('end', () => {
                const status = answer.statusCode ?? 502;
                log.push({ method: req.method ?? '', path: req.url ?? '', headers: req.headers, body: body.toString(), status, responseHeaders: answer.headers });
                resolve({ status, headers: answer.headers, body: Buffer.concat(back) });
              });
            },
          );
          out.on('error', () => resolve({ status: 502, headers: {}, body: Buffer.alloc(0) }));
          out.end(body);
        });
      void Promise.resolve(handle(req, res, body, forward)).catch(() => res.writeHead(500).end());
    });
  });
  const origin = await listen(server);
  return { origin, log, close: () => closeServer(server) };
}

/** Listens on a free loopback port and resolves with the origin. */
export function listen(server: http.Server): Promise<string> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)));
}

export function closeServer(server: http.Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}
