import type { IncomingMessage, ServerResponse } from 'node:http';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { AnalyticsEngine, Failure, RequestMeta } from '../engine/types.ts';
import { createMcpServer } from './server.ts';

/**
 * POST /mcp: MCP over Streamable HTTP, stateless. Every request carries the bearer key like every other endpoint, so
 * there is no session to keep: each request gets a server for its key, answers with JSON (no stream is needed: every
 * tool answers in one message) and is done. GET (a server-to-client stream) and DELETE (end a session) have nothing
 * to offer here and answer 405 with the rest of the HTTP face's routing.
 */

export interface McpRequest {
  engine: AnalyticsEngine;
  meta: RequestMeta;
  req: IncomingMessage;
  res: ServerResponse;
  /** the HTTP face's JSON body reader (its size, type and syntax rules) */
  readJson: () => Promise<{ ok: true; value: unknown } | (Failure & { tooLarge?: boolean; aborted?: boolean })>;
  /** the HTTP face's error answer */
  send: (out: Failure) => void;
}

export async function serveMcp({ engine, meta, req, res, readJson, send }: McpRequest): Promise<void> {
  // The key first, as everywhere: a request without a valid key learns nothing, not even which tools exist.
  const who = engine.identify(meta);
  if (!who.ok) {
    req.resume();
    return send(who);
  }
  const body = await readJson();
  if (!body.ok) {
    if (body.aborted) return;
    if (body.tooLarge) res.setHeader('Connection', 'close');
    send(body);
    if (body.tooLarge) req.socket.end();
    return;
  }
  const server = createMcpServer(engine, meta, who.value, engine.health().version, (rate) => {
    // the answer is written after the tool ran: its RateLimit-* go out with it
    if (res.headersSent) return;
    res.setHeader('RateLimit-Limit', String(rate.limit));
    res.setHeader('RateLimit-Remaining', String(rate.remaining));
    res.setHeader('RateLimit-Reset', String(rate.resetSeconds));
  });
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.once('close', () => {
    void transport.close();
    void server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(req, res, body.value);
}
