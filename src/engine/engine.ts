import type { Config } from '../config.ts';
import type { MetricsResponse, RealtimeResponse } from '../core/types.ts';
import { Admission } from './admission.ts';
import type { Backend } from './backend.ts';
import { Ingest } from './ingest.ts';
import type { OperatorMetrics, StateStats } from './operator-metrics.ts';
import { ProjectKeys } from './project-keys.ts';
import { plausibleEvent } from './plausible.ts';
import { plausibleQuery, type StatsAnswer } from './plausible-stats.ts';
import { Projects } from './projects.ts';
import { QuestionDesk } from './questions.ts';
import { Reads } from './reads.ts';
import type {
  AnalyticsEngine,
  CreatedKey,
  CreatedProject,
  EngineError,
  ExportQuery,
  ExportStream,
  Failure,
  FunnelResponse,
  Gate,
  GoalView,
  HealthView,
  HistoryAck,
  IngestAck,
  KeyIdentity,
  KeyView,
  MetricsQuery,
  Outcome,
  PageQuery,
  ProjectPage,
  ProjectView,
  QueryResponse,
  RealtimeQuery,
  RequestMeta,
} from './types.ts';

/** Salts rotate at midnight UTC; checking each minute keeps the rotation within a minute of it. */
const SALT_CHECK_EVERY_MS = 60_000;

export interface EngineOptions {
  config: Readonly<Config>;
  /** operator metrics (METRICS_PORT); absent = not collected */
  ops?: OperatorMetrics | undefined;
  version: string;
  /** the clock; injected so tests can move time */
  now?: () => number;
  log?: (line: string) => void;
  /** the storage mode (single node or cluster), chosen where the service is wired */
  openBackend: (ctx: { now: () => number; log: (line: string) => void; ops: OperatorMetrics | undefined }) => Promise<Backend>;
}

/**
 * The service behind the AnalyticsEngine interface that HTTP, gRPC and MCP call: a composition of one part per job,
 * each given narrow callbacks. Admission (admission.ts) is every gate: key, rate limit, scope, shutting down.
 * Ingest (ingest.ts): gate → validate → enrich → de-duplicate → quota → append (await the commit) → acknowledge.
 * Reads (reads.ts): in-memory state (cluster: after the read barrier). Projects (projects.ts) and their keys
 * (project-keys.ts); questions and goals (questions.ts). The engine itself holds health and the lifecycle.
 */
export class Engine implements AnalyticsEngine {
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly startedAt: number;
  readonly now: () => number;
  private readonly log: (line: string) => void;
  private readonly admission: Admission;
  private readonly projects: Projects;
  private readonly keys: ProjectKeys;
  private readonly ingestion: Ingest;
  private readonly reads: Reads;
  private readonly desk: QuestionDesk;

  private constructor(
    config: Readonly<Config>,
    private readonly version: string,
    private readonly backend: Backend,
    now: () => number,
    log: (line: string) => void,
    ops: OperatorMetrics | undefined,
  ) {
    this.now = now;
    this.log = log;
    this.startedAt = now();
    const clock = () => this.now();
    const admission = new Admission({
      config,
      catalog: backend.catalog,
      project: (id) => this.projects.get(id),
      rateShare: () => backend.rateShare(),
      now: clock,
      log,
    });
    this.admission = admission;
    this.projects = new Projects({ admission, backend, now: clock, log });
    this.keys = new ProjectKeys({ admission, catalog: backend.catalog, write: (run, rate) => this.projects.write(run, rate), now: clock });
    this.ingestion = new Ingest({ admission, backend, now: clock, ops });
    this.reads = new Reads({ admission, backend, now: clock });
    this.desk = new QuestionDesk({
      admitRead: (meta, projectId) => admission.admitReadFresh(meta, projectId),
      admitChange: (meta, projectId) => admission.admitChange(meta, projectId),
      project: (id) => this.projects.get(id),
      saveProject: (next, rate) => this.projects.save(next, rate),
      questions: () => backend.questions,
      now: clock,
    });
  }

  static async open(opts: EngineOptions): Promise<Engine> {
    const now = opts.now ?? Date.now;
    const log = opts.log ?? ((line: string) => console.log(line));
    const ops = opts.ops;
    const backend = await opts.openBackend({ now, log, ops });
    const engine = new Engine(opts.config, opts.version, backend, now, log, ops);
    if (ops) ops.observeState(() => engine.stats());
    await backend.bootstrapAdminKey(opts.config, now());
    await backend.finishInterruptedErasures();
    engine.startTimers();
    return engine;
  }

  // ---------------------------------------------------------------- gates (admission.ts)

  refuse(meta: RequestMeta, endpoint: Gate, error: EngineError): Failure {
    return this.admission.refuse(meta, endpoint, error);
  }

  identify(meta: RequestMeta): Outcome<KeyIdentity> {
    return this.admission.identify(meta);
  }

  // ---------------------------------------------------------------- events in (ingest.ts)

  ingest(meta: RequestMeta, events: unknown[]): Promise<Outcome<IngestAck>> {
    return this.ingestion.ingest(meta, events);
  }

  plausibleQuery(meta: RequestMeta, body: unknown): Promise<StatsAnswer> {
    return plausibleQuery({ byDomain: (d) => this.projects.byDomain(d), query: (m, b) => this.query(m, b), now: () => this.now() }, meta, body);
  }

