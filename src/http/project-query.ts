import { z } from 'zod';
import { MAX_PAGE } from '../engine/project-input.ts';
import { failure, type Failure } from '../engine/types.ts';

/**
 * Query strings of the project and key endpoints, one strict zod schema per endpoint: an unknown parameter is 400
 * `invalid_request` naming it (CONTRACT: any other query parameter on a JSON endpoint).
 */

const limit = z
  .string()
  .regex(/^\d{1,4}$/, `must be an integer from 1 to ${MAX_PAGE}`)
  .transform(Number)
  .pipe(z.number().int().min(1, `must be an integer from 1 to ${MAX_PAGE}`).max(MAX_PAGE, `must be an integer from 1 to ${MAX_PAGE}`));

export const ListProjectsQuerySchema = z.strictObject({
  limit: limit.optional().meta({ description: `page size, 1–${MAX_PAGE} (default 100)` }),
  cursor: z.string().min(1).optional().meta({ description: 'the next_cursor of the previous page, as returned' }),
});

const day = z.string().meta({ description: 'YYYY-MM-DD, a day in the project\'s timezone' });

/** GET /metrics: none (today), `date`, or `from` with optional `to`; `projectId` for admin keys. */
export const MetricsQuerySchema = z.strictObject({
  date: day.optional(),
  from: day.optional(),
  to: day.optional(),
  projectId: z.string().optional().meta({ description: 'required with an admin key; else the key\'s own project' }),
});

/** Endpoints that take no query parameters. */
export const NoQuerySchema = z.strictObject({});

export type QueryResult<T> = { ok: true; value: T } | Failure;

/** Parses a query string with an endpoint's schema; a repeated parameter is refused like an unknown one. */
export function parseQuery<T>(schema: z.ZodType<T>, params: URLSearchParams): QueryResult<T> {
  const raw: Record<string, string> = {};
  for (const [name, value] of params) {
    if (name in raw) return failure('invalid_request', `query parameter "${name}" is given twice`, { details: [{ path: name, message: 'given twice' }] });
    raw[name] = value;
  }
  const parsed = schema.safeParse(raw);
  if (parsed.success) return { ok: true, value: parsed.data };
  const details = parsed.error.issues.flatMap((i) =>
    i.code === 'unrecognized_keys'
      ? i.keys.map((k) => ({ path: k, message: 'unknown query parameter' }))
      : [{ path: i.path.map(String).join('.'), message: i.message }],
  );
  return failure('invalid_request', `invalid query: ${details.map((d) => `${d.path} ${d.message}`).join('; ')}`, { details });
}
