import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { nodeArgsFor, SERVICE_ENV, serviceNodeArgs } from '../bin/dist.mjs';
import { REPO_ROOT } from './lib/child.ts';
import { freePort, ownLoopDelayMs, passThrough } from './lib/service-outside.ts';

/**
 * `npx tsx bench/history.ts [--quick] [--events=N] [--import-only] [--profile=DIR]`: history in and out through the real parts. A service process
 * (dist/main.js when `node bin/build.mjs` built the src/ there is now, else src/main.ts through tsx; `flush`
 * durability), an NDJSON file of N events spread over a year, `analytics import` (the CLI, a
 * child process) timed end to end, while this process asks GET /health every 20 ms (longest wait; beside it the service's own
 * longest event-loop delay over the import, from its operator metrics) and samples the
 * service's anonymous RSS (/proc/PID/status RssAnon); then GET /projects/{id}/export read to the end, and
 * `analytics export --raw` to /dev/null. CPU is counted per event for the service (its own /proc figures) and for the
 * CLI (this process's reaped children), since both share the cores. Prints a table; writes bench/results/history.json.
 */

const quick = process.argv.includes('--quick');
const eventsArg = process.argv.find((a) => a.startsWith('--events='));
/** quick: seconds on a shared 2-core machine; full: the 10M takes ~4 min to import here */
const EVENTS = eventsArg ? Number(eventsArg.slice('--events='.length)) : quick ? 100_000 : 10_000_000;
/** `--profile=DIR`: the service writes a V8 CPU profile there when it stops, each CLI run one in DIR/cli */
const profileArg = process.argv.find((a) => a.startsWith('--profile='));
const profileDir = profileArg?.slice('--profile='.length);
/** `--import-only`: stop after the import (a profile of the import alone) */
const importOnly = process.argv.includes('--import-only');
const DAYS = 365;
const HEALTH_EVERY_MS = 20;
const RSS_EVERY_MS = 250;
const YEAR_START = Date.UTC(2024, 0, 1);

/** CPU seconds (user + system) a process has used, from /proc/PID/stat (clock ticks of 10 ms). */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** CPU seconds of this process's children that have exited and been reaped (the CLI runs), from /proc/self/stat. */
function childrenCpuSeconds(): number {
  const fields = readFileSync('/proc/self/stat', 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[13]) + Number(fields[14])) / 100;
}

