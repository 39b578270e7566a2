import { connect, type Socket } from 'node:net';
import { serveCommands } from './child.ts';

/**
 * bench/connection-cap.ts's attacker, in its own process so its reconnect loop never shares an event loop with the
 * client being timed: `ADDRESSES` loopback addresses, each holding `PER_ADDRESS` silent sockets (just under the
 * per-address cap), every socket put back as soon as the service closes it.
 */

let port = 0;
let attacking = false;
const open = new Set<Socket>();
let reconnects = 0;

function silent(source: string): void {
  const s = connect({ port, host: '127.0.0.1', localAddress: source });
  s.on('error', () => {});
  open.add(s);
  s.once('close', () => {
    open.delete(s);
    if (!attacking) return;
    reconnects++;
    // the next tick, so a service that closes at once cannot make this a hot loop
    setImmediate(() => attacking && silent(source));
  });
}

serveCommands({
  async start(a: { port: number; addresses: number; perAddress: number }) {
    port = a.port;
    attacking = true;
    reconnects = 0;
    for (let i = 0; i < a.addresses * a.perAddress; i++) {
      silent(`127.0.0.${2 + (i % a.addresses)}`);
      if (i % 250 === 249) await new Promise((r) => setTimeout(r, 20));
    }
    await new Promise((r) => setTimeout(r, 1000));
    return { open: open.size };
  },
  stop() {
    attacking = false;
    const held = open.size;
    for (const s of open) s.destroy();
    return { held, reconnects };
  },
});
