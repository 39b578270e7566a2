import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult, type Tool } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { failure, type AnalyticsEngine, type KeyIdentity, type Outcome, type RateInfo, type RequestMeta } from '../engine/types.ts';
import { TOOLS, toolsFor, type ToolDefinition } from './tools.ts';

/**
 * One MCP server for one caller: the tools its key is shown, each answering with the engine's Outcome. Built per
 * HTTP request (the endpoint is stateless), so the key, origin and client address of that request are the ones the
 * engine judges.
 */

export const MCP_SERVER_NAME = 'privacy-analytics';

/** JSON Schema of a tool's input, as agents read it: the zod schema's input side, without the $schema URI. */
function inputJsonSchema(tool: ToolDefinition): Tool['inputSchema'] {
  const { $schema: _ignored, ...schema } = z.toJSONSchema(tool.input, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  return { ...schema, type: 'object' } as Tool['inputSchema'];
}

/** An Outcome as a tool result: the HTTP answer's JSON, and `isError` with `{ ok: false, error: { code, ... } }` on refusal. */
export function toolResult(out: Outcome<unknown>): CallToolResult {
  if (out.ok) {
    const value = out.value as Record<string, unknown>;
    return { content: [{ type: 'text', text: JSON.stringify(value) }], structuredContent: value };
  }
  const body = { ok: false, error: out.error };
  return { isError: true, content: [{ type: 'text', text: JSON.stringify(body) }], structuredContent: body };
}

/**
 * @param onRate told the caller's rate-limit state after each tool call, so the HTTP face can send RateLimit-* on
 *   /mcp answers as on every authenticated endpoint
 */
export function createMcpServer(
  engine: AnalyticsEngine,
  meta: RequestMeta,
  who: KeyIdentity,
  version: string,
  onRate: (rate: RateInfo) => void = () => {},
): Server {
  const server = new Server({ name: MCP_SERVER_NAME, version }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: toolsFor(who.kind).map((t) => ({
      name: t.name,
      title: t.title,
      description: t.description,
      inputSchema: inputJsonSchema(t),
      annotations: { title: t.title, readOnlyHint: t.readOnly, destructiveHint: false, idempotentHint: t.readOnly, openWorldHint: false },
    })),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (request) => {
    const tool = TOOLS.find((t) => t.name === request.params.name);
    if (!tool) return toolResult(failure('not_found', `no tool "${request.params.name}"; tools/list names the ones this key may use`));
    const out = await tool.call(engine, meta, request.params.arguments ?? {});
    if (out.rate) onRate(out.rate);
    return toolResult(out);
  });
  return server;
}
