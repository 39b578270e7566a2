import { DamagedSegmentError } from '../store/lmdb/column-store.ts';
import { dayOf } from '../core/dates.ts';
import { MAX_GOALS, parseFunnelBody, parseGoalBody, parseQueryBody, resolveFunnel, resolveQuestion, type Problem } from '../core/query/schema.ts';
import type { Goal, QueryEngine } from '../core/query/types.ts';
import type { ProjectRecord } from '../store/records.ts';
import { generateId } from './keys.ts';
import { failure as fail, type Failure, type FunnelResponse, type GoalView, type Outcome, type QueryResponse, type RateInfo, type RequestMeta } from './types.ts';

/**
 * Questions (POST /query, /query/funnel) and goals, behind the engine's gates: the desk resolves what the body leaves
 * to the project (timezone, today, goals) and hands a validated question to the column store. The engine gives it its
 * gates and its catalog write, so who may ask stays one rule for every face.
 */

type Admitted = Outcome<{ project: ProjectRecord; rate: RateInfo }>;

export interface DeskParts {
  /** sk_ / rk_ for their project, ak_ naming one; pk_ 403 */
  admitRead(meta: RequestMeta, projectId: string | undefined): Promise<Admitted>;
  /** a change: refused while shutting down, then ak_, or sk_ of that project */
  admitChange(meta: RequestMeta, projectId: string): Admitted;
  /** the project as it is now (goal changes read and write the latest record) */
  project(id: string): ProjectRecord | undefined;
  /** writes the changed project record; a failure is the 503 to answer */
  saveProject(next: ProjectRecord, rate: RateInfo): Promise<Failure | undefined>;
  questions(): QueryEngine | undefined;
  now(): number;
}

/** An engine that cannot answer right now (cluster: the partition's owner is unreachable or still folding): 503 + Retry-After. */
export class QuestionsUnavailable extends Error {
  override readonly name = 'QuestionsUnavailable';
}

/** The engine's answer, or the 503 it could not give one for. */
async function answerOr<T>(ask: () => Promise<T>, rate: RateInfo): Promise<{ ok: true; value: T } | Failure> {
  try {
    return { ok: true, value: await ask() };
  } catch (err) {
    if (err instanceof QuestionsUnavailable) return fail('unavailable', err.message, { retryAfterSeconds: 1 }, rate);
    if (err instanceof DamagedSegmentError) return fail('unavailable', err.message, {}, rate);
    throw err;
  }
}

const UNWIRED = 'questions are not answered by this service yet (the column store is not wired in this mode); GET /metrics still answers';

function invalid(message: string, details: Problem[], rate: RateInfo): Failure {
  return fail('invalid_request', message, details.length > 0 ? { details } : {}, rate);
}

/** The project a body names, as far as the gate needs it (a wrong type is refused by the schema afterwards). */
function namedProject(body: unknown): string | undefined {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return undefined;
  const id = (body as Record<string, unknown>).projectId;
  return typeof id === 'string' ? id : undefined;
}

export function goalView(g: Goal): GoalView {
  return { id: g.id, name: g.name, ...(g.event !== undefined ? { event: g.event } : { page: g.page ?? '' }), created_at: new Date(g.createdAt).toISOString() };
}

export class QuestionDesk {
  /** goal changes one at a time: a name is checked for uniqueness and written without another change in between */
  private goalWrites: Promise<unknown> = Promise.resolve();

  constructor(private readonly parts: DeskParts) {}

  async query(meta: RequestMeta, body: unknown): Promise<Outcome<QueryResponse>> {
    const gate = await this.parts.admitRead(meta, namedProject(body));
    if (!gate.ok) return gate;
    const { project, rate } = gate.value;
    const input = parseQueryBody(body);
    if (!input.ok) return invalid(input.message, input.details, rate);
    const question = resolveQuestion(input.value, dayOf(this.parts.now(), project.timezone), project.goals ?? []);
    if (!question.ok) return invalid(question.message, question.details, rate);
    const engine = this.parts.questions();
    if (!engine) return fail('unavailable', UNWIRED, { retryAfterSeconds: 1 }, rate);
    const q = question.value;
    const asked = await answerOr(() => engine.query(project.id, project.timezone, project.goals ?? [], q), rate);
    if (!asked.ok) return asked;
    const answer = asked.value;
    return {
      ok: true,
      value: {
        projectId: project.id,
        from: q.from,
        to: q.to,
        timezone: project.timezone,
        metrics: q.metrics,
        dimensions: q.dimensions,
        results: answer.results,
        totals: answer.totals,
        totalRows: answer.totalRows,
      },
      rate,
    };
  }

