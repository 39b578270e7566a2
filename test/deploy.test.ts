import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { SERVICE_ENV, SERVICE_NODE_ARGS } from '../bin/dist.mjs';
import { buildRecipe } from '../deploy/container/run-recipe.ts';
import { api, createProject, startTestService, todayUtc } from './helpers.ts';

/**
 * deploy/: what can run on a machine without systemd as PID 1 and without a container engine is run for real; what
 * cannot is said in the skip message or in the recipe runner's "not run" list.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const UNIT = path.join(ROOT, 'deploy/systemd/analytics.service');
const NGINX_SITE = path.join(ROOT, 'deploy/reverse-proxy/nginx.conf');
const isRoot = process.getuid?.() === 0;
/** A uid no account uses here, standing in for systemd's DynamicUser (which allocates from 61184–65519). */
const DYNAMIC_UID = 61_234;
/** A first start compiles TypeScript through tsx on a loaded 2-core box. */
const START_DEADLINE_MS = 60_000;

const has = (tool: string) => spawnSync('sh', ['-c', `command -v ${tool}`]).status === 0;

const temps: string[] = [];
function tempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  chmodSync(dir, 0o755);
  temps.push(dir);
  return dir;
}
after(() => {
  for (const d of temps) rmSync(d, { recursive: true, force: true });
});

/** `Key=value` lines of a unit's [Service] section, in order (a key may repeat). */
function unitSettings(text: string): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  let section = '';
  for (const line of text.split('\n')) {
    const s = /^\[(\w+)\]$/.exec(line.trim());
    if (s) section = s[1]!;
    const m = /^([A-Za-z]+)=(.*)$/.exec(line);
    if (m && section === 'Service') out.push([m[1]!, m[2]!]);
  }
  return out;
}

