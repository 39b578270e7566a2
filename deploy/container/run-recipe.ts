/**
 * Runs the container recipe (deploy/container/Dockerfile) without a container engine: every stage becomes a
 * directory, COPY copies into it, RUN runs there with the stage's ENV, and the final stage's CMD is started as its
 * USER (when this process may switch users), with its HEALTHCHECK run against it. CI has no container engine; this is
 * how the recipe's steps are exercised there. What cannot be reproduced is said, not faked: `notRun` lists it.
 *
 *   node --import tsx deploy/container/run-recipe.ts      # build, start, health-check, stop; prints a report
 *
 * The interpreter knows exactly the instructions the recipe uses and refuses any other, so the recipe cannot drift
 * past what CI checks. A RUN step may not name an absolute path (other than /dev/null): without an image it would run
 * against this machine's root.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The one recipe this runs, relative to the repository root (the build context). */
export const RECIPE = 'deploy/container/Dockerfile';
/** A first start compiles TypeScript through tsx and opens LMDB: seconds normally, much longer on a loaded CI box. */
const START_DEADLINE_MS = 60_000;
/** SIGTERM must drain, snapshot and exit well before `docker stop`'s default 10 s would SIGKILL. */
const STOP_DEADLINE_MS = 10_000;

export interface Stage {
  name: string;
  /** the stage's filesystem: container path p lives at root + p */
  root: string;
  workdir: string;
  env: Record<string, string>;
  user: string | undefined;
  volumes: string[];
  expose: string[];
  healthcheck: { options: Record<string, string>; cmd: string[] } | undefined;
  stopSignal: string | undefined;
  cmd: string[] | undefined;
  /** the image the stage starts FROM (not pulled: this machine's Node stands in for it) */
  from: string;
}

export interface RecipeRun {
  stages: Stage[];
  final: Stage;
  ran: string[];
  notRun: string[];
}

interface Instruction {
  op: string;
  args: string;
  line: number;
}

/** Joins continuation lines and drops comments: one entry per instruction. */
export function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    let line = lines[i]!;
    const start = i + 1;
    if (/^\s*(#|$)/.test(line)) continue;
    while (/\\\s*$/.test(line) && i + 1 < lines.length) {
      line = line.replace(/\\\s*$/, ' ') + lines[++i]!.trim();
    }
    const m = /^\s*([A-Za-z]+)\s+(.*)$/.exec(line);
    if (!m) throw new Error(`${RECIPE}:${start}: cannot parse "${line}"`);
    out.push({ op: m[1]!.toUpperCase(), args: m[2]!.trim(), line: start });
  }
  return out;
}

/** `--name=value` options at the start of an instruction's arguments. */
function takeOptions(args: string): { options: Record<string, string>; rest: string } {
  const options: Record<string, string> = {};
  let rest = args;
  for (let m = /^--([a-z-]+)=(\S+)\s+/.exec(rest); m; m = /^--([a-z-]+)=(\S+)\s+/.exec(rest)) {
    options[m[1]!] = m[2]!;
    rest = rest.slice(m[0].length);
  }
  return { options, rest };
}

function execForm(args: string, where: string): string[] {
  const parsed: unknown = JSON.parse(args);
  if (!Array.isArray(parsed) || !parsed.every((a) => typeof a === 'string')) throw new Error(`${where}: expected a JSON array of strings`);
  return parsed;
}

/** `KEY=value KEY2="value 2"` pairs (ENV). */
function envPairs(args: string, vars: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("([^"]*)"|\S*)/g)) out[m[1]!] = substitute(m[3] ?? m[2]!, vars);
  return out;
}

function substitute(s: string, vars: Record<string, string>): string {
  return s.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (_, a: string | undefined, b: string | undefined) => vars[(a ?? b)!] ?? '');
}

const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

/** Runs the recipe's build steps in `workDir` (one directory per stage) with `context` as the build context. */
export interface BuildOptions {
  log?: (line: string) => void;
  /** false: parse and copy, but list RUN steps as not run (a quick check of the recipe's shape and the runner's rules) */
  execute?: boolean;
}

