import { z } from 'zod';

/**
 * Query-string schemas of the HTTP reads the tools share. These mirror GET /metrics and GET /projects until the HTTP
 * face's own strict query schemas (src/http/query-schemas.ts) are on this branch; then the tools import those and
 * this file goes.
 */

const param = (description: string) => z.string().describe(description);

export const MetricsQuerySchema = z.strictObject({
  date: param('one day, YYYY-MM-DD, in the project\'s timezone').optional(),
  from: param('first day of an inclusive range, YYYY-MM-DD').optional(),
  to: param('last day of the range (defaults to today); needs `from`').optional(),
  projectId: param('the project to read; required for admin keys').optional(),
});

export const ListProjectsQuerySchema = z.strictObject({});
