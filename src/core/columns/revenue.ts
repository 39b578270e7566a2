/**
 * `revenue:<CUR>` of POST /query: the sum of `value` over the selected purchases whose `currency` is CUR, by row; a
 * purchase is an event named `purchase`, or one that carried revenue (Plausible's Events API) whatever its name.
 * Answered with the evaluator itself, by more questions over the same days: the question's selection and the
 * purchases of each kind in that currency (`is prop:currency` in any letter case), by its dimensions and `prop:value`,
 * counting events; each row's sum is Σ value × events over its values.
 *
 * The column store keeps a property's value as its string, so a `value` sent as a string of digits ("12.5") counts
 * here where GET /metrics counts numbers only (docs/query.md).
 */

import { isRevenueMetric, type Filter, type Metric, type Question, type QueryAnswer } from '../query/types.ts';
import { REVENUE_MARK } from './segment.ts';

/** The purchase event and its two properties (the revenue rules of GET /metrics, core/day-aggregate.ts). */
const PURCHASE = 'purchase';
const VALUE = 'prop:value';
const CURRENCY = 'prop:currency';

/** A row's figure by its dimension values, and the whole selection's. */
export interface GroupFigures {
  total: number;
  group(dims: readonly string[]): number;
}

export const NO_FIGURES: GroupFigures = { total: 0, group: () => 0 };

/** The currencies a question's metrics ask for. */
export function revenueCurrencies(metrics: readonly Metric[]): string[] {
  return metrics.filter(isRevenueMetric).map((m) => m.slice('revenue:'.length));
}

/** Every letter case of a three-letter code (GET /metrics upper-cases the currency it counts). */
function cases(code: string): string[] {
  let out = [''];
  for (const ch of code) out = out.flatMap((p) => [p + ch.toUpperCase(), p + ch.toLowerCase()]);
  return [...new Set(out)];
}

/** What counts as a purchase: an event named purchase, or one that carried revenue whatever its name (REVENUE_MARK). */
export const PURCHASE_KINDS = ['named', 'marked'] as const;
export type PurchaseKind = (typeof PURCHASE_KINDS)[number];

/**
 * The question whose rows sum into `revenue:<cur>`: purchases of one kind in that currency, by the question's
 * dimensions and value (filters hold together, so the two kinds are two questions whose sums add up).
 */
export function revenueQuestion(q: Question, cur: string, kind: PurchaseKind): Question {
  const which: Filter[] = kind === 'named' ? [['is', 'event', [PURCHASE]]] : [['isNot', 'event', [PURCHASE]], ['is', `prop:${REVENUE_MARK}`, ['1']]];
  const filters: Filter[] = [...q.filters, ...which, ['is', CURRENCY, cases(cur)]];
  return { ...q, metrics: ['events'], dimensions: [...q.dimensions, VALUE], filters, orderBy: [], offset: 0, limit: Number.MAX_SAFE_INTEGER };
}

const round2 = (x: number): number => Math.round(x * 100) / 100;

/**
 * Sums of value × events by the rows' other dimensions, from the answers of revenueQuestion for the question (`rows`)
 * and for the question without dimensions (`all`: the total holds the purchases that have no value of a dimension).
 */
export function revenueSums(answers: ReadonlyArray<{ rows: QueryAnswer; all: QueryAnswer }>): GroupFigures {
  const byGroup = new Map<string, number>();
  let total = 0;
  for (const { rows, all } of answers) {
    for (const row of rows.results) {
      const value = Number(row.dimensions.at(-1));
      if (!Number.isFinite(value)) continue;
      const k = JSON.stringify(row.dimensions.slice(0, -1));
      byGroup.set(k, (byGroup.get(k) ?? 0) + value * row.metrics[0]!);
    }
    for (const row of all.results) {
      const value = Number(row.dimensions[0]);
      if (Number.isFinite(value)) total += value * row.metrics[0]!;
    }
  }
  return { total: round2(total), group: (dims) => round2(byGroup.get(JSON.stringify(dims)) ?? 0) };
}
