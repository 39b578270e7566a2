import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * A bench child process over IPC: `call(cmd, args)` sends one request and resolves with the child's answer.
 * Load generators and big-state measurements run in children so that the process under test and the process that
 * measures never share an event loop or a heap.
 */

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface ChildOptions {
  /** extra node flags, e.g. --expose-gc or --max-old-space-size */
  nodeArgs?: string[];
  /** print the child's stderr as it comes (otherwise it is kept and shown only if the child fails) */
  inheritStderr?: boolean;
}

interface Reply {
  id: number;
  ok: boolean;
  result?: unknown;
  error?: string;
}

export class BenchChild {
  private readonly proc: ChildProcess;
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private stderr = '';
  private exited = false;

  constructor(file: string, opts: ChildOptions = {}) {
    this.proc = fork(file, [], {
      cwd: REPO_ROOT,
      execArgv: ['--import', 'tsx', ...(opts.nodeArgs ?? [])],
      stdio: ['ignore', 'ignore', opts.inheritStderr ? 'inherit' : 'pipe', 'ipc'],
      serialization: 'advanced',
    });
    this.proc.stderr?.on('data', (b: Buffer) => {
      this.stderr = (this.stderr + b.toString()).slice(-8000);
    });
    this.proc.on('message', (m: Reply) => {
      const w = this.waiting.get(m.id);
      if (!w) return;
      this.waiting.delete(m.id);
      if (m.ok) w.resolve(m.result);
      else w.reject(new Error(m.error));
    });
    this.proc.on('exit', (code, signal) => {
      this.exited = true;
      const err = new Error(`bench child ${file} exited (${code ?? signal}) ${this.stderr.trim()}`);
      for (const w of this.waiting.values()) w.reject(err);
      this.waiting.clear();
    });
  }

  get pid(): number | undefined {
    return this.proc.pid;
  }

  call<T>(cmd: string, args: object = {}): Promise<T> {
    if (this.exited) return Promise.reject(new Error(`bench child already exited: ${this.stderr.trim()}`));
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.waiting.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.proc.send({ id, cmd, args });
    });
  }

  /** Ends the child (its own pid only) and waits for it to go. */
  async stop(): Promise<void> {
    if (this.exited) return;
    const gone = new Promise<void>((resolve) => this.proc.once('exit', () => resolve()));
    this.proc.disconnect();
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), 10_000);
    await gone;
    clearTimeout(timer);
  }
}

/** The child side: answers `{ id, cmd, args }` requests with the named handler's result. Exits when the parent goes. */
export function serveCommands(handlers: Record<string, (args: any) => unknown>): void {
  process.on('message', (m: { id: number; cmd: string; args: unknown }) => {
    const handler = handlers[m.cmd];
    void (async () => {
      try {
        if (!handler) throw new Error(`unknown command ${m.cmd}`);
        const result = await handler(m.args);
        process.send!({ id: m.id, ok: true, result });
      } catch (err) {
        process.send!({ id: m.id, ok: false, error: err instanceof Error ? (err.stack ?? err.message) : String(err) });
      }
    })();
  });
  process.on('disconnect', () => process.exit(0));
}