export function buildRecipe(context: string, workDir: string, { log = () => {}, execute = true }: BuildOptions = {}): RecipeRun {
  const instructions = parseDockerfile(readFileSync(path.join(context, RECIPE), 'utf8'));
  const args: Record<string, string> = {};
  const stages: Stage[] = [];
  const ran: string[] = [];
  const notRun: string[] = [];
  let stage: Stage | undefined;
  const inStage = (p: string) => path.join(stage!.root, path.posix.resolve(stage!.workdir, p));

  for (const { op, args: raw, line } of instructions) {
    const where = `${RECIPE}:${line} ${op}`;
    if (op !== 'ARG' && op !== 'FROM' && !stage) throw new Error(`${where}: before any FROM`);
    switch (op) {
      case 'ARG': {
        const [name, value] = raw.split('=', 2) as [string, string | undefined];
        args[name] = value ?? '';
        break;
      }
      case 'FROM': {
        const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(raw);
        if (!m) throw new Error(`${where}: cannot parse`);
        const from = substitute(m[1]!, args);
        const name = m[2] ?? `stage-${stages.length}`;
        const root = path.join(workDir, name);
        mkdirSync(root, { recursive: true });
        chmodSync(root, 0o755);
        stage = { name, root, workdir: '/', env: {}, user: undefined, volumes: [], expose: [], healthcheck: undefined, stopSignal: undefined, cmd: undefined, from };
        stages.push(stage);
        const major = /^node:(\d+)/.exec(from)?.[1];
        if (major !== process.versions.node.split('.')[0]) {
          throw new Error(`${where}: the recipe builds on ${from}, but this machine runs Node ${process.versions.node}; the steps would not be the same`);
        }
        notRun.push(`FROM ${from} (stage ${name}): not pulled; this machine's Node ${process.versions.node} and npm stand in for the image`);
        break;
      }
      case 'WORKDIR':
        stage!.workdir = path.posix.resolve(stage!.workdir, raw);
        mkdirSync(inStage('.'), { recursive: true });
        break;
      case 'ENV':
        Object.assign(stage!.env, envPairs(raw, { ...args, ...stage!.env }));
        break;
      case 'COPY': {
        const { options, rest } = takeOptions(raw);
        const parts = rest.split(/\s+/);
        const dest = parts.pop()!;
        let skipped = false;
        for (const src of parts) {
          let from: string;
          if (options.from !== undefined) {
            const source = stages.find((s) => s.name === options.from);
            if (!source) throw new Error(`${where}: no stage ${options.from}`);
            from = path.join(source.root, path.posix.resolve(source.workdir, src));
          } else {
            from = path.join(context, src);
          }
          if (!execute && !existsSync(from)) {
            skipped = true; // made by a RUN step that a dry build does not run
            continue;
          }
          const to = dest.endsWith('/') || parts.length > 1 ? path.join(inStage(dest), path.basename(src)) : inStage(dest);
          mkdirSync(path.dirname(to), { recursive: true });
          cpSync(from, to, { recursive: true, verbatimSymlinks: true });
          if (options.chown !== undefined) {
            const [uid, gid] = options.chown.split(':').map(Number) as [number, number];
            if (isRoot()) chownTree(to, uid, gid ?? uid);
            else notRun.push(`${where} --chown=${options.chown}: this process is not root, so the files keep its owner`);
          }
        }
        if (skipped) notRun.push(`COPY ${raw} (its source comes from a RUN step of a dry build)`);
        else ran.push(`COPY ${raw}`);
        break;
      }
      case 'RUN': {
        const absolute = raw.split(/\s+/).find((w) => /^\/(?!dev\/null$)/.test(w));
        if (absolute) throw new Error(`${where}: names ${absolute}; RUN steps must stay inside WORKDIR so CI can run them without an image`);
        if (!execute) {
          notRun.push(`RUN ${raw} (a dry build)`);
          break;
        }
        log(`RUN ${raw}`);
        const started = Date.now();
        // prefer npm's local cache: CI has just run `npm ci` for the same lockfile, so nothing needs downloading
        const env = { ...process.env, ...stage!.env, npm_config_prefer_offline: 'true', npm_config_update_notifier: 'false' };
        const res = spawnSync('sh', ['-c', raw], { cwd: inStage('.'), env, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
        if (res.status !== 0) throw new Error(`${where} failed (exit ${res.status ?? res.signal}):\n${res.stdout}\n${res.stderr}`);
        ran.push(`RUN ${raw} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
        break;
      }
      case 'USER':
        stage!.user = raw;
        break;
      case 'VOLUME':
        stage!.volumes.push(...(raw.startsWith('[') ? execForm(raw, where) : raw.split(/\s+/)));
        break;
      case 'EXPOSE':
        stage!.expose.push(...raw.split(/\s+/));
        break;
      case 'HEALTHCHECK': {
        const { options, rest } = takeOptions(raw);
        const m = /^CMD\s+(.*)$/.exec(rest);
        if (!m) throw new Error(`${where}: expected CMD [...]`);
        stage!.healthcheck = { options, cmd: execForm(m[1]!, where) };
        break;
      }
      case 'STOPSIGNAL':
        stage!.stopSignal = raw;
        break;
      case 'CMD':
        stage!.cmd = execForm(raw, where);
        break;
      default:
        throw new Error(`${where}: this runner does not know ${op}; teach it (and CI) before the recipe uses it`);
    }
  }
  if (!stage) throw new Error(`${RECIPE}: no FROM`);
  notRun.push('the image itself: no layers, no registry push; the network and PID namespaces of a container');
  return { stages, final: stage, ran, notRun };
}

function chownTree(p: string, uid: number, gid: number): void {
  chownSync(p, uid, gid);
  if (statSync(p).isDirectory()) for (const e of readdirSync(p)) chownTree(path.join(p, e), uid, gid);
}

export interface StartedImage {
  child: ChildProcess;
  /** the HTTP base address the service printed */
  url: string;
  /** the host directory standing in for each VOLUME */
  volumeDir: (volume: string) => string;
  output: () => string;
  /** runs the HEALTHCHECK CMD as the image would; resolves to its exit code */
  healthcheck(): Promise<number>;
  /** sends STOPSIGNAL and resolves to the exit code */
  stop(): Promise<number | null>;
}

/**
 * Starts the final stage's CMD from its WORKDIR with its ENV, as its USER when this process is root. Container
 * paths in ENV values (the data directory in the volume) point into the stage's root; ports are 0 (what `-p` would
 * map), bound to loopback.
 */
export async function startImage(run: RecipeRun): Promise<StartedImage> {
  const s = run.final;
  if (!s.cmd) throw new Error(`${RECIPE}: the final stage has no CMD`);
  const volumeDir = (v: string) => path.join(s.root, v);
  const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: volumeDir(s.volumes[0] ?? '/tmp') };
  for (const [k, v] of Object.entries(s.env)) env[k] = s.volumes.some((vol) => v === vol || v.startsWith(`${vol}/`)) ? volumeDir(v) : v;
  env.HOST = '127.0.0.1';
  env.PORT = '0';
  env.GRPC_PORT = '0';
  const [cmd, ...cmdArgs] = asUser(s, s.cmd);
  const child = spawn(cmd!, cmdArgs, { cwd: path.join(s.root, s.workdir), env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no HTTP address within ${START_DEADLINE_MS} ms:\n${out}`)), START_DEADLINE_MS);
    const look = () => {
      const m = /HTTP (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    };
    child.stdout!.on('data', look);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`the service exited (${code}) before serving:\n${out}`));
    });
  });
  const port = new URL(url).port;
  return {
    child,
    url,
    volumeDir,
    output: () => out,
    healthcheck() {
      const hc = s.healthcheck;
      if (!hc) throw new Error(`${RECIPE}: the final stage has no HEALTHCHECK`);
      const [c, ...a] = asUser(s, hc.cmd);
      return new Promise((resolve) => {
        const p = spawn(c!, a, { cwd: path.join(s.root, s.workdir), env: { ...env, PORT: port }, stdio: 'ignore' });
        p.once('exit', (code) => resolve(code ?? -1));
      });
    },
    async stop() {
      child.kill((s.stopSignal ?? 'SIGTERM') as NodeJS.Signals);
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_DEADLINE_MS);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/** The command line that runs `cmd` as the stage's USER: setpriv when root, else as this process's user. */
function asUser(s: Stage, cmd: string[]): string[] {
  if (s.user === undefined || !isRoot()) return cmd;
  const [uid, gid] = s.user.split(':');
  if (!/^\d+$/.test(uid!)) throw new Error(`${RECIPE}: USER ${s.user} must be numeric`);
  return ['setpriv', `--reuid=${uid}`, `--regid=${gid ?? uid}`, '--clear-groups', '--', ...cmd];
}

/**
 * The whole check CI runs: build, start as the image's user, HEALTHCHECK, an event in and read back, the data in the
 * volume owned by that user, a clean stop, and a second start that finds the state in the volume. Throws on the first
 * failure; resolves to the ran / not-run report.
 */
export async function verifyRecipe(context: string, work: string, log: (line: string) => void = () => {}): Promise<RecipeRun> {
  const run = buildRecipe(context, work, { log });
  const check = (ok: boolean, what: string, image?: StartedImage) => {
    if (!ok) throw new Error(`${what}${image ? `\n${image.output()}` : ''}`);
    log(`ok: ${what}`);
  };
  const s = run.final;
  check(run.stages.length >= 2, 'multi-stage: a build stage and a runtime stage');
  check(s.user !== undefined && !/^0(:|$)|^root/.test(s.user), `the runtime stage runs as a non-root USER (${s.user})`);
  check(s.volumes.length === 1 && s.env.ANALYTICS_DATA_DIR === s.volumes[0], `the data directory is the VOLUME (${s.volumes.join(' ')})`);
  check(s.healthcheck?.cmd.join(' ').includes('/health') === true, 'the HEALTHCHECK asks /health');
  check(!readdirSync(path.join(s.root, s.workdir, 'node_modules')).includes('typescript'), 'no dev dependency in the image');
  // the image runs compiled JavaScript: its dist/ is a build of exactly its src/ (bin/dist.mjs, as the launcher asks)
  const app = path.join(s.root, s.workdir);
  const fresh = spawnSync(process.execPath, ['-e', "import('./bin/dist.mjs').then((m) => process.exit(m.distIsFresh() ? 0 : 1))"], { cwd: app });
  check(fresh.status === 0, 'dist/ is current for the src/ in the image (the service starts without TypeScript)');

  const image = await startImage(run);
  let key: string;
  let projectId: string;
  try {
    log(`started ${s.cmd!.join(' ')} as ${isRoot() ? `uid ${s.user}` : 'this user'}: ${image.url}`);
    check((await image.healthcheck()) === 0, 'HEALTHCHECK exits 0', image);
    const keyFile = path.join(image.volumeDir(s.volumes[0]!), 'admin.key');
    key = readFileSync(keyFile, 'utf8').trim();
    if (isRoot()) check(String(statSync(keyFile).uid) === s.user!.split(':')[0], 'admin.key in the volume, written by the image user', image);
    const auth = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const created = await fetch(`${image.url}/projects`, { method: 'POST', headers: auth, body: '{"allowed_origins":[],"allowed_referrers":[]}' });
    const body = (await created.json()) as { project: { id: string }; keys: { secret: string } };
    projectId = body.project.id;
    const sent = await fetch(`${image.url}/analytics`, {
      method: 'POST',
      headers: { authorization: `Bearer ${body.keys.secret}`, 'content-type': 'application/json' },
      body: '{"event":"page_view","url":"/","sessionId":"s1"}',
    });
    check(sent.status === 200, `an event is accepted (${sent.status})`, image);
  } finally {
    const stopped = await image.stop();
    check(stopped === 0, `${s.stopSignal ?? 'SIGTERM'} ends it with exit 0 (${stopped})`, image);
  }
  const again = await startImage(run);
  try {
    const m = await fetch(`${again.url}/metrics?projectId=${projectId}`, { headers: { authorization: `Bearer ${key}` } });
    const figures = (await m.json()) as { pageviews?: number };
    check(figures.pageviews === 1, 'a second start reads the state from the volume: the event is counted', again);
  } finally {
    await again.stop();
  }
  return run;
}

async function main(): Promise<void> {
  const context = fileURLToPath(new URL('../..', import.meta.url));
  const work = mkdtempSync(path.join(tmpdir(), 'analytics-recipe-'));
  chmodSync(work, 0o755);
  try {
    const run = await verifyRecipe(context, work, (line) => console.log(`  ${line}`));
    console.log('ran:');
    for (const r of run.ran) console.log(`  ${r}`);
    console.log('not run:');
    for (const r of run.notRun) console.log(`  ${r}`);
  } catch (err) {
    console.error(`the container recipe failed: ${err instanceof Error ? err.message : String(err)}`);
    process.exitCode = 1;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await main();
