import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import vm from 'node:vm';
import { build, type Metafile } from 'esbuild';
import { api, createProject, startTestService, todayUtc, type CreatedProject, type TestService } from './helpers.ts';

/**
 * The TypeScript client where only web APIs exist. examples/edge-worker.ts (a Workers-style fetch handler that ends
 * with ctx.waitUntil(analytics.flush())) is bundled with esbuild for the neutral platform, with the client package's
 * compiled ESM (what `npm run build:client` puts in dist/ and users install) in place of its source, then run in
 * workerd, the Workers runtime itself, and in a node:vm context that has web globals only, each sending to a real
 * service.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const WORKER = path.join(ROOT, 'examples/edge-worker.ts');
const WORKERD = path.join(ROOT, 'node_modules/.bin/workerd');
/** Requests per runtime: enough that events from concurrent requests share batches. */
const REQUESTS = 24;
/** Every fourth request also sends a custom event. */
const SIGNUP_EVERY = 4;
/** workerd starts in well under a second; a loaded CI box gets more. */
const START_DEADLINE_MS = 20_000;
/** waitUntil work finishes after the responses; how long to wait for the service to have counted it. */
const COUNT_DEADLINE_MS = 15_000;

let svc: TestService;
let work: string;
/** the client package compiled by its own tsconfig (ES2022, DOM lib, no Node types) */
let clientDist: string;
before(async () => {
  svc = await startTestService();
  work = mkdtempSync(path.join(tmpdir(), 'analytics-edge-'));
  clientDist = path.join(work, 'client-dist');
  const tsc = spawnSync(process.execPath, [path.join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', path.join(ROOT, 'clients/typescript'), '--outDir', clientDist], { encoding: 'utf8' });
  assert.equal(tsc.status, 0, `${tsc.stdout}${tsc.stderr}`);
});
after(async () => {
  await svc.destroy();
  rmSync(work, { recursive: true, force: true });
});

async function bundle(format: 'esm' | 'iife'): Promise<{ code: string; metafile: Metafile }> {
  const out = await build({
    entryPoints: [WORKER],
    bundle: true,
    platform: 'neutral', // no Node built-ins resolve: a `node:` import fails the build
    format,
    ...(format === 'iife' ? { globalName: 'edgeWorker' } : {}),
    target: 'es2022',
    write: false,
    metafile: true,
    logLevel: 'silent',
    plugins: [
      {
        name: 'client-package',
        setup(b) {
          b.onResolve({ filter: /clients\/typescript\/src\/index\.ts$/ }, () => ({ path: path.join(clientDist, 'index.js') }));
        },
      },
    ],
  });
  return { code: out.outputFiles[0]!.text, metafile: out.metafile };
}

/** The environment a worker gets: the service's ingestion URL and the project's key. */
function workerEnv(p: CreatedProject) {
  return { ANALYTICS_ENDPOINT: `${svc.url}/analytics`, ANALYTICS_KEY: p.keys.secret, ANALYTICS_PROJECT: p.project.id };
}

/** Polls the service until the project shows every page view the worker handled. */
async function countedFigures(p: CreatedProject): Promise<{ pageviews: number; sessions: number; events: Record<string, number>; pages: Record<string, number> }> {
  const deadline = Date.now() + COUNT_DEADLINE_MS;
  for (;;) {
    const m = await api(svc.url, `/metrics?date=${todayUtc()}`, { key: p.keys.secret });
    assert.equal(m.status, 200);
    if (m.body.pageviews >= REQUESTS || Date.now() > deadline) return m.body;
    await new Promise((r) => setTimeout(r, 100));
  }
}

function assertCounted(figures: Awaited<ReturnType<typeof countedFigures>>): void {
  assert.equal(figures.pageviews, REQUESTS);
  assert.equal(figures.sessions, REQUESTS, 'one session per request (its x-session-id)');
  assert.deepEqual(figures.events, { page_view: REQUESTS, signup: REQUESTS / SIGNUP_EVERY });
  assert.equal(Object.values(figures.pages).reduce((a, b) => a + b, 0), REQUESTS);
}

const requestPath = (i: number) => `/edge/${i % 3}${i % SIGNUP_EVERY === 0 ? '?signup=pro' : ''}`;

test('the client bundles for the neutral platform with no node: import and nothing left to import', async () => {
  const { code, metafile } = await bundle('esm');
  const inputs = Object.keys(metafile.inputs);
  const client = inputs.filter((i) => !i.endsWith('examples/edge-worker.ts'));
  assert.ok(client.some((i) => i.endsWith('client-dist/index.js')), 'the compiled client is in the bundle');
  assert.deepEqual(client.filter((i) => !/client-dist\/[a-z-]+\.js$/.test(i)), [], 'nothing but the example and the compiled package');
  assert.deepEqual(inputs.filter((i) => i.startsWith('node:') || i.includes('node_modules')), [], 'no Node built-in and no dependency');
  const [output] = Object.values(metafile.outputs);
  assert.deepEqual(output!.imports, [], 'the bundle imports nothing');
  assert.doesNotMatch(code, /["']node:[a-z_/]+["']/);
  assert.doesNotMatch(code, /\b(require\s*\(|process\.|Buffer\b|__dirname)/);
});

describe('in workerd (the Workers runtime)', { skip: existsSync(WORKERD) ? false : 'workerd is not installed (npm ci installs it as a dev dependency): not run' }, () => {
  let child: ChildProcess | undefined;
  let log = '';
  after(() => {
    child?.kill('SIGKILL');
  });

  test('events recorded in fetch handlers and flushed through ctx.waitUntil are counted by the service', async () => {
    const p = await createProject(svc.url, svc.adminKey, { name: 'workerd' });
    const { code } = await bundle('esm');
    writeFileSync(path.join(work, 'worker.js'), code);
    const port = await freePort();
    const env = workerEnv(p);
    writeFileSync(path.join(work, 'config.capnp'), `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .worker),
    # the service runs on loopback; workerd's default outbound network reaches public addresses only
    (name = "loopback", network = (allow = ["local"])),
  ],
  sockets = [ (name = "http", address = "127.0.0.1:${port}", http = (), service = "main") ],
);
const worker :Workerd.Worker = (
  modules = [ (name = "worker.js", esModule = embed "worker.js") ],
  compatibilityDate = "2025-09-01",
  globalOutbound = "loopback",
  bindings = [
${Object.entries(env).map(([k, v]) => `    (name = "${k}", text = ${JSON.stringify(v)}),`).join('\n')}
  ],
);
`);
    child = spawn(WORKERD, ['serve', path.join(work, 'config.capnp')], { cwd: work, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (c: Buffer) => (log += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (log += c.toString()));
    const base = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + START_DEADLINE_MS;
    // ready when its socket accepts (an HTTP probe would be a page view of its own)
    while (!(await accepts(port))) {
      if (Date.now() > deadline || child.exitCode !== null) assert.fail(`workerd did not start:\n${log}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const answers = await Promise.all(
      Array.from({ length: REQUESTS }, (_, i) =>
        fetch(`${base}${requestPath(i)}`, { headers: { 'x-session-id': `edge-${i}` } }).then(async (r) => ({ status: r.status, text: await r.text() })),
      ),
    );
    for (const a of answers) assert.equal(a.status, 200, `${a.text}\n${log}`);
    assertCounted(await countedFigures(p));
    // Each request's flush carried its own events: none waited on another request's I/O, which workerd reports
    // (and, in production, cancels) when that request's context ends first.
    assert.doesNotMatch(log, /cross-context|hanging promise|canceled/i, log);
    console.log('WORKERD LOG', log);
  });
});

test('in a node:vm context with web globals only, ctx.waitUntil(analytics.flush()) delivers every event', async () => {
  const p = await createProject(svc.url, svc.adminKey, { name: 'vm isolate' });
  const { code } = await bundle('iife');
  // What a web-only runtime offers, and nothing of Node's: no process, require, Buffer or module.
  const context = vm.createContext({
    fetch, Request, Response, Headers, URL, URLSearchParams, AbortController, AbortSignal, Event, EventTarget,
    setTimeout, clearTimeout, setInterval, clearInterval, queueMicrotask, structuredClone, atob, btoa,
    crypto: globalThis.crypto, TextEncoder, TextDecoder, console,
    Blob, ReadableStream, CompressionStream, DecompressionStream,
  });
  assert.equal(vm.runInContext('[typeof process, typeof require, typeof Buffer, typeof module].join()', context), 'undefined,undefined,undefined,undefined');
  vm.runInContext(code, context, { filename: 'edge-worker.js' });
  const worker = (context.edgeWorker as { default: { fetch(r: Request, env: object, ctx: { waitUntil(p: Promise<unknown>): void }): Promise<Response> } }).default;
  const pending: Promise<unknown>[] = [];
  const ctx = { waitUntil: (promise: Promise<unknown>) => void pending.push(promise) };
  const env = workerEnv(p);
  const responses = await Promise.all(
    Array.from({ length: REQUESTS }, (_, i) =>
      worker.fetch(new Request(`https://edge.example${requestPath(i)}`, { headers: { 'x-session-id': `vm-${i}` } }), env, ctx),
    ),
  );
  for (const r of responses) assert.equal(r.status, 200);
  assert.equal(pending.length, REQUESTS, 'every request handed its flush to waitUntil');
  // what the runtime does after the responses: wait for the handed-over promises; none may reject
  const settled = await Promise.allSettled(pending);
  assert.deepEqual(settled.filter((s) => s.status === 'rejected'), []);
  // flush() resolved: the events are already counted, no polling needed
  const m = await api(svc.url, `/metrics?date=${todayUtc()}`, { key: p.keys.secret });
  assertCounted(m.body);
});

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}
