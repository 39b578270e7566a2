import { isNonPublicAddress, normalizeIp } from './ip-address.ts';

/**
 * Bound on X-Forwarded-For hops examined: real chains are 1–3 proxies deep; a longer header is forged padding, and
 * walking it would let a client make us parse an arbitrarily long list on every request.
 */
export const MAX_FORWARDED_HOPS = 16;

/**
 * The client IP of a request.
 *
 * Without trustProxy the socket address is the client (X-Forwarded-For is ignored: anyone can send it). With trustProxy
 * (TRUST_PROXY, only behind a proxy you run) each proxy appends the address it received the request from, so the
 * rightmost hop that is not a private/loopback address is the first address outside our network; hops left of it
 * are client-supplied and ignored. An unparseable hop stops the walk: past it nothing is trustworthy. When no public
 * hop is found the socket address is used.
 *
 * Returns the normalized address ('::ffff:' stripped) or '' when nothing usable is known.
 */
export function clientIp(socketAddress: string | undefined, forwardedFor: string | undefined, trustProxy: boolean): string {
  const socket = socketAddress === undefined ? '' : normalizeIp(socketAddress);
  if (!trustProxy || forwardedFor === undefined || forwardedFor === '') return socket;

  // walk from the right end of the header without splitting all of it
  let end = forwardedFor.length;
  for (let seen = 0; seen < MAX_FORWARDED_HOPS && end > 0; seen++) {
    const start = forwardedFor.lastIndexOf(',', end - 1);
    const hop = normalizeIp(forwardedFor.slice(start + 1, end));
    if (hop === '') break;
    if (!isNonPublicAddress(hop)) return hop;
    end = start;
  }
  return socket;
}