function rssAnon(pid: number): number {
  const m = /RssAnon:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

/** N events in time order over DAYS days: visits of 1–6 page views, a few sources, browsers and countries. */
async function writeEvents(file: string, n: number): Promise<void> {
  const out = createWriteStream(file);
  const perDay = Math.ceil(n / DAYS);
  const step = Math.floor(86_400_000 / perDay);
  const refs = ['', 'https://www.google.com/', 'https://news.ycombinator.com/', 'https://twitter.com/x', ''];
  const browsers = ['Chrome', 'Firefox', 'Safari', 'Edge'];
  for (let i = 0; i < n; i++) {
    const day = Math.floor(i / perDay);
    const visit = Math.floor(i / 4);
    const line = JSON.stringify({
      event: i % 10 === 9 ? 'signup' : 'page_view',
      url: `https://shop.example/p${i % 50}`,
      referrer: i % 4 === 0 ? refs[visit % refs.length] : 'https://shop.example/',
      sessionId: `v${visit}`,
      timestamp: YEAR_START + day * 86_400_000 + (i % perDay) * step,
      browser: browsers[visit % browsers.length],
      country: ['DE', 'US', 'FR'][visit % 3],
      device: visit % 3 ? 'desktop' : 'mobile',
      eventId: `b${i}`,
    });
    if (!out.write(`${line}\n`)) await new Promise<void>((r) => out.once("drain", () => r()));
  }
  await new Promise<void>((resolve) => out.end(resolve));
}

function runCli(args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const profile = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${path.join(profileDir, 'cli')}`] : [];
    const child = spawn(process.execPath, [...profile, path.join(REPO_ROOT, 'bin/analytics.js'), ...args], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout = (stdout + b.toString()).slice(-100_000)));
    child.stderr.on('data', (b: Buffer) => (stderr = (stderr + b.toString()).slice(-4000)));
    child.on('exit', (code) => resolve({ code: code ?? 1, stdout, stderr }));
  });
}

async function main(): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'history-bench-'));
  const dataDir = path.join(dir, 'data');
  const file = path.join(dir, 'events.ndjson');
  const adminKey = `ak_${randomBytes(24).toString('base64url')}`;
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const metricsUrl = `http://127.0.0.1:${await freePort()}/metrics`;
  process.stderr.write(`writing ${EVENTS} events to ${file}...\n`);
  await writeEvents(file, EVENTS);
  process.stderr.write(`the service runs ${nodeArgsFor('main.ts').at(-1)}\n`);
  const profile = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
  const service = spawn(process.execPath, [...profile, ...serviceNodeArgs()], {
    cwd: REPO_ROOT,
    env: { PATH: process.env.PATH ?? '', ...SERVICE_ENV, ...passThrough(), PORT: String(port), GRPC_PORT: String(await freePort()), ANALYTICS_DATA_DIR: dataDir, ANALYTICS_ADMIN_KEY: adminKey, ANALYTICS_QUIET: '1', METRICS_PORT: new URL(metricsUrl).port },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  try {
    for (let i = 0; ; i++) {
      try {
        if ((await fetch(`${url}/health`)).ok) break;
      } catch {
        /* not up yet */
      }
      if (i > 300) throw new Error('the service did not start');
      await new Promise((r) => setTimeout(r, 100));
    }
    const auth = { authorization: `Bearer ${adminKey}`, 'content-type': 'application/json' };
    const created = (await (await fetch(`${url}/projects`, { method: 'POST', headers: auth, body: JSON.stringify({ allowed_origins: [], allowed_referrers: [] }) })).json()) as {
      project: { id: string };
      keys: { secret: string };
    };
    const id = created.project.id;
    const pid = service.pid!;
    const rssBefore = rssAnon(pid);
    let rssMax = rssBefore;
    let healthMax = 0;
    let running = true;
    const health = (async () => {
      while (running) {
        const t = performance.now();
        await (await fetch(`${url}/health`)).text();
        healthMax = Math.max(healthMax, performance.now() - t);
        await new Promise((r) => setTimeout(r, HEALTH_EVERY_MS));
      }
    })();
    const rssTimer = setInterval(() => (rssMax = Math.max(rssMax, rssAnon(pid))), RSS_EVERY_MS);

    process.stderr.write(`importing through the CLI...\n`);
    await ownLoopDelayMs(metricsUrl); // a scrape starts the service's event-loop delay histogram afresh
    const cpu0 = cpuSeconds(pid);
    const cli0 = childrenCpuSeconds();
    const t0 = performance.now();
    const imported = await runCli(['import', '--project', id, file, '--json'], { ANALYTICS_URL: url, ANALYTICS_KEY: created.keys.secret });
    const importS = (performance.now() - t0) / 1000;
    const importCpu = cpuSeconds(pid) - cpu0;
    const importCliCpu = childrenCpuSeconds() - cli0;
    const ownLoopMax = await ownLoopDelayMs(metricsUrl);
    running = false;
    clearInterval(rssTimer);
    await health;
    if (imported.code !== 0) throw new Error(`import failed: ${imported.stderr}`);
    const summary = JSON.parse(imported.stdout) as { accepted: number };

    const mib = (b: number) => `${(b / 1048576).toFixed(0)} MiB`;
    const rows: Array<[string, string, string]> = [
      [`import ${EVENTS} events (${mib(statSync(file).size)}) over ${DAYS} days through the CLI`, `${Math.round(summary.accepted / importS)} events/s (${importS.toFixed(1)} s)`, '≥ 50,000 events/s'],
      ['service CPU per imported event (user + system, all threads)', `${((importCpu / summary.accepted) * 1e6).toFixed(1)} µs (${importCpu.toFixed(1)} s)`, ''],
      ['CLI CPU per imported event (analytics import)', `${((importCliCpu / summary.accepted) * 1e6).toFixed(1)} µs (${importCliCpu.toFixed(1)} s)`, ''],
      ['service anonymous RSS during the import', `${mib(rssBefore)} → max ${mib(rssMax)} (+${mib(rssMax - rssBefore)})`, '≤ +100 MiB'],
      ['GET /health longest wait during the import', `${healthMax.toFixed(1)} ms`, '≤ 50 ms'],
      ["  the service's own longest event-loop delay meanwhile (its operator metrics)", `${ownLoopMax.toFixed(1)} ms`, ''],
    ];
    const figures: Record<string, unknown> = { events: EVENTS, dist: nodeArgsFor('main.ts').length === 1, importS, importCpu, importCliCpu, rssBefore, rssMax, healthMaxMs: healthMax, ownLoopMaxMs: ownLoopMax };
    if (!importOnly) {
      process.stderr.write(`exporting through GET /projects/{id}/export...\n`);
      const from = new Date(YEAR_START).toISOString().slice(0, 10);
      const to = new Date(YEAR_START + DAYS * 86_400_000).toISOString().slice(0, 10);
      const cpu1 = cpuSeconds(pid);
      const t1 = performance.now();
      const res = await fetch(`${url}/projects/${id}/export?from=${from}&to=${to}`, { headers: auth });
      let lines = 0;
      let bytes = 0;
      for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
        bytes += chunk.length;
        for (const b of chunk) if (b === 10) lines++;
      }
      const exportS = (performance.now() - t1) / 1000;
      const exportCpu = cpuSeconds(pid) - cpu1;

      const cpu2 = cpuSeconds(pid);
      const cli2 = childrenCpuSeconds();
      const t2 = performance.now();
      const cliExport = await runCli(['export', '--raw', '--format', 'ndjson', '--project', id, '--from', from, '--to', to], { ANALYTICS_URL: url, ANALYTICS_KEY: created.keys.secret });
      const cliExportS = (performance.now() - t2) / 1000;
      const cliExportServiceCpu = cpuSeconds(pid) - cpu2;
      const cliExportCpu = childrenCpuSeconds() - cli2;
      if (cliExport.code !== 0) throw new Error(`export failed: ${cliExport.stderr}`);

      rows.push(
        [`GET /projects/{id}/export (${mib(bytes)})`, `${Math.round(lines / exportS)} events/s (${exportS.toFixed(1)} s, ${lines} lines)`, '≥ 100,000 events/s'],
        ['service CPU per exported event', `${((exportCpu / Math.max(1, lines)) * 1e6).toFixed(1)} µs (${exportCpu.toFixed(1)} s)`, ''],
        ['analytics export --raw (remote, through the endpoint)', `${Math.round(lines / cliExportS)} events/s (${cliExportS.toFixed(1)} s)`, ''],
        ['  service CPU per event meanwhile', `${((cliExportServiceCpu / Math.max(1, lines)) * 1e6).toFixed(1)} µs (${cliExportServiceCpu.toFixed(1)} s)`, ''],
        ['  CLI CPU per exported event', `${((cliExportCpu / Math.max(1, lines)) * 1e6).toFixed(1)} µs (${cliExportCpu.toFixed(1)} s)`, ''],
      );
      Object.assign(figures, { exportCpu, cliExportServiceCpu, cliExportCpu, exportS, exportLines: lines, cliExportS });
    }
    for (const [what, value, goal] of rows) console.log(`${what.padEnd(70)} ${value.padEnd(44)} ${goal}`);
    writeFileSync(path.join(REPO_ROOT, 'bench/results/history.json'), `${JSON.stringify(figures, null, 2)}\n`);
  } finally {
    service.kill('SIGTERM');
    await new Promise((r) => service.once('exit', r));
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
