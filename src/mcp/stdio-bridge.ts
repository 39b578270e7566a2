import type { Readable, Writable } from 'node:stream';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { isJSONRPCRequest, isJSONRPCResultResponse, type JSONRPCMessage, type RequestId } from '@modelcontextprotocol/sdk/types.js';

/**
 * `analytics mcp`: MCP over stdio for agents that start their tools as processes, relayed to the service's own
 * Streamable HTTP endpoint (POST /mcp) with the caller's key. The tools, their schemas and every refusal therefore
 * come from the one MCP server in the service: this relay holds no tool and no rule. It needs only `--url` and
 * `--key`, like every remote command, so it works against a hosted service as well as a local one; it never opens a
 * data directory, whose live state belongs to the running service.
 */

/** JSON-RPC "server error" range: the service refused or could not be reached; `data` carries its error body. */
const RELAY_ERROR = -32000;

export interface BridgeOptions {
  /** base address of the service, e.g. http://127.0.0.1:8080 */
  url: URL;
  key: string;
  stdin?: Readable;
  stdout?: Writable;
  log?: (line: string) => void;
}

/** Relays until stdin ends; resolves then. */
export async function bridgeStdio({ url, key, stdin, stdout, log = () => {} }: BridgeOptions): Promise<void> {
  const local = new StdioServerTransport(stdin, stdout);
  const remote = new StreamableHTTPClientTransport(new URL('/mcp', url), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
  });
  const initializing = new Set<RequestId>();

  remote.onmessage = (message: JSONRPCMessage) => {
    // The version the two ends agreed on goes on every later request, as the SDK's own client does.
    if (isJSONRPCResultResponse(message) && initializing.delete(message.id)) {
      const version = (message.result as { protocolVersion?: unknown }).protocolVersion;
      if (typeof version === 'string') remote.setProtocolVersion(version);
    }
    void local.send(message).catch((err: unknown) => log(`stdout: ${String(err)}`));
  };
  remote.onerror = (err) => log(`service: ${err.message}`);

  local.onmessage = (message: JSONRPCMessage) => {
    if (isJSONRPCRequest(message) && message.method === 'initialize') initializing.add(message.id);
    remote.send(message).catch((err: unknown) => {
      const { status, body } = describe(err);
      log(`service refused ${isJSONRPCRequest(message) ? message.method : 'a message'}: ${status ?? ''} ${JSON.stringify(body)}`);
      if (!isJSONRPCRequest(message)) return;
      const reason = body.error?.code ? `${body.error.code}: ${body.error.message ?? ''}` : String(body.error?.message ?? 'unreachable');
      void local.send({ jsonrpc: '2.0', id: message.id, error: { code: RELAY_ERROR, message: reason, data: body } });
    });
  };

  const closed = new Promise<void>((resolve) => (local.onclose = resolve));
  await remote.start();
  await local.start();
  (stdin ?? process.stdin).once('end', () => void local.close());
  await closed;
  await remote.close();
}

interface ErrorBody {
  ok: false;
  error?: { code?: string; message?: string };
  status?: number;
}

/** The service's error body from a failed POST (the SDK puts it in the message), or a description of the failure. */
function describe(err: unknown): { status: number | undefined; body: ErrorBody } {
  const message = err instanceof Error ? err.message : String(err);
  const status = err instanceof StreamableHTTPError ? err.code : undefined;
  const json = /(\{.*\})\s*$/s.exec(message)?.[1];
  if (json !== undefined) {
    try {
      const parsed = JSON.parse(json) as ErrorBody;
      if (parsed && typeof parsed === 'object') return { status, body: status === undefined ? parsed : { ...parsed, status } };
    } catch {
      /* not the service's JSON */
    }
  }
  return { status, body: { ok: false, error: { code: status === undefined ? 'unavailable' : 'internal', message } } };
}
