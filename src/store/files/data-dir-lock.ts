import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

/**
 * One writing process per data directory. A writer holds a Linux abstract-namespace Unix socket named after the
 * directory's real path: binding it is exclusive (a second bind fails with EADDRINUSE) and the kernel releases it
 * when the process ends, however it ends, so a `kill -9` leaves nothing to clean. The socket answers a connection
 * with the holder's pid and command line, and HOLDER_FILE in the directory names the holder for people (and for the
 * refusal message, which is built synchronously because LogStore.open is synchronous).
 *
 * Abstract sockets exist on Linux only (the platform the service is deployed on); elsewhere (a developer's macOS)
 * no hold is taken, rather than refusing every start.
 *
 * Within one process the hold is counted: a store opened again on a directory this process already holds (repair
 * reopening, tests restarting a service in-process) shares it, and the last release lets it go.
 */

/** The file in the data directory naming the process that holds it; informational only, the socket is the lock. */
export const HOLDER_FILE = 'analytics.holder';

export interface Holder {
  pid: number;
  command: string;
  since: string;
}

export class DataDirHeld extends Error {
  constructor(
    readonly dataDir: string,
    readonly holder: Holder | undefined,
  ) {
    const who = holder
      ? `pid ${holder.pid} (${holder.command}), since ${holder.since}`
      : 'another process (it has not named itself yet; see /proc/net/unix for @analytics:…)';
    super(
      `data directory ${dataDir} is in use by ${who}: one process per data directory. ` +
        'Stop that process first; read-only commands (check, backup, export --data-dir) work beside it.',
    );
    this.name = 'DataDirHeld';
  }
}

interface Hold {
  server: net.Server;
  count: number;
  file: string;
}

const held = new Map<string, Hold>();

/** The abstract socket name for a directory: a hash keeps it under the 107-byte limit whatever the path's length. */
function socketName(real: string): string {
  return `\0analytics:${createHash('sha256').update(real).digest('hex').slice(0, 40)}`;
}

function whoAmI(): Holder {
  return { pid: process.pid, command: process.argv.join(' '), since: new Date().toISOString() };
}

function readHolder(file: string): Holder | undefined {
  try {
    const h = JSON.parse(readFileSync(file, 'utf8')) as Partial<Holder>;
    if (typeof h.pid !== 'number' || typeof h.command !== 'string') return undefined;
    return { pid: h.pid, command: h.command, since: typeof h.since === 'string' ? h.since : 'unknown' };
  } catch {
    return undefined;
  }
}

/**
 * Takes (or shares, within this process) the writer's hold on `dataDir`, creating the directory if needed.
 * Throws DataDirHeld, naming the holder, when another process holds it. Returns the directory's real path, the key
 * for releaseDataDir.
 */
export function holdDataDir(dataDir: string): string {
  mkdirSync(dataDir, { recursive: true });
  const real = realpathSync(dataDir);
  const mine = held.get(real);
  if (mine) {
    mine.count++;
    return real;
  }
  if (process.platform !== 'linux') return real;
  const file = path.join(real, HOLDER_FILE);
  const me = whoAmI();
  const server = net.createServer((socket) => {
    socket.on('error', () => {});
    socket.end(`${JSON.stringify(me)}\n`);
  });
  // A failed bind is also emitted as an 'error' event on the next tick; it is handled here, synchronously.
  server.on('error', () => {});
  // Binding a Unix socket path is synchronous in Node: `listening` is already true or false when listen() returns.
  server.listen(socketName(real));
  if (!server.listening) {
    server.close();
    throw new DataDirHeld(real, readHolder(file));
  }
  server.unref(); // the hold never keeps the process alive by itself
  writeFileSync(file, `${JSON.stringify(me)}\n`);
  held.set(real, { server, count: 1, file });
  return real;
}

/** Releases one hold taken by holdDataDir; the last one closes the socket and removes the holder file. */
export function releaseDataDir(real: string): void {
  const mine = held.get(real);
  if (!mine) return;
  if (--mine.count > 0) return;
  held.delete(real);
  mine.server.close();
  const named = readHolder(mine.file);
  if (named?.pid === process.pid) rmSync(mine.file, { force: true });
}

/** Asks the process holding `dataDir` who it is (undefined: nobody holds it). */
export async function askHolder(dataDir: string): Promise<Holder | undefined> {
  const real = realpathSync(dataDir);
  return new Promise((resolve) => {
    const socket = net.connect(socketName(real));
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.on('error', () => resolve(undefined));
    socket.on('end', () => {
      try {
        resolve(JSON.parse(text) as Holder);
      } catch {
        resolve(undefined);
      }
    });
  });
}
