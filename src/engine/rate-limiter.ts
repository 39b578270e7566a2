import type { RateInfo } from './types.ts';

/**
 * Token buckets keyed by string (an API key hash, or project + client IP). A bucket that has refilled completely
 * holds no information, so it is dropped; memory is bounded by the keys active within one refill period, and by
 * MAX_BUCKETS as a hard stop.
 */

/** Hard cap on live buckets (~100 bytes each): 200k distinct callers in one refill period is an attack, not traffic. */
const MAX_BUCKETS = 200_000;
/** Sweep idle buckets at most this often. */
const SWEEP_EVERY_MS = 10_000;

interface Bucket {
  tokens: number;
  updated: number;
  rate: number;
  burst: number;
}

export interface TakeResult {
  allowed: boolean;
  info: RateInfo;
  retryAfterSeconds: number;
}

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private lastSweep = 0;

  /** Takes one token from `key`'s bucket of `rate` tokens/s and capacity `burst`. */
  take(key: string, rate: number, burst: number, now: number): TakeResult {
    this.sweep(now);
    let b = this.buckets.get(key);
    if (!b) {
      if (this.buckets.size >= MAX_BUCKETS) this.evictOldest();
      b = { tokens: burst, updated: now, rate, burst };
      this.buckets.set(key, b);
    } else {
      b.rate = rate;
      b.burst = burst;
      // A clock that steps back (NTP) refills nothing; it must not drain the bucket by "negative time" either.
      b.tokens = Math.min(burst, b.tokens + (Math.max(0, now - b.updated) / 1000) * rate);
      b.updated = Math.max(b.updated, now);
    }
    const allowed = b.tokens >= 1;
    if (allowed) b.tokens -= 1;
    const info: RateInfo = {
      limit: burst,
      remaining: Math.max(0, Math.floor(b.tokens)),
      resetSeconds: Math.max(0, Math.ceil((burst - b.tokens) / rate)),
    };
    return { allowed, info, retryAfterSeconds: allowed ? 0 : Math.max(1, Math.ceil((1 - b.tokens) / rate)) };
  }

  size(): number {
    return this.buckets.size;
  }

  private sweep(now: number): void {
    if (now - this.lastSweep < SWEEP_EVERY_MS) return;
    this.lastSweep = now;
    for (const [k, b] of this.buckets) {
      if (b.tokens + ((now - b.updated) / 1000) * b.rate >= b.burst) this.buckets.delete(k);
    }
  }

  private evictOldest(): void {
    // Map iteration is insertion order: the first bucket is the least recently created.
    const first = this.buckets.keys().next();
    if (!first.done) this.buckets.delete(first.value);
  }
}

/** An IPv6 subscriber is given a whole /64 (RFC 6177): the first four groups of 16 bits name the client. */
const IPV6_CLIENT_GROUPS = 4;

/**
 * The per-client bucket of an address: an IPv4 address as is, an IPv6 address by its /64 prefix, since anyone who
 * holds one address of a /64 can use all 2^64 of them and would otherwise get a fresh bucket per request.
 */
export function clientBucket(ip: string): string {
  if (!ip.includes(':')) return ip;
  const [head = '', tail] = ip.split('::');
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = tail === undefined ? left : [...left, ...Array<string>(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right];
  return `${groups
    .slice(0, IPV6_CLIENT_GROUPS)
    .map((g) => Number.parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}
