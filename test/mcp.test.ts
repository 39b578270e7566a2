import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { EventSchema } from '../src/core/event-schema.ts';
import { CreateProjectSchema } from '../src/engine/project-input.ts';
import { QUERY_SCHEMAS } from '../src/http/query-schemas.ts';
import { FunnelBodySchema, QueryBodySchema } from '../src/core/query/schema.ts';
import { api, createProject, startTestService, todayUtc, type CreatedProject, type TestService } from './helpers.ts';

/**
 * The MCP tool server, driven by the SDK's own client over both transports: Streamable HTTP at /mcp, and stdio through
 * `analytics mcp` (a real child process relaying to the same service). Every assertion runs on both.
 */

const BIN = fileURLToPath(new URL('../bin/analytics.js', import.meta.url));

type Transport = 'http' | 'stdio';

let svc: TestService;
let project: CreatedProject;
const clients: Client[] = [];

before(async () => {
  svc = await startTestService();
  project = await createProject(svc.url, svc.adminKey, { name: 'Agents' });
});
after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await svc.destroy();
});

/** One client per transport and key: each stdio client is a process, and a key's answers do not depend on its client. */
const connected = new Map<string, Promise<Client>>();
function connect(transport: Transport, key: string): Promise<Client> {
  const id = `${transport} ${key}`;
  let client = connected.get(id);
  if (!client) {
    client = newClient(transport, key);
    connected.set(id, client);
    client.catch(() => connected.delete(id));
  }
  return client;
}

async function newClient(transport: Transport, key: string): Promise<Client> {
  const client = new Client({ name: 'analytics-test', version: '1.0.0' });
  if (transport === 'http') {
    await client.connect(new StreamableHTTPClientTransport(new URL('/mcp', svc.url), { requestInit: { headers: { authorization: `Bearer ${key}` } } }));
  } else {
    await client.connect(new StdioClientTransport({ command: process.execPath, args: [BIN, 'mcp', '--url', svc.url, '--key', key], stderr: 'pipe' }));
  }
  clients.push(client);
  return client;
}

/** A read-only (rk_) key of the shared project, made once. */
let readOnly: Promise<string> | undefined;
function readKey(): Promise<string> {
  readOnly ??= api(svc.url, `/projects/${project.project.id}/keys`, { key: svc.adminKey, body: { type: 'read' } }).then((r) => {
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.key as string;
  });
  return readOnly;
}

async function call(client: Client, name: string, args: Record<string, unknown>): Promise<CallToolResult> {
  return (await client.callTool({ name, arguments: args })) as CallToolResult;
}

/** The `{ ok: false, error }` body a refused tool call carries, after checking it is marked as an error. */
function refusal(result: CallToolResult): { code: string; message: string; details?: Array<{ path: string }> } {
  assert.equal(result.isError, true, JSON.stringify(result));
  const body = result.structuredContent as { ok: false; error: { code: string; message: string } };
  assert.equal(body.ok, false);
  assert.deepEqual(JSON.parse((result.content[0] as { text: string }).text), body, 'the text content is the same JSON');
  return body.error;
}

function value<T = any>(result: CallToolResult): T {
  assert.notEqual(result.isError, true, JSON.stringify(result));
  return result.structuredContent as T;
}

const jsonSchema = (schema: z.ZodType) => {
  const { $schema: _drop, ...rest } = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  return rest;
};