  async funnel(meta: RequestMeta, body: unknown): Promise<Outcome<FunnelResponse>> {
    const gate = await this.parts.admitRead(meta, namedProject(body));
    if (!gate.ok) return gate;
    const { project, rate } = gate.value;
    const input = parseFunnelBody(body);
    if (!input.ok) return invalid(input.message, input.details, rate);
    const question = resolveFunnel(input.value, dayOf(this.parts.now(), project.timezone), project.goals ?? []);
    if (!question.ok) return invalid(question.message, question.details, rate);
    const engine = this.parts.questions();
    if (!engine) return fail('unavailable', UNWIRED, { retryAfterSeconds: 1 }, rate);
    const q = question.value;
    const asked = await answerOr(() => engine.funnel(project.id, project.timezone, q), rate);
    if (!asked.ok) return asked;
    const steps = asked.value;
    return { ok: true, value: { projectId: project.id, from: q.from, to: q.to, timezone: project.timezone, steps }, rate };
  }

  async listGoals(meta: RequestMeta, projectId: string): Promise<Outcome<{ goals: GoalView[] }>> {
    const gate = await this.parts.admitRead(meta, projectId);
    if (!gate.ok) return gate;
    return { ok: true, value: { goals: (gate.value.project.goals ?? []).map(goalView) }, rate: gate.value.rate };
  }

  createGoal(meta: RequestMeta, projectId: string, body: unknown): Promise<Outcome<{ goal: GoalView }>> {
    const gate = this.parts.admitChange(meta, projectId);
    if (!gate.ok) return Promise.resolve(gate);
    const { rate } = gate.value;
    const input = parseGoalBody(body);
    if (!input.ok) return Promise.resolve(invalid(input.message, input.details, rate));
    return this.serially(async (): Promise<Outcome<{ goal: GoalView }>> => {
      const project = this.parts.project(projectId);
      if (!project) return fail('not_found', `no project "${projectId}"`, {}, rate);
      const goals = project.goals ?? [];
      const { name } = input.value;
      if (goals.some((g) => g.name === name)) return fail('conflict', `the project already has a goal named "${name}"`, {}, rate);
      if (goals.length >= MAX_GOALS) {
        return invalid(`a project has at most ${MAX_GOALS} goals: delete one first`, [{ path: 'name', message: `at most ${MAX_GOALS} goals` }], rate);
      }
      const goal: Goal = { id: generateId('goal_'), name, createdAt: this.parts.now() };
      if ('event' in input.value) goal.event = input.value.event;
      else goal.page = input.value.page;
      const written = await this.parts.saveProject({ ...project, goals: [...goals, goal] }, rate);
      if (written) return written;
      return { ok: true, value: { goal: goalView(goal) }, rate };
    });
  }

  deleteGoal(meta: RequestMeta, projectId: string, goalId: string): Promise<Outcome<{ ok: true }>> {
    const gate = this.parts.admitChange(meta, projectId);
    if (!gate.ok) return Promise.resolve(gate);
    const { rate } = gate.value;
    return this.serially(async (): Promise<Outcome<{ ok: true }>> => {
      const project = this.parts.project(projectId);
      if (!project) return fail('not_found', `no project "${projectId}"`, {}, rate);
      const goals = project.goals ?? [];
      if (!goals.some((g) => g.id === goalId)) return fail('not_found', `no goal "${goalId}" in project "${projectId}"`, {}, rate);
      const written = await this.parts.saveProject({ ...project, goals: goals.filter((g) => g.id !== goalId) }, rate);
      if (written) return written;
      return { ok: true, value: { ok: true }, rate };
    });
  }

  private serially<T>(run: () => Promise<T>): Promise<T> {
    const next = this.goalWrites.then(run, run);
    this.goalWrites = next.catch(() => undefined);
    return next;
  }
}
