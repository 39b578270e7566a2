import { z } from 'zod';
import type { PageQuery } from './types.ts';

/**
 * The query parameters of every JSON endpoint, one strict schema per route and method: every other parameter is a 400
 * `invalid_request` naming it (a misspelt `?period=7d` must not silently answer today). The values are checked by
 * the engine (dates, ranges, ids); these schemas only say which names exist. `/health`, `/script.js` (a cache-busting
 * `?v=` is fine) and the dashboard take any query. Kept in one file so the OpenAPI document can be generated from it.
 */

const param = (description: string) => z.string().describe(description);

export const QUERY_SCHEMAS = {
  '/analytics': { POST: z.strictObject({}) },
  '/metrics': {
    GET: z.strictObject({
      date: param('one day, YYYY-MM-DD, in the project\'s timezone').optional(),
      from: param('first day of an inclusive range, YYYY-MM-DD').optional(),
      to: param('last day of the range (defaults to today); needs `from`').optional(),
      projectId: param('the project to read; required for admin keys').optional(),
      compare: param('`previous` (the range of the same length just before) or `year` (the same dates a year earlier)').optional(),
    }),
  },
  '/metrics/realtime': {
    GET: z.strictObject({
      projectId: param('the project to read; required for admin keys').optional(),
    }),
  },
  '/projects': {
    GET: z.strictObject({
      limit: param('page size, 1 to 1000 (default 100)').optional(),
      cursor: param('the next_cursor of the previous page, as returned').optional(),
    }),
    POST: z.strictObject({}),
  },
  '/projects/{id}': { PATCH: z.strictObject({}), DELETE: z.strictObject({}) },
  '/projects/{id}/keys': { GET: z.strictObject({}), POST: z.strictObject({}) },
  '/projects/{id}/keys/{keyId}': { PATCH: z.strictObject({}), DELETE: z.strictObject({}) },
  '/projects/{id}/history': { POST: z.strictObject({}) },
  '/projects/{id}/export': {
    GET: z.strictObject({
      date: param('one day, YYYY-MM-DD, in the project\'s timezone').optional(),
      from: param('first day of an inclusive range of at most ten years, YYYY-MM-DD').optional(),
      to: param('last day of the range (defaults to today); needs `from`').optional(),
    }),
  },
  '/projects/{id}/goals': { GET: z.strictObject({}), POST: z.strictObject({}) },
  '/projects/{id}/goals/{goalId}': { DELETE: z.strictObject({}) },
  '/query': { POST: z.strictObject({}) },
  '/query/funnel': { POST: z.strictObject({}) },
  '/mcp': { POST: z.strictObject({}) },
} as const satisfies Record<string, Record<string, z.ZodObject>>;

export type ListProjectsQueryParams = z.infer<(typeof QUERY_SCHEMAS)['/projects']['GET']>;

/** GET /projects's paging as the engine takes it (which checks the values, as for gRPC): a limit that is not all digits is NaN, so it is refused. */
export function pageQuery(q: ListProjectsQueryParams): PageQuery {
  const limit = q.limit === undefined ? undefined : /^\d{1,7}$/.test(q.limit) ? Number(q.limit) : Number.NaN;
  return { limit, cursor: q.cursor };
}
export type MetricsQueryParams = z.infer<(typeof QUERY_SCHEMAS)['/metrics']['GET']>;
export type ExportQueryParams = z.infer<(typeof QUERY_SCHEMAS)['/projects/{id}/export']['GET']>;
export type RealtimeQueryParams = z.infer<(typeof QUERY_SCHEMAS)['/metrics/realtime']['GET']>;

export type QueryCheck = { ok: true; value: Record<string, string> } | { ok: false; message: string; names: string[] };

/** Checks `params` against the schema of `pathname` + `method`; routes without one accept any query. */
export function checkQuery(pathname: string, method: string, params: URLSearchParams): QueryCheck {
  const schema = (QUERY_SCHEMAS as Record<string, Record<string, z.ZodObject> | undefined>)[pathname]?.[method];
  const value: Record<string, string> = {};
  const repeated: string[] = [];
  for (const [name, v] of params) {
    if (Object.hasOwn(value, name)) repeated.push(name);
    else value[name] = v;
  }
  if (!schema) return { ok: true, value };
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const unknown = parsed.error.issues.flatMap((i) => (i.code === 'unrecognized_keys' ? i.keys : []));
    if (unknown.length > 0) {
      const allowed = Object.keys(schema.shape);
      return {
        ok: false,
        names: unknown,
        message: `unknown query parameter${unknown.length > 1 ? 's' : ''} ${unknown.map((n) => `\`${n}\``).join(', ')} on ${method} ${pathname}; ${
          allowed.length > 0 ? `it takes ${allowed.map((n) => `\`${n}\``).join(', ')}` : 'it takes none'
        }`,
      };
    }
    return { ok: false, names: [], message: parsed.error.issues.map((i) => i.message).join('; ') };
  }
  if (repeated.length > 0) {
    return { ok: false, names: repeated, message: `query parameter ${repeated.map((n) => `\`${n}\``).join(', ')} given more than once` };
  }
  return { ok: true, value: parsed.data as Record<string, string> };
}
