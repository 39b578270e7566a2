import { spawn, type ChildProcess } from 'node:child_process';
import { nodeArgsFor } from '../bin/dist.mjs';

/** A real service process (dist/main.js when built, else `node --import tsx src/main.ts`) on free ports, for tests that kill, signal or starve it. */
export interface ServiceProcess {
  proc: ChildProcess;
  url: string;
  grpc: string;
  /** everything it printed so far (stdout and stderr) */
  output: () => string;
}

/** Starts the service on `dataDir` and resolves once it prints its addresses; rejects if it exits first. */
export function startServiceProcess(dataDir: string, adminKey: string, env: Record<string, string> = {}): Promise<ServiceProcess> {
  const proc = spawn(process.execPath, nodeArgsFor('main.ts'), {
    env: { ...process.env, PORT: '0', GRPC_PORT: '0', HOST: '127.0.0.1', ANALYTICS_DATA_DIR: dataDir, ANALYTICS_ADMIN_KEY: adminKey, ANALYTICS_QUIET: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stderr!.on('data', (c: Buffer) => {
    out += c.toString();
    process.stderr.write(c);
  });
  return new Promise((resolve, reject) => {
    proc.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const m = /HTTP (http:\/\/\S+)\s+gRPC (\S+)/.exec(out);
      if (m) resolve({ proc, url: m[1]!, grpc: m[2]!, output: () => out });
    });
    proc.once('exit', (code) => reject(new Error(`child exited early (${code}): ${out}`)));
  });
}