for (const transport of ['http', 'stdio'] as const) {
  describe(`MCP over ${transport === 'http' ? 'Streamable HTTP at /mcp' : 'stdio (analytics mcp)'}`, () => {
    test('lists the tools the key\'s scope allows, each with the HTTP face\'s input schema', async () => {
      const names = async (key: string) => (await (await connect(transport, key)).listTools()).tools.map((t) => t.name).sort();
      assert.deepEqual(await names(svc.adminKey), ['create_project', 'funnel', 'get_metrics', 'get_realtime', 'list_projects', 'query']);
      assert.deepEqual(await names(project.keys.secret), ['funnel', 'get_metrics', 'get_realtime', 'list_projects', 'query', 'track_event']);
      assert.deepEqual(await names(project.keys.publishable), ['track_event']);
      assert.deepEqual(await names(await readKey()), ['funnel', 'get_metrics', 'get_realtime', 'query']);

      const admin = await connect(transport, svc.adminKey);
      const tools = Object.fromEntries((await admin.listTools()).tools.map((t) => [t.name, t]));
      assert.deepEqual(tools.create_project!.inputSchema, jsonSchema(CreateProjectSchema));
      assert.deepEqual(tools.get_metrics!.inputSchema, jsonSchema(QUERY_SCHEMAS['/metrics'].GET));
      assert.deepEqual(tools.get_realtime!.inputSchema, jsonSchema(QUERY_SCHEMAS['/metrics/realtime'].GET));
      assert.deepEqual(tools.list_projects!.inputSchema, jsonSchema(QUERY_SCHEMAS['/projects'].GET));
      assert.deepEqual(tools.query!.inputSchema, jsonSchema(QueryBodySchema));
      assert.deepEqual(tools.funnel!.inputSchema, jsonSchema(FunnelBodySchema));
      assert.equal(tools.get_metrics!.annotations?.readOnlyHint, true);
      // the question tools answer with the engine's rules: a bad name is refused naming it
      const refusedQuery = refusal(await call(admin, 'query', { projectId: project.project.id, metrics: ['sessions'] }));
      assert.equal(refusedQuery.code, 'invalid_request');
      assert.match(refusedQuery.message, /sessions/);
      const refusedFunnel = refusal(await call(admin, 'funnel', { projectId: project.project.id, steps: [{ page: '/' }, 'No such goal'] }));
      assert.equal(refusedFunnel.code, 'invalid_request');
      assert.match(refusedFunnel.message, /No such goal/);
      const sk = await connect(transport, project.keys.secret);
      const track = (await sk.listTools()).tools.find((t) => t.name === 'track_event')!;
      assert.deepEqual(track.inputSchema, jsonSchema(EventSchema));
    });

    test('track_event stores an event that get_metrics counts, with exactly the figures GET /metrics answers', async () => {
      const p = await createProject(svc.url, svc.adminKey, { name: `counted over ${transport}` });
      const sk = await connect(transport, p.keys.secret);
      const sent = value(await call(sk, 'track_event', { event: 'page_view', url: 'https://shop.example/pricing', sessionId: 's1', eventId: 'e1' }));
      assert.equal(sent.ok, true);
      assert.equal(sent.accepted, 1);
      assert.equal(typeof sent.ts, 'number');
      // a repeat of the eventId is acknowledged and counted once, by the engine's rule
      value(await call(sk, 'track_event', { event: 'page_view', url: 'https://shop.example/pricing', sessionId: 's1', eventId: 'e1' }));
      const pk = await connect(transport, p.keys.publishable);
      value(await call(pk, 'track_event', { event: 'signup', sessionId: 's2', eventParams: { plan: 'pro' } }));

      const figures = value(await call(sk, 'get_metrics', { date: todayUtc() }));
      assert.equal(figures.pageviews, 1);
      assert.equal(figures.sessions, 2);
      assert.deepEqual(figures.events, { page_view: 1, signup: 1 });
      assert.deepEqual(figures.pages, { '/pricing': 1 });
      const http = await api(svc.url, `/metrics?date=${todayUtc()}`, { key: p.keys.secret });
      assert.deepEqual(figures, http.body);

      const admin = await connect(transport, svc.adminKey);
      const ranged = value(await call(admin, 'get_metrics', { projectId: p.project.id, from: todayUtc(), to: todayUtc() }));
      assert.equal(ranged.pageviews, 1);
      // compare, as GET /metrics answers it
      const compared = value(await call(sk, 'get_metrics', { date: todayUtc(), compare: 'previous' }));
      assert.equal(compared.compare.pageviews, 0);
      assert.deepEqual(compared, (await api(svc.url, `/metrics?date=${todayUtc()}&compare=previous`, { key: p.keys.secret })).body);
      const lastYear = value(await call(admin, 'get_metrics', { projectId: p.project.id, date: todayUtc(), compare: 'year' }));
      assert.equal(lastYear.compare.from.slice(0, 4), String(Number(todayUtc().slice(0, 4)) - 1));
      // realtime: the page views of the last 30 minutes, as GET /metrics/realtime answers
      const now = value(await call(sk, 'get_realtime', {}));
      assert.equal(now.projectId, p.project.id);
      assert.equal(now.pageviews, 1);
      assert.equal(now.perMinute.length, 30);
      assert.deepEqual(now.pages, { '/pricing': 1 });
      const httpNow = await api(svc.url, '/metrics/realtime', { key: p.keys.secret });
      assert.deepEqual({ ...now, perMinute: undefined }, { ...httpNow.body, perMinute: undefined });
      assert.equal(value(await call(admin, 'get_realtime', { projectId: p.project.id })).pageviews, 1);
    });

    test('create_project with an admin key answers working keys; list_projects shows what each key may see', async () => {
      const admin = await connect(transport, svc.adminKey);
      const created = value(await call(admin, 'create_project', { name: `made over ${transport}`, allowed_origins: ['https://made.example'], allowed_referrers: [] }));
      assert.match(created.keys.secret, /^sk_/);
      assert.deepEqual(created.project.allowed_origins, ['https://made.example']);
      const sent = await api(svc.url, '/analytics', { key: created.keys.secret, body: { event: 'hello' } });
      assert.equal(sent.status, 200);

      const all = value(await call(admin, 'list_projects', {}));
      assert.ok(all.projects.some((p: { id: string }) => p.id === created.project.id));
      const own = value(await call(await connect(transport, created.keys.secret), 'list_projects', {}));
      assert.deepEqual(own.projects.map((p: { id: string }) => p.id), [created.project.id]);
      // paging as GET /projects pages: the same limit and cursor, the same pages
      const first = value(await call(admin, 'list_projects', { limit: '1' }));
      assert.equal(first.projects.length, 1);
      const second = value(await call(admin, 'list_projects', { limit: '1', cursor: first.next_cursor }));
      const http = await api(svc.url, `/projects?limit=1&cursor=${encodeURIComponent(first.next_cursor)}`, { key: svc.adminKey });
      assert.deepEqual(second, http.body);
      assert.equal(refusal(await call(admin, 'list_projects', { limit: 'ten' })).code, 'invalid_request');
    });

    test('refuses what the key may not do, with the error codes of the HTTP face', async () => {
      const admin = await connect(transport, svc.adminKey);
      const sk = await connect(transport, project.keys.secret);
      const pk = await connect(transport, project.keys.publishable);
      // tools not listed for the key are refused by the engine's own rules
      assert.equal(refusal(await call(admin, 'track_event', { event: 'x' })).code, 'forbidden');
      assert.equal(refusal(await call(pk, 'get_metrics', {})).code, 'forbidden');
      assert.equal(refusal(await call(pk, 'list_projects', {})).code, 'forbidden');
      assert.equal(refusal(await call(sk, 'create_project', { allowed_origins: [], allowed_referrers: [] })).code, 'forbidden');
      assert.equal(refusal(await call(sk, 'get_metrics', { projectId: 'p_someoneelse' })).code, 'forbidden');
      assert.equal(refusal(await call(sk, 'no_such_tool', {})).code, 'not_found');
      const rk = await connect(transport, await readKey());
      assert.equal(refusal(await call(rk, 'track_event', { event: 'x' })).code, 'forbidden');
      assert.equal(value(await call(rk, 'get_metrics', {})).projectId, project.project.id);
      // bad input: the same codes, messages and field paths as over HTTP
      const badEvent = refusal(await call(sk, 'track_event', { event: 'page_view' }));
      assert.equal(badEvent.code, 'invalid_event');
      const httpBad = await api(svc.url, '/analytics', { key: project.keys.secret, body: { event: 'page_view' } });
      assert.deepEqual(badEvent, httpBad.body.error);
      const unknown = refusal(await call(sk, 'get_metrics', { period: '7d' }));
      assert.equal(unknown.code, 'invalid_request');
      assert.match(unknown.message, /period/);
      assert.equal(refusal(await call(sk, 'get_metrics', { from: '2026-02-10', to: '2026-02-01' })).code, 'invalid_request');
      assert.equal(refusal(await call(sk, 'get_metrics', { compare: 'lastweek' })).code, 'invalid_request');
      assert.equal(refusal(await call(pk, 'get_realtime', {})).code, 'forbidden');
      assert.equal(refusal(await call(admin, 'get_realtime', {})).code, 'invalid_request', 'admin keys must name the project');
      assert.equal(refusal(await call(admin, 'get_metrics', {})).code, 'invalid_request', 'admin keys must name the project');
      const badProject = refusal(await call(admin, 'create_project', { allowed_origins: ['not an origin'], allowed_referrers: [] }));
      assert.equal(badProject.code, 'invalid_request');
      assert.equal(badProject.details?.[0]?.path, 'allowed_origins.0');
      // nothing refused was stored
      const figures = await api(svc.url, `/metrics?date=${todayUtc()}`, { key: project.keys.secret });
      assert.equal(figures.body.pageviews, 0);
    });

    test('a missing or unknown key is refused before any tool is shown (401 unauthorized)', async () => {
      const unknownKey = `sk_${'x'.repeat(32)}`;
      if (transport === 'http') {
        await assert.rejects(connect('http', unknownKey), (err: Error & { code?: number }) => err.code === 401 && /unauthorized/.test(err.message));
        const noKey = await fetch(new URL('/mcp', svc.url), {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
        });
        assert.equal(noKey.status, 401);
        assert.equal(((await noKey.json()) as { error: { code: string } }).error.code, 'unauthorized');
        const called = await fetch(new URL('/mcp', svc.url), {
          method: 'POST',
          headers: { authorization: `Bearer ${project.keys.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'list_projects', arguments: {} } }),
        });
        assert.equal(called.status, 200);
        assert.match(called.headers.get('ratelimit-remaining') ?? '', /^\d+$/, 'a tool call carries RateLimit-* like every authenticated answer');
        await called.text();
        const get = await fetch(new URL('/mcp', svc.url), { headers: { authorization: `Bearer ${svc.adminKey}` } });
        const query = await fetch(new URL('/mcp?session=1', svc.url), {
          method: 'POST',
          headers: { authorization: `Bearer ${svc.adminKey}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
        });
        assert.equal(query.status, 400, 'an unknown query parameter, as on every JSON endpoint');
        assert.equal(((await query.json()) as { error: { code: string } }).error.code, 'invalid_request');
        assert.equal(get.status, 405, 'no server-to-client stream: every answer comes with its request');
        assert.equal(get.headers.get('allow'), 'POST, OPTIONS');
        // A browser MCP client on another origin: its preflight must allow the header it sends after initialize.
        const preflight = await fetch(new URL('/mcp', svc.url), {
          method: 'OPTIONS',
          headers: { origin: 'https://agent.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type, mcp-protocol-version' },
        });
        assert.equal(preflight.status, 204);
        assert.equal(preflight.headers.get('access-control-allow-origin'), 'https://agent.example');
        const allowed = (preflight.headers.get('access-control-allow-headers') ?? '').toLowerCase().split(/\s*,\s*/);
        for (const h of ['authorization', 'content-type', 'mcp-protocol-version']) assert.ok(allowed.includes(h), `preflight allows ${h}: ${allowed.join(', ')}`);
      } else {
        await assert.rejects(connect('stdio', unknownKey), /unauthorized: unknown or revoked API key/);
        // nothing listens on port 1: the relay answers initialize with an error instead of hanging
        const nowhere = new Client({ name: 'analytics-test', version: '1.0.0' });
        await assert.rejects(
          nowhere.connect(new StdioClientTransport({ command: process.execPath, args: [BIN, 'mcp', '--url', 'http://127.0.0.1:1', '--key', unknownKey], stderr: 'pipe' })),
          /unavailable: /,
        );
        await nowhere.close();
      }
    });
  });
}

test('analytics mcp without --url or with a bad one is a usage error (exit 2)', async () => {
  const { spawnSync } = await import('node:child_process');
  const missing = spawnSync(process.execPath, [BIN, 'mcp', '--key', 'sk_x'], { encoding: 'utf8', env: { PATH: process.env.PATH ?? '' } });
  assert.equal(missing.status, 2);
  assert.match(missing.stderr, /--url/);
  const bad = spawnSync(process.execPath, [BIN, 'mcp', '--url', 'ftp://x', '--key', 'sk_x'], { encoding: 'utf8', env: { PATH: process.env.PATH ?? '' } });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /http\(s\)/);
});
