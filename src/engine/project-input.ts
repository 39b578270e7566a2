import { z } from 'zod';
import { isValidTimeZone } from '../core/dates.ts';
import { MAX_PARAM_KEY, MAX_TRACKED_PROPS } from '../core/limits.ts';

/** The body of POST /projects (and CreateProject over gRPC). */

/** Names are labels for people; 100 characters is plenty. */
const MAX_PROJECT_NAME = 100;
/** Origins and referrers per project; more than this is a misconfiguration. */
const MAX_ALLOWED_ENTRIES = 100;
/** Above 1e9 events a month a quota is not a quota; 0 means unlimited. */
const MAX_MONTHLY_QUOTA = 1_000_000_000;
/** Per-project rate overrides cannot exceed what one process can take (~100k req/s). */
const MAX_RATE = 100_000;

const HOSTNAME = /^(?=.{1,253}$)(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))*$/i;

/**
 * An origin is a URL with nothing after the host and port. Case, a default port (:443) and a trailing slash are
 * spelling, not meaning: normalizeOrigin removes them, so they are accepted here.
 */
const origin = z.string().refine((s) => {
  if (!URL.canParse(s)) return false;
  const u = new URL(s);
  return (
    (u.protocol === 'http:' || u.protocol === 'https:') &&
    u.username === '' &&
    u.password === '' &&
    u.pathname === '/' &&
    u.search === '' &&
    u.hash === '' &&
    !/[?#]/.test(s) &&
    /^https?:\/\/[^/]+\/?$/i.test(s)
  );
}, 'must be a URL origin like https://example.com (scheme, host, optional port; no path)');

const rate = z.number().positive().max(MAX_RATE);

/** A site's domain as Plausible names it: a host name (its Events API and Stats API identify the site by it). */
const domain = z.string().regex(HOSTNAME, 'must be a host name like example.com (at most 253 characters)');

/** CONTRACT: at most 10 eventParams keys, each at most 40 characters (the eventParams key limit). */
export const TrackedPropsSchema = z.array(z.string().min(1).max(MAX_PARAM_KEY)).max(MAX_TRACKED_PROPS);

export const CreateProjectSchema = z.strictObject({
  name: z.string().trim().min(1).max(MAX_PROJECT_NAME).optional(),
  allowed_origins: z.array(origin).max(MAX_ALLOWED_ENTRIES),
  allowed_referrers: z.array(z.string().regex(HOSTNAME, 'must be a host name like example.com')).max(MAX_ALLOWED_ENTRIES),
  timezone: z.string().refine(isValidTimeZone, 'must be an IANA timezone like Europe/Berlin').optional(),
  monthly_quota: z.number().int().min(0).max(MAX_MONTHLY_QUOTA).optional(),
  tracked_props: TrackedPropsSchema.optional(),
  domain: domain.optional(),
  rate_limit: z
    .strictObject({ per_key: rate.optional(), burst_per_key: rate.optional(), per_ip: rate.optional(), burst_per_ip: rate.optional() })
    .optional(),
});

export type CreateProjectInput = z.infer<typeof CreateProjectSchema>;

/** Origins compare without a trailing slash; hosts compare lower case. */
export function normalizeOrigin(s: string): string {
  return new URL(s).origin;
}

/** The body of PATCH /projects/{id} (and UpdateProject): every field of creation but `timezone` (days are counted in it). */
export const UpdateProjectSchema = z.strictObject({
  name: z.string().trim().min(1).max(MAX_PROJECT_NAME).optional(),
  allowed_origins: z.array(origin).max(MAX_ALLOWED_ENTRIES).optional(),
  allowed_referrers: z.array(z.string().regex(HOSTNAME, 'must be a host name like example.com')).max(MAX_ALLOWED_ENTRIES).optional(),
  monthly_quota: z.number().int().min(0).max(MAX_MONTHLY_QUOTA).optional(),
  rate_limit: CreateProjectSchema.shape.rate_limit,
  tracked_props: TrackedPropsSchema.optional(),
  /** null removes it */
  domain: domain.nullable().optional(),
});

export type UpdateProjectInput = z.infer<typeof UpdateProjectSchema>;

/** The body of POST /projects/{id}/keys (and CreateKey). */
export const CreateKeySchema = z.strictObject({
  type: z.enum(['secret', 'publishable', 'read']),
  expires_at: z.iso.datetime({ offset: true }).optional(),
});

/** The body of PATCH /projects/{id}/keys/{keyId}: set (or move) a key's expiry, as `keys rotate --overlap` does. */
export const UpdateKeySchema = z.strictObject({
  expires_at: z.iso.datetime({ offset: true }),
});

/** A page of GET /projects (and ListProjects): CONTRACT limit 1–1,000, default 100. */
export const MAX_PAGE = 1000;
export const DEFAULT_PAGE = 100;
