/**
 * When to send a batch again, and after how long. Every event carries an eventId the service de-duplicates for
 * 48 hours, so repeating a request that may have been committed (a 503 after the commit, a lost response) is safe.
 */

/** 408 and 429 say "later"; 5xx says "not now". Everything else in 4xx is about the request and repeats itself. */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

/**
 * Milliseconds before retry number `attempt` (0-based): "equal jitter", half of the exponential step fixed and
 * half random, so a fleet of clients that failed together does not come back together, yet each waits at least
 * half a step. A Retry-After from the service replaces the step (it knows when its bucket refills).
 */
export function retryDelayMs(attempt: number, baseMs: number, maxMs: number, retryAfterMs: number | undefined): number {
  if (retryAfterMs !== undefined) return Math.min(retryAfterMs, maxMs);
  const step = Math.min(maxMs, baseMs * 2 ** attempt);
  return step / 2 + Math.random() * (step / 2);
}

/** Retry-After is either delay-seconds or an HTTP date (RFC 9110 §10.2.3); anything else is ignored. */
export function parseRetryAfter(header: string | null, now: number): number | undefined {
  if (header === null) return undefined;
  const value = header.trim();
  if (/^\d+$/.test(value)) return Number(value) * 1000;
  const date = Date.parse(value);
  return Number.isFinite(date) ? Math.max(0, date - now) : undefined;
}
