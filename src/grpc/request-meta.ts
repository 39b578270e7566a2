import { isIP } from 'node:net';
import type { Metadata } from '@grpc/grpc-js';
import type { RequestMeta } from '../engine/types.ts';

/**
 * gRPC call → the request facts the engine's rules need, as the HTTP face takes them from headers. There is no
 * Origin or Referer: gRPC callers are backends, so pk_ origin checks see what a server-side HTTP caller would.
 */

/**
 * Product tokens that gRPC libraries append to every User-Agent ("grpc-node-js/1.14.7", "grpc-go/1.64.0",
 * "grpc-java-netty/1.63.0", "grpc-c/40.0.0 (linux; chttp2)"). They name the transport, not a visitor, and bot
 * detectors classify them as bots, so every gRPC event would be dropped; what the application itself put in the
 * User-Agent (grpc-js `grpc.primary_user_agent`, grpcurl `-user-agent`) is kept.
 */
const GRPC_LIBRARY_TOKEN = /(?:^|\s)grpc-[a-z0-9.+-]+\/\S+(?:\s\([^)]*\))?/gi;

export function visitorUserAgent(raw: string): string {
  return raw.replace(GRPC_LIBRARY_TOKEN, ' ').replace(/\s+/g, ' ').trim();
}

/** `call.getPeer()` is "host:port", "[v6]:port" or, for IPv6 in grpc-js, "v6:port" without brackets. */
export function peerIp(peer: string): string {
  if (isIP(peer) !== 0) return peer;
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(peer);
  if (bracketed?.[1] !== undefined) return bracketed[1];
  const withoutPort = peer.replace(/:\d+$/, '');
  return isIP(withoutPort) !== 0 ? withoutPort : peer;
}

function first(metadata: Metadata, key: string): string | undefined {
  const value = metadata.get(key)[0];
  return typeof value === 'string' ? value : undefined;
}

export function requestMeta(call: { metadata: Metadata; getPeer(): string }): RequestMeta {
  return {
    authorization: first(call.metadata, 'authorization'),
    origin: undefined,
    referer: undefined,
    ip: peerIp(call.getPeer()),
    userAgent: visitorUserAgent(first(call.metadata, 'user-agent') ?? ''),
    face: 'grpc',
  };
}
