import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as clientLimits from '../clients/typescript/src/limits.ts';
import * as serviceLimits from '../src/core/limits.ts';
import { api, createProject, startTestService, type CreatedProject, type TestService } from './helpers.ts';

/**
 * The TypeScript client as a user gets it: packed with `npm pack`, installed from the tarball into an empty project,
 * imported from plain Node JavaScript and type-checked by a strict `tsc` project with default module settings, then
 * sending events to a real service.
 */

const run = promisify(execFile);
const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const PKG_DIR = path.join(ROOT, 'clients/typescript');
const TSC = path.join(ROOT, 'node_modules/.bin/tsc');
/** npm and tsc start-up on a loaded 2-core machine. */
const STEP_TIMEOUT_MS = 120_000;

let work: string;
let consumer: string;
let service: TestService;
let project: CreatedProject;

before(async () => {
  work = mkdtempSync(path.join(tmpdir(), 'analytics-client-pkg-'));
  consumer = path.join(work, 'consumer');
  // `npm pack` runs the package's prepack (tsc) and writes the tarball a registry would hold.
  const packed = await run('npm', ['pack', '--json', '--pack-destination', work], { cwd: PKG_DIR, timeout: STEP_TIMEOUT_MS });
  const [info] = JSON.parse(packed.stdout.slice(packed.stdout.indexOf('['))) as Array<{ filename: string; files: Array<{ path: string }> }>;
  const tarball = path.join(work, info!.filename);
  writeFileSync(path.join(work, 'files.json'), JSON.stringify(info!.files.map((f) => f.path)));
  await run('mkdir', ['-p', consumer]);
  writeFileSync(path.join(consumer, 'package.json'), JSON.stringify({ name: 'consumer', version: '1.0.0', private: true, type: 'module' }));
  await run('npm', ['install', tarball, '--offline', '--no-audit', '--no-fund', '--ignore-scripts'], { cwd: consumer, timeout: STEP_TIMEOUT_MS });
  service = await startTestService();
  project = await createProject(service.url, service.adminKey, { name: 'client package' });
});

after(async () => {
  await service?.destroy();
  if (work) rmSync(work, { recursive: true, force: true });
});

test('the client copies the service limits it checks, with the same values', () => {
  const ours = Object.entries(clientLimits);
  assert.ok(ours.length >= 10);
  for (const [name, value] of ours) {
    assert.equal(value, (serviceLimits as Record<string, unknown>)[name], `${name} differs from src/core/limits.ts`);
  }
});

test('the client package imports nothing from outside itself and nothing from node:', () => {
  const src = path.join(PKG_DIR, 'src');
  for (const file of readdirSync(src)) {
    const text = readFileSync(path.join(src, file), 'utf8');
    const specs = [...text.matchAll(/^(?:import|export)\b[^;]*?\bfrom\s+'([^']+)'/gms), ...text.matchAll(/\bimport\s*\(\s*'([^']+)'/g)];
    for (const [, spec] of specs) {
      assert.match(spec!, /^\.\/[a-z-]+\.js$/, `${file} imports ${spec}`);
    }
  }
});

test('the packed tarball holds compiled ESM and declarations only, and has no dependencies', () => {
  const files = JSON.parse(readFileSync(path.join(work, 'files.json'), 'utf8')) as string[];
  assert.ok(files.includes('dist/index.js') && files.includes('dist/index.d.ts'), files.join(' '));
  for (const f of files) assert.match(f, /^(package\.json|README\.md|dist\/[a-z-]+\.(js|d\.ts))$/, `unexpected file in the tarball: ${f}`);
  const installed = JSON.parse(readFileSync(path.join(consumer, 'node_modules/@privacy-analytics/client/package.json'), 'utf8'));
  assert.equal(installed.type, 'module');
  assert.equal(installed.dependencies, undefined);
  assert.deepEqual(readdirSync(path.join(consumer, 'node_modules')).sort(), ['.package-lock.json', '@privacy-analytics']);
});

test('plain Node JavaScript imports the installed package and its events are counted by a real service', async () => {
  writeFileSync(
    path.join(consumer, 'send.mjs'),
    `import { createClient, InvalidEventError } from '@privacy-analytics/client';
const analytics = createClient({ apiKey: process.env.KEY, projectId: process.env.PROJECT, endpoint: process.env.ENDPOINT });
for (let i = 0; i < 30; i++) analytics.pageView({ url: '/docs/' + i, sessionId: 's' + (i % 3) });
analytics.track('signup', { plan: 'pro' }, { url: '/signup', sessionId: 's0' });
let refused = false;
try { analytics.track('', {}); } catch (e) { refused = e instanceof InvalidEventError; }
await analytics.shutdown();
console.log(JSON.stringify({ refused, stats: analytics.stats() }));
`,
  );
  const out = await run('node', ['send.mjs'], {
    cwd: consumer,
    timeout: STEP_TIMEOUT_MS,
    env: { ...process.env, KEY: project.keys.secret, PROJECT: project.project.id, ENDPOINT: `${service.url}/analytics` },
  });
  const result = JSON.parse(out.stdout) as { refused: boolean; stats: { sent: number } };
  assert.equal(result.refused, true);
  assert.equal(result.stats.sent, 31);
  const m = await api(service.url, '/metrics', { key: project.keys.secret });
  assert.equal(m.status, 200);
  assert.equal(m.body.pageviews, 30);
  assert.equal(m.body.sessions, 3);
  assert.equal(m.body.events.signup, 1);
});

test('a strict tsc project with default module settings type-checks against the installed declarations', async () => {
  writeFileSync(path.join(consumer, 'tsconfig.json'), JSON.stringify({ compilerOptions: { strict: true, noEmit: true }, files: ['check.ts'] }));
  writeFileSync(
    path.join(consumer, 'check.ts'),
    `import { createClient, type AnalyticsClient, type ClientStats, InvalidEventError } from '@privacy-analytics/client';
const analytics: AnalyticsClient = createClient({ apiKey: 'sk_x', projectId: 'p_x', endpoint: 'https://a.example/analytics' });
const id: string = analytics.track('signup', { plan: 'pro', seats: 3 });
const stats: ClientStats = analytics.stats();
const e: Error = new InvalidEventError('event', 'bad');
// @ts-expect-error parameters are scalars: the declarations are real types, not any
analytics.track('signup', { plan: { nested: true } });
export { id, stats, e };
`,
  );
  try {
    await run(TSC, ['-p', '.'], { cwd: consumer, timeout: STEP_TIMEOUT_MS });
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    assert.fail(`tsc failed:\n${e.stdout ?? ''}${e.stderr ?? ''}`);
  }
});

test("the repository's own `privacy-analytics/client` export resolves to the built package from plain Node", async () => {
  // before() ran `npm pack`, whose prepack built clients/typescript/dist, as `npm run build:client` does.
  const out = await run('node', ['--input-type=module', '-e', "import { createClient } from 'privacy-analytics/client'; console.log(typeof createClient);"], {
    cwd: ROOT,
    timeout: STEP_TIMEOUT_MS,
  });
  assert.equal(out.stdout.trim(), 'function');
});