describe('the systemd unit', { skip: has('systemd-analyze') ? false : 'systemd-analyze is not installed here: the unit was not verified' }, () => {
  const text = readFileSync(UNIT, 'utf8');
  const settings = unitSettings(text);
  const get = (k: string) => settings.filter(([key]) => key === k).map(([, v]) => v);

  test('passes systemd-analyze verify with no warning', () => {
    const res = spawnSync('systemd-analyze', ['verify', UNIT], { encoding: 'utf8' });
    assert.equal(res.status, 0, res.stderr);
    assert.equal(res.stderr.trim(), '', 'verify printed warnings');
  });

  test('is hardened: DynamicUser, StateDirectory, ProtectSystem=strict, NoNewPrivileges, an exposure of at most 2.0', () => {
    assert.deepEqual(get('DynamicUser'), ['yes']);
    assert.deepEqual(get('StateDirectory'), ['analytics']);
    assert.deepEqual(get('ProtectSystem'), ['strict']);
    assert.deepEqual(get('NoNewPrivileges'), ['yes']);
    assert.deepEqual(get('CapabilityBoundingSet'), ['']);
    assert.ok(get('Environment').includes('ANALYTICS_DATA_DIR=%S/analytics'), 'the data directory is the StateDirectory');
    assert.ok(get('Environment').includes('TRUST_PROXY=1'), 'it runs behind the reverse-proxy example');
    // systemd's own score of the sandbox: 0 is locked down, 10 is unprotected; "OK" is below 4.
    const res = spawnSync('systemd-analyze', ['security', '--offline=true', '--threshold=20', UNIT], { encoding: 'utf8' });
    assert.equal(res.status, 0, `exposure above 2.0:\n${res.stdout.split('\n').slice(-3).join('\n')}`);
    assert.match(res.stdout, /Overall exposure level for analytics\.service: [01]\.\d/);
  });

  test('its ExecStart serves, as an unprivileged user writing only the state directory, and drains on KillSignal to exit 0', async (t) => {
    // The stand-in for the dynamic user must be able to read the checkout (a clone under a 0700 home cannot be).
    const asDynamicUser =
      isRoot && spawnSync('setpriv', [`--reuid=${DYNAMIC_UID}`, `--regid=${DYNAMIC_UID}`, '--clear-groups', '--', 'test', '-r', path.join(ROOT, 'src/main.ts')]).status === 0;
    if (!asDynamicUser) t.diagnostic(`ran as uid ${process.getuid?.()}: ${isRoot ? `uid ${DYNAMIC_UID} cannot read ${ROOT}` : 'not root, so no user switch'}`);
    const exec = get('ExecStart')[0]!.replaceAll('/opt/analytics', ROOT.replace(/\/$/, '')).split(' ');
    const state = tempDir('analytics-unit-');
    const stateDir = path.join(state, 'analytics');
    mkdirSync(stateDir, { mode: 0o700 });
    if (asDynamicUser) chownSync(stateDir, DYNAMIC_UID, DYNAMIC_UID);
    const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
    for (const e of get('Environment')) {
      const [k, v] = e.split(/=(.*)/s) as [string, string];
      env[k] = v.replace('%S', state);
    }
    // systemd would bind 8080/50051; here the kernel picks free ports, so parallel tests cannot collide
    Object.assign(env, { PORT: '0', GRPC_PORT: '0' });
    const argv = asDynamicUser ? ['setpriv', `--reuid=${DYNAMIC_UID}`, `--regid=${DYNAMIC_UID}`, '--clear-groups', '--', ...exec] : exec;
    const child = spawn(argv[0]!, argv.slice(1), { cwd: get('WorkingDirectory')[0]!.replace('/opt/analytics', ROOT), env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    try {
      const url = await waitFor(() => /HTTP (http:\/\/\S+)/.exec(out)?.[1], START_DEADLINE_MS, () => out);
      const health = await api(url, '/health');
      assert.equal(health.status, 200);
      assert.equal(health.body.status, 'ok');
      const keyFile = path.join(stateDir, 'admin.key');
      assert.ok(existsSync(keyFile), 'the admin key is written to the state directory');
      assert.equal(statSync(keyFile).mode & 0o777, 0o600);
      if (asDynamicUser) assert.equal(statSync(keyFile).uid, DYNAMIC_UID);
      child.kill(get('KillSignal')[0] as NodeJS.Signals);
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise((resolve) => (timer = setTimeout(() => resolve('timeout'), Number(get('TimeoutStopSec')[0]) * 1000)));
      const code = await Promise.race([exited, timeout]);
      clearTimeout(timer);
      assert.equal(code, 0, out);
    } finally {
      child.kill('SIGKILL');
    }
  });
});

/*
 * The container recipe's full run (npm ci, start as uid 1000, HEALTHCHECK, an event, a restart on the same volume)
 * is `node --import tsx deploy/container/run-recipe.ts`, a step of .ci/run: it takes 20-50 s, mostly npm ci. Here,
 * its shape and the runner's rules, without running the RUN steps.
 */
test('the container recipe is multi-stage, runs as a non-root user with its data in a volume and a HEALTHCHECK on /health', () => {
  const run = buildRecipe(ROOT, tempDir('analytics-recipe-'), { execute: false });
  assert.deepEqual(run.stages.map((s) => s.from), ['node:20-bookworm-slim', 'node:20-bookworm-slim']);
  const final = run.final;
  assert.equal(final.user, '1000:1000');
  assert.deepEqual(final.volumes, ['/data']);
  assert.equal(final.env.ANALYTICS_DATA_DIR, '/data');
  assert.equal(final.env.HOST, '0.0.0.0');
  assert.ok(final.healthcheck?.cmd.join(' ').includes('/health'));
  assert.deepEqual(final.cmd, ['node', ...SERVICE_NODE_ARGS, 'bin/analytics.js', 'serve']);
  assert.deepEqual(run.notRun.filter((r) => r.startsWith('RUN')), [
    'RUN npm ci --omit=dev --no-audit --no-fund (a dry build)',
    'RUN node bin/build.mjs (a dry build)',
    'RUN node bin/analytics.js --help > /dev/null (a dry build)',
    'RUN mkdir -p state && chmod 0700 state (a dry build)',
  ]);
  // the runtime stage copies only from the build stage, and the data directory with the user's ownership
  assert.ok(run.notRun.includes('COPY --from=build --chown=1000:1000 /app/state /data (its source comes from a RUN step of a dry build)'));
  assert.ok(run.ran.includes('COPY --from=build /app/src ./src'));
  assert.ok(run.notRun.includes('COPY --from=build /app/dist ./dist (its source comes from a RUN step of a dry build)'), run.notRun.join('\n'));
  assert.ok(existsSync(path.join(final.root, 'app/src/main.ts')));
});

test('every launcher gives the service the node flags and the environment of bin/dist.mjs', () => {
  const expected = Object.entries(SERVICE_ENV);
  assert.ok(SERVICE_NODE_ARGS.length > 0 && expected.length > 0);
  // npm start: `K=${K:-V} ... exec node FLAGS dist/main.js` (a variable set outside wins, as with the others)
  const start = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts.start!;
  for (const [k, v] of expected) assert.ok(start.includes(`${k}=\${${k}:-${v}}`), `npm start sets ${k}=${v}: ${start}`);
  assert.ok(start.includes(`exec node ${SERVICE_NODE_ARGS.join(' ')} dist/main.js`), `npm start passes ${SERVICE_NODE_ARGS.join(' ')}: ${start}`);
  // the systemd unit
  const unit = unitSettings(readFileSync(UNIT, 'utf8'));
  const environment = unit.filter(([k]) => k === 'Environment').map(([, v]) => v);
  for (const [k, v] of expected) assert.ok(environment.includes(`${k}=${v}`), `the unit sets ${k}=${v}`);
  const exec = unit.find(([k]) => k === 'ExecStart')![1].split(' ');
  assert.deepEqual(exec.slice(0, 1 + SERVICE_NODE_ARGS.length), ['/usr/bin/node', ...SERVICE_NODE_ARGS]);
  // the container image
  const final = buildRecipe(ROOT, tempDir('analytics-recipe-'), { execute: false }).final;
  for (const [k, v] of expected) assert.equal(final.env[k], v, `the image sets ${k}`);
  assert.deepEqual(final.cmd?.slice(0, 1 + SERVICE_NODE_ARGS.length), ['node', ...SERVICE_NODE_ARGS]);
});

test('the recipe runner refuses what it cannot run faithfully: unknown instructions and RUN steps outside WORKDIR', () => {
  const context = tempDir('analytics-recipe-context-');
  mkdirSync(path.join(context, 'deploy/container'), { recursive: true });
  const recipe = (text: string) => writeFileSync(path.join(context, 'deploy/container/Dockerfile'), text);
  recipe('FROM node:20-bookworm-slim\nWORKDIR /app\nRUN mkdir -p /data\n');
  assert.throws(() => buildRecipe(context, tempDir('analytics-recipe-')), /names \/data; RUN steps must stay inside WORKDIR/);
  recipe('FROM node:20-bookworm-slim\nADD https://example.com/x.tgz /app/\n');
  assert.throws(() => buildRecipe(context, tempDir('analytics-recipe-')), /does not know ADD/);
  recipe('FROM node:18-alpine\n');
  assert.throws(() => buildRecipe(context, tempDir('analytics-recipe-')), /builds on node:18-alpine, but this machine runs Node 20/);
});

describe('the nginx reverse-proxy example', { skip: has('nginx') && has('openssl') ? false : 'nginx or openssl is not installed here (.ci/run installs them): the example was not run' }, () => {
  test('serves HTTP, MCP and gRPC over TLS and hands the visitor address on to a service with TRUST_PROXY=1', async () => {
    const dir = tempDir('analytics-nginx-');
    const cert = path.join(dir, 'cert.pem');
    const certKey = path.join(dir, 'key.pem');
    const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost',
      '-addext', 'subjectAltName=DNS:localhost', '-keyout', certKey, '-out', cert], { encoding: 'utf8' });
    assert.equal(made.status, 0, made.stderr);

    const svc = await startTestService({ TRUST_PROXY: '1' });
    const port = await freePort();
    const service = new URL(svc.url);
    let site = readFileSync(NGINX_SITE, 'utf8');
    const swap = (from: string, to: string) => {
      assert.ok(site.includes(from), `the example no longer contains "${from}"`);
      site = site.replaceAll(from, to);
    };
    swap('server 127.0.0.1:8080;', `server 127.0.0.1:${service.port};`);
    swap('server 127.0.0.1:50051;', `server ${svc.grpcAddress};`);
    swap('listen 443 ssl http2;', `listen 127.0.0.1:${port} ssl http2;`);
    swap('listen [::]:443 ssl http2;', '');
    swap('/etc/letsencrypt/live/analytics.example.com/fullchain.pem', cert);
    swap('/etc/letsencrypt/live/analytics.example.com/privkey.pem', certKey);
    site = site.replace(/server \{\s*listen 80;[\s\S]*$/, ''); // the port-80 redirect needs root; nothing of ours is in it
    writeFileSync(path.join(dir, 'site.conf'), site);
    writeFileSync(path.join(dir, 'nginx.conf'), [
      'daemon off;', 'worker_processes 1;', `pid ${dir}/nginx.pid;`, `error_log ${dir}/error.log;`, 'events {}',
      'http {', `  access_log off;`, `  client_body_temp_path ${dir}/body;`, `  proxy_temp_path ${dir}/proxy;`,
      `  fastcgi_temp_path ${dir}/fcgi;`, `  uwsgi_temp_path ${dir}/uwsgi;`, `  scgi_temp_path ${dir}/scgi;`,
      `  include ${dir}/site.conf;`, '}',
    ].join('\n'));
    const checked = spawnSync('nginx', ['-t', '-p', dir, '-c', path.join(dir, 'nginx.conf')], { encoding: 'utf8' });
    assert.equal(checked.status, 0, checked.stderr);
    const nginx = spawn('nginx', ['-p', dir, '-c', path.join(dir, 'nginx.conf')], { stdio: 'ignore' });
    const stopped = new Promise((resolve) => nginx.once('exit', resolve));
    try {
      const get = (route: string, init: { method?: string; headers?: Record<string, string>; body?: string } = {}) =>
        httpsJson(`https://localhost:${port}${route}`, cert, init);
      const health = await waitFor(async () => {
        try {
          return await get('/health');
        } catch {
          return undefined;
        }
      }, 10_000);
      assert.equal(health.status, 200);

      const project = await createProject(svc.url, svc.adminKey);
      // A visitor at 8.8.8.8 as an outer proxy reports it; nginx appends its own peer (127.0.0.1); the service takes
      // the rightmost public hop, so the event counts in the visitor's country (the bundled database maps it to US).
      const sent = await get('/analytics', {
        method: 'POST',
        headers: { authorization: `Bearer ${project.keys.secret}`, 'content-type': 'application/json', 'x-forwarded-for': '8.8.8.8' },
        body: JSON.stringify({ event: 'page_view', url: '/through-nginx', sessionId: 'v1' }),
      });
      assert.equal(sent.status, 200, sent.text);
      assert.ok(sent.headers['ratelimit-remaining'], 'RateLimit-* headers pass through');
      const m = await api(svc.url, `/metrics?date=${todayUtc()}`, { key: project.keys.secret });
      assert.deepEqual(m.body.countries, { US: 1 });
      assert.deepEqual(m.body.pages, { '/through-nginx': 1 });

      // MCP through its unbuffered location: the tools of the key, as JSON-RPC over Streamable HTTP
      const mcp = await get('/mcp', {
        method: 'POST',
        headers: { authorization: `Bearer ${project.keys.secret}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      });
      assert.equal(mcp.status, 200, mcp.text);
      assert.ok((JSON.parse(mcp.text) as { result: { tools: Array<{ name: string }> } }).result.tools.some((t) => t.name === 'track_event'));

      // gRPC over the same TLS port, through grpc_pass
      const client = new grpc.Client(`localhost:${port}`, grpc.credentials.createSsl(readFileSync(cert)));
      const status = await new Promise<number>((resolve, reject) => {
        client.makeUnaryRequest('/grpc.health.v1.Health/Check', () => Buffer.alloc(0), (b: Buffer) => b, {}, (err, value) => {
          if (err) reject(err);
          else resolve(value![1]!); // HealthCheckResponse { status = 1 (SERVING) }: field 1, varint
        });
      });
      client.close();
      assert.equal(status, 1, 'grpc.health.v1 answers SERVING through nginx');
    } finally {
      nginx.kill('SIGQUIT');
      await stopped;
      await svc.destroy();
    }
  });
});

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function waitFor<T>(probe: () => T | undefined | Promise<T | undefined>, ms: number, explain: () => string = () => ''): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms\n${explain()}`);
    await sleep(50);
  }
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

function httpsJson(url: string, ca: string, init: { method?: string; headers?: Record<string, string>; body?: string }) {
  return new Promise<{ status: number; headers: Record<string, string | string[] | undefined>; text: string }>((resolve, reject) => {
    const req = httpsRequest(url, { method: init.method ?? 'GET', headers: init.headers, ca: readFileSync(ca) }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end(init.body);
  });
}
