import type { Socket } from 'node:net';

/**
 * Every TCP connection a face accepts passes here first: a cap on open connections per client IP and in all, and a
 * deadline for the connection to prove it is a client (HTTP: headers of its first request; gRPC: the HTTP/2
 * preface). At the total cap a newcomer is not refused while some connection is doing nothing: the one silent
 * longest since accept is closed to make room, else the one idle longest between requests. Refusing instead would let
 * a few addresses, each under its own cap, hold the port shut by reconnecting as fast as the deadline closes them. Node closes neither a connection that never sends a byte (http's headersTimeout only starts with a
 * request; grpc-js has no handshake deadline), so without this 20,000 silent sockets exhaust the fds and every
 * new client fails. The guard also knows every open socket, so shutdown can close what is left at its deadline.
 * Admitted sockets get TCP_NODELAY, as node:http's own listener gives them (the faces listen through their own
 * net.Server so the guard sees every connection first).
 */

/** The defaults, shared by both ports. */
export const CONNECTION_LIMITS = {
  /**
   * Open connections per port. Two ports at 8,000 stay under a 20,000-fd limit with room for LMDB, snapshots and
   * outgoing work; far more than one process serves usefully at once (beacons are short requests).
   */
  maxOpen: 8_000,
  /**
   * Open connections per client IP and port: an office behind one NAT address is hundreds of browsers (≤ 6 each);
   * one IP cannot take more than an eighth of the port.
   */
  maxPerIp: 1_000,
  /** A connection has this long to send its first request's headers (HTTP) or the HTTP/2 preface (gRPC). */
  handshakeMs: 10_000,
} as const;

export interface GuardLimits {
  maxOpen: number;
  /** 0: no per-IP cap (behind a proxy every connection comes from the proxy) */
  maxPerIp: number;
  handshakeMs: number;
}

export type Refusal = 'too_many_connections' | 'too_many_from_ip';

/** What a face tells the guard about a connection after admitting it, so the guard knows which ones it may close. */
export type Activity = 'busy' | 'idle';

export class ConnectionGuard {
  readonly open = new Set<Socket>();
  private readonly perIp = new Map<string, number>();
  /** open connections that have not started a request yet, oldest first (a Set keeps insertion order) */
  private readonly silent = new Set<Socket>();
  /** open connections between requests, idle longest first */
  private readonly waiting = new Set<Socket>();
  /** admitted, refused, timed-out and evicted (closed to make room) connections since start (for health and tests) */
  admitted = 0;
  refused = 0;
  timedOut = 0;
  evicted = 0;

  constructor(
    private readonly limits: GuardLimits,
    /** called for a connection over a cap, before it is destroyed: write a clear refusal if the protocol allows */
    private readonly refuse: (socket: Socket, why: Refusal) => void,
  ) {}

  /**
   * Admits a new connection or refuses it. `proved(socket)` is asked at the handshake deadline: false closes the
   * connection. Returns whether the socket was admitted.
   */
  admit(socket: Socket, proved: (socket: Socket) => boolean): boolean {
    const ip = socket.remoteAddress ?? '';
    const fromIp = this.perIp.get(ip) ?? 0;
    // the per-address cap first: an address at its cap must not make room for itself by closing someone else's
    const why: Refusal | undefined =
      this.limits.maxPerIp > 0 && fromIp >= this.limits.maxPerIp
        ? 'too_many_from_ip'
        : this.open.size >= this.limits.maxOpen && !this.evictOne()
          ? 'too_many_connections'
          : undefined;
    if (why) {
      this.refused++;
      socket.on('error', () => {}); // a reset while refusing is expected
      try {
        this.refuse(socket, why);
      } finally {
        // end() lets the refusal reach the client; the timer makes sure the fd is gone soon whatever the peer does
        setTimeout(() => socket.destroy(), 1000).unref();
      }
      return false;
    }
    this.admitted++;
    // node:http's own listener turns Nagle's algorithm off for every connection it accepts; a connection handed over
    // from our listener must get the same, or a response written in two pieces waits for the client's delayed ACK
    // (up to 40 ms on Linux) before its second piece leaves
    socket.setNoDelay(true);
    this.open.add(socket);
    this.silent.add(socket);
    this.perIp.set(ip, fromIp + 1);
    const timer = setTimeout(() => {
      if (!socket.destroyed && !proved(socket)) {
        this.timedOut++;
        socket.destroy();
      }
    }, this.limits.handshakeMs);
    timer.unref();
    socket.once('close', () => {
      clearTimeout(timer);
      this.release(socket, ip);
    });
    return true;
  }

  /**
   * A face's word on an admitted connection: 'busy' when a request (or an HTTP/2 session) starts, which the guard
   * never closes to make room; 'idle' when the connection waits for its next request, which makes it the newest
   * candidate after every silent one.
   */
  note(socket: Socket, activity: Activity): void {
    if (!this.open.has(socket)) return;
    this.silent.delete(socket);
    this.waiting.delete(socket);
    if (activity === 'idle') this.waiting.add(socket);
  }

  /** Closes the connection that has done nothing for longest, silent ones first; false if every one is busy. */
  private evictOne(): boolean {
    for (const pool of [this.silent, this.waiting]) {
      const oldest = pool.values().next();
      if (oldest.done) continue;
      const socket = oldest.value;
      // counted free now: the close event comes a tick later, after the newcomer has taken the place
      this.release(socket, socket.remoteAddress ?? '');
      if (socket.destroyed) return true; // already closing (its deadline passed this tick): its place is free anyway
      this.evicted++;
      socket.destroy();
      return true;
    }
    return false;
  }

  private release(socket: Socket, ip: string): void {
    if (!this.open.delete(socket)) return;
    this.silent.delete(socket);
    this.waiting.delete(socket);
    const n = (this.perIp.get(ip) ?? 1) - 1;
    if (n <= 0) this.perIp.delete(ip);
    else this.perIp.set(ip, n);
  }

  /** Destroys every open connection `keep` does not claim (shutdown). */
  destroyAll(keep: (socket: Socket) => boolean = () => false): void {
    for (const s of [...this.open]) if (!keep(s)) s.destroy();
  }
}
