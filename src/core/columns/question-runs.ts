/**
 * One POST /query over the days a caller feeds it: the question's own run, and the runs its metrics need besides
 * (conversionRate's base question, one revenue question per `revenue:<CUR>`), all fed the same day tables in one pass.
 */

import type { Goal, Question, QueryAnswer } from '../query/types.ts';
import type { DayTable } from './day-table.ts';
import { baseQuestion, QueryRun } from './evaluate.ts';
import { PURCHASE_KINDS, revenueCurrencies, revenueQuestion, revenueSums } from './revenue.ts';

export class QuestionRuns {
  private readonly main: QueryRun;
  private readonly base: QueryRun | undefined;
  /** per currency, per kind of purchase: the revenue question by the question's dimensions, and without them (its total) */
  private readonly revenue: Array<[string, Array<{ rows: QueryRun; all: QueryRun }>]>;

  constructor(timezone: string, goals: readonly Goal[], q: Question) {
    this.main = new QueryRun(timezone, goals, q);
    const bq = baseQuestion(q);
    this.base = bq && new QueryRun(timezone, goals, bq);
    this.revenue = revenueCurrencies(q.metrics).map((cur) => [
      cur,
      PURCHASE_KINDS.map((kind) => {
        const rows = new QueryRun(timezone, goals, revenueQuestion(q, cur, kind));
        const all = q.dimensions.length === 0 ? rows : new QueryRun(timezone, goals, revenueQuestion({ ...q, dimensions: [] }, cur, kind));
        return { rows, all };
      }),
    ]);
  }

  addDay(day: string, dt: DayTable | undefined): void {
    this.main.addDay(day, dt);
    this.base?.addDay(day, dt);
    for (const [, kinds] of this.revenue) {
      for (const { rows, all } of kinds) {
        rows.addDay(day, dt);
        if (all !== rows) all.addDay(day, dt);
      }
    }
  }

  finish(): QueryAnswer {
    const sums = (kinds: Array<{ rows: QueryRun; all: QueryRun }>) => revenueSums(kinds.map(({ rows, all }) => ({ rows: rows.finish(), all: all.finish() })));
    return this.main.finish(this.base?.baseVisitors(), new Map(this.revenue.map(([cur, kinds]) => [cur, sums(kinds)])));
  }
}