  plausibleEvent(meta: RequestMeta, body: unknown): Promise<Outcome<{ dropped: boolean }>> {
    return plausibleEvent({ ingestion: this.ingestion, byDomain: (d) => this.projects.byDomain(d) }, meta, body);
  }

  history(meta: RequestMeta, projectId: string, events: unknown[]): Promise<Outcome<HistoryAck>> {
    return this.ingestion.history(meta, projectId, events);
  }

  // ---------------------------------------------------------------- reads (reads.ts)

  metrics(meta: RequestMeta, query: MetricsQuery): Promise<Outcome<MetricsResponse>> {
    return this.reads.metrics(meta, query);
  }

  realtime(meta: RequestMeta, query: RealtimeQuery): Promise<Outcome<RealtimeResponse>> {
    return this.reads.realtime(meta, query);
  }

  exportEvents(meta: RequestMeta, projectId: string, query: ExportQuery): Outcome<ExportStream> {
    return this.reads.exportEvents(meta, projectId, query);
  }

  // ---------------------------------------------------------------- questions and goals (questions.ts)

  query(meta: RequestMeta, body: unknown): Promise<Outcome<QueryResponse>> {
    return this.desk.query(meta, body);
  }

  funnel(meta: RequestMeta, body: unknown): Promise<Outcome<FunnelResponse>> {
    return this.desk.funnel(meta, body);
  }

  listGoals(meta: RequestMeta, projectId: string): Promise<Outcome<{ goals: GoalView[] }>> {
    return this.desk.listGoals(meta, projectId);
  }

  createGoal(meta: RequestMeta, projectId: string, body: unknown): Promise<Outcome<{ goal: GoalView }>> {
    return this.desk.createGoal(meta, projectId, body);
  }

  deleteGoal(meta: RequestMeta, projectId: string, goalId: string): Promise<Outcome<{ ok: true }>> {
    return this.desk.deleteGoal(meta, projectId, goalId);
  }

  // ---------------------------------------------------------------- projects and keys (projects.ts, project-keys.ts)

  listProjects(meta: RequestMeta, page?: PageQuery): Outcome<ProjectPage> {
    return this.projects.listProjects(meta, page);
  }

  createProject(meta: RequestMeta, body: unknown): Promise<Outcome<CreatedProject>> {
    return this.projects.createProject(meta, body);
  }

  updateProject(meta: RequestMeta, projectId: string, body: unknown): Promise<Outcome<{ project: ProjectView }>> {
    return this.projects.updateProject(meta, projectId, body);
  }

  deleteProject(meta: RequestMeta, projectId: string): Promise<Outcome<{ ok: true }>> {
    return this.projects.deleteProject(meta, projectId);
  }

  listKeys(meta: RequestMeta, projectId: string): Outcome<{ keys: KeyView[] }> {
    return this.keys.listKeys(meta, projectId);
  }

  createKey(meta: RequestMeta, projectId: string, body: unknown): Promise<Outcome<CreatedKey>> {
    return this.keys.createKey(meta, projectId, body);
  }

  updateKey(meta: RequestMeta, projectId: string, keyId: string, body: unknown): Promise<Outcome<KeyView>> {
    return this.keys.updateKey(meta, projectId, keyId, body);
  }

  revokeKey(meta: RequestMeta, projectId: string, keyId: string): Promise<Outcome<{ ok: true }>> {
    return this.keys.revokeKey(meta, projectId, keyId);
  }

  // ---------------------------------------------------------------- health and lifecycle

  health(): HealthView {
    const h = this.backend.health(this.startedAt);
    const view: HealthView = {
      status: this.admission.isClosing || !this.backend.storageOk || !h.ready ? 'unavailable' : 'ok',
      version: this.version,
      uptimeSeconds: Math.floor((this.now() - this.startedAt) / 1000),
    };
    if (h.log) view.log = h.log;
    return view;
  }

  private startTimers(): void {
    const every = (ms: number, fn: () => void | Promise<void>) => {
      const t = setInterval(() => void Promise.resolve(fn()).catch((e: unknown) => this.log(`timer: ${String(e)}`)), ms);
      t.unref();
      this.timers.push(t);
    };
    this.backend.startTimers(every);
    every(SALT_CHECK_EVERY_MS, () => this.backend.enricher.rotateSalts(this.now()));
  }

  /** Stop taking writes (health turns 503); in-flight requests still finish. */
  beginShutdown(): void {
    this.admission.beginShutdown();
  }

  /** Waits for in-flight writes, writes a final snapshot and closes LMDB. */
  async close(): Promise<void> {
    this.admission.beginShutdown();
    for (const t of this.timers) clearInterval(t);
    await this.backend.close();
  }

  /** For operator metrics: what is held, read at scrape time. */
  stats(): StateStats {
    return { projects: this.projects.size, ...this.backend.stats() };
  }

  /** Single node: see LmdbBackend.applyRetention (ANALYTICS_LOG_RETENTION_DAYS); returns records removed. */
  async applyRetention(): Promise<number> {
    return this.backend.applyRetention();
  }

  /** For tests and benches: wait until every day handed over for sealing is written. */
  async sealingIdle(): Promise<void> {
    await this.backend.sealingIdle();
  }

  /** For tests and benches: live days that took history (sealed seconds after an import leaves them). */
  historyDaysLive(): number {
    return this.backend.historyDaysLive?.() ?? 0;
  }

  /** For tests and benches: write a snapshot now. */
  async snapshotNow(): Promise<void> {
    await this.backend.snapshotNow();
  }
}
