import { pathToFileURL } from 'node:url';
import { serveCommands } from './child.ts';

/** A child that runs one exported function of a module (bench/grpc.ts, bench/enrich.ts) out of the main process. */
serveCommands({
  async run(a: { file: string; exportName: string; args: unknown[] }) {
    const mod = (await import(pathToFileURL(a.file).href)) as Record<string, (...args: unknown[]) => unknown>;
    const fn = mod[a.exportName];
    if (typeof fn !== 'function') throw new Error(`${a.file} does not export ${a.exportName}`);
    return await fn(...a.args);
  },
});
