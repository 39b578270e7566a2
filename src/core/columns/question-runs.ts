/**
 * One POST /query over the days a caller feeds it: the question's own run, and the runs its metrics need besides
 * (conversionRate's base question, one revenue question per `revenue:<CUR>`), all fed the same day tables in one pass.
 */

import type { Goal, Question, QueryAnswer } from '../query/types.ts';
import type { DayTable } from './day-table.ts';
import { baseQuestion, QueryRun } from './evaluate.ts';
import { revenueCurrencies, revenueQuestion, revenueSums } from './revenue.ts';

export class QuestionRuns {
  private readonly main: QueryRun;
  private readonly base: QueryRun | undefined;
  /** per currency: the revenue question by the question's dimensions, and without them (its total) */
  private readonly revenue: Array<[string, QueryRun, QueryRun]>;

  constructor(timezone: string, goals: readonly Goal[], q: Question) {
    this.main = new QueryRun(timezone, goals, q);
    const bq = baseQuestion(q);
    this.base = bq && new QueryRun(timezone, goals, bq);
    this.revenue = revenueCurrencies(q.metrics).map((cur) => {
      const rows = new QueryRun(timezone, goals, revenueQuestion(q, cur));
      const all = q.dimensions.length === 0 ? rows : new QueryRun(timezone, goals, revenueQuestion({ ...q, dimensions: [] }, cur));
      return [cur, rows, all];
    });
  }

  addDay(day: string, dt: DayTable | undefined): void {
    this.main.addDay(day, dt);
    this.base?.addDay(day, dt);
    for (const [, rows, all] of this.revenue) {
      rows.addDay(day, dt);
      if (all !== rows) all.addDay(day, dt);
    }
  }

  finish(): QueryAnswer {
    const rows = (run: QueryRun) => run.finish();
    return this.main.finish(this.base?.baseVisitors(), new Map(this.revenue.map(([cur, byRow, all]) => [cur, revenueSums(rows(byRow), rows(all))])));
  }
}
