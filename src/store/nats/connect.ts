import { connect, type NatsConnection } from '@nats-io/transport-node';

/**
 * Connections to the NATS cluster (CLUSTER.md §4 "Connections"). Callers open separate ones for ingest and reads
 * and for followers: a replay pulling whole batches must never queue behind (or starve) ingest's PubAcks, and the
 * server's per-connection buffer is per connection.
 */

export type { NatsConnection };

/** Never give up reconnecting: a node outlives any NATS server restart; ingest answers 503 meanwhile. */
const MAX_RECONNECT_ATTEMPTS = -1;
/** Retry a lost server quickly: a leader failover takes ~5 s, and ingest waits on it. */
const RECONNECT_TIME_WAIT_MS = 250;
/** Ping every 2 s and give up after 2 missed: a frozen server is left in ~4–6 s instead of the default 2 min. */
const PING_INTERVAL_MS = 2_000;
const MAX_PINGS_OUT = 2;

/** The client URLs, from a list or a comma-separated string (`ANALYTICS_NATS`). */
export function natsServers(servers: string | readonly string[]): string[] {
  const list = (typeof servers === 'string' ? servers.split(',') : [...servers]).map((s) => s.trim()).filter((s) => s !== '');
  if (list.length === 0) throw new Error('no NATS server URL given');
  return list;
}

/**
 * Opens one connection to any of `servers` (all of them are handed to the client, which fails over between them).
 * `name` shows in the servers' connection lists (`/connz`): e.g. `analytics-a-ingest`, `analytics-a-follow`.
 */
export async function connectNats(servers: string | readonly string[], name: string): Promise<NatsConnection> {
  return connect({
    servers: natsServers(servers),
    name,
    maxReconnectAttempts: MAX_RECONNECT_ATTEMPTS,
    reconnectTimeWait: RECONNECT_TIME_WAIT_MS,
    pingInterval: PING_INTERVAL_MS,
    maxPingOut: MAX_PINGS_OUT,
  });
}
