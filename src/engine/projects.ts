import { guardJson } from '../core/json-guard.ts';
import type { KeyRecord, ProjectRecord } from '../store/records.ts';
import type { Catalog } from '../store/seams.ts';
import type { Admission } from './admission.ts';
import type { Backend } from './backend.ts';
import { generateId, generateKey, hashKey, keyHint } from './keys.ts';
import { decodeCursor, encodeCursor, isAfter, isRecord, zodDetails } from './lifecycle-helpers.ts';
import { CreateProjectSchema, DEFAULT_PAGE, MAX_PAGE, normalizeOrigin, UpdateProjectSchema } from './project-input.ts';
import { failure as fail, type Failure as Fail, type CreatedProject, type Outcome, type PageQuery, type ProjectPage, type ProjectView, type RateInfo, type RequestMeta } from './types.ts';

/**
 * Projects: the list the engine holds (creation order, following the catalog on every node), GET /projects and the
 * project lifecycle (create, update, delete). Keys of a project are in project-keys.ts.
 */

/** CONTRACT: default monthly allowance per project. */
const DEFAULT_MONTHLY_QUOTA = 100_000;

export interface ProjectParts {
  admission: Admission;
  backend: Backend;
  now(): number;
  log(line: string): void;
}

/** The projects by id (Map order is creation order), and by domain, the index rebuilt when asked after a change. */
class ProjectList extends Map<string, ProjectRecord> {
  private domains: Map<string, string> | undefined;

  override set(id: string, p: ProjectRecord): this {
    this.domains = undefined;
    return super.set(id, p);
  }

  override delete(id: string): boolean {
    this.domains = undefined;
    return super.delete(id);
  }

  byDomain(domain: string): ProjectRecord | undefined {
    if (!this.domains) {
      this.domains = new Map();
      for (const p of this.values()) if (p.domain !== undefined) this.domains.set(p.domain, p.id);
    }
    const id = this.domains.get(domain.toLowerCase());
    return id === undefined ? undefined : this.get(id);
  }
}

export class Projects {
  /** Map order is creation order: GET /projects pages through it. */
  private readonly projects = new ProjectList();
  /** creation time of the newest project (creation times strictly increase) */
  private lastCreatedAt = 0;
  private readonly catalog: Catalog;
  private readonly backend: Backend;

  constructor(private readonly parts: ProjectParts) {
    this.backend = parts.backend;
    this.catalog = parts.backend.catalog;
    const all = this.catalog.projects().sort(byCreation);
    for (const p of all) this.projects.set(p.id, p);
    this.lastCreatedAt = all.at(-1)?.createdAt ?? 0;
    // Changes made on another node (cluster), or here: the project list follows the catalog.
    this.catalog.onChange(({ kind, id }) => {
      if (kind === 'project') this.sync(id);
    });
  }

  get(id: string): ProjectRecord | undefined {
    return this.projects.get(id);
  }

  /** The project whose site is `domain` (POST /api/event). */
  byDomain(domain: string): ProjectRecord | undefined {
    return this.projects.byDomain(domain);
  }

  /** A domain another project has already: 409 (a domain names one site). */
  private domainTaken(domain: string | undefined, self: string | undefined, rate: RateInfo): Fail | undefined {
    if (domain === undefined) return undefined;
    const other = this.projects.byDomain(domain);
    return other && other.id !== self ? fail('conflict', `the domain ${domain.toLowerCase()} is already another project's`, {}, rate) : undefined;
  }

  get size(): number {
    return this.projects.size;
  }

  /** Runs a storage write; a failure marks storage unhealthy and becomes 503. */
  async write(run: () => Promise<unknown>, rate: RateInfo, what = 'storage'): Promise<Fail | undefined> {
    try {
      await run();
      return undefined;
    } catch (err) {
      this.backend.storageOk = false;
      this.parts.log(`${what} write failed: ${err instanceof Error ? err.message : String(err)}`);
      return fail('unavailable', 'storage is not accepting writes', { retryAfterSeconds: 1 }, rate);
    }
  }

  /** Writes a changed project record and holds it, unless a delete raced the write. */
  async save(next: ProjectRecord, rate: RateInfo): Promise<Fail | undefined> {
    const failed = await this.write(() => this.catalog.putProject(next, []), rate);
    if (!failed && this.projects.has(next.id)) this.projects.set(next.id, next); // a delete may have raced the write
    return failed;
  }

  listProjects(meta: RequestMeta, page: PageQuery = {}): Outcome<ProjectPage> {
    const admitted = this.parts.admission.admitManage(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    const limit = page.limit ?? DEFAULT_PAGE;
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE) {
      return fail('invalid_request', `limit must be an integer from 1 to ${MAX_PAGE}`, {}, rate);
    }
    let after: [number, string] | undefined;
    if (page.cursor !== undefined) {
      after = decodeCursor(page.cursor);
      if (!after) return fail('invalid_request', 'cursor is not one this service gave out; pass next_cursor as it was returned', {}, rate);
    }
    const visible = key.kind === 'admin' ? this.projects.values() : [this.projects.get(key.projectId!)].filter((p) => p !== undefined);
    const projects: ProjectView[] = [];
    let more = false;
    let last: ProjectRecord | undefined;
    for (const p of visible) {
      if (after && !isAfter(p, after)) continue;
      if (projects.length === limit) {
        more = true;
        break;
      }
      projects.push(view(p));
      last = p;
    }
    return { ok: true, value: { projects, next_cursor: more && last ? encodeCursor(last) : null }, rate };
  }

  async createProject(meta: RequestMeta, body: unknown): Promise<Outcome<CreatedProject>> {
    const { admission } = this.parts;
    const closed = admission.shuttingDown();
    if (closed) return closed;
    const admitted = admission.admitManage(meta);
    if (!admitted.ok) return admitted;
    const { who: { key }, rate } = admitted.value;
    const unsafe = unsafeBody(body, rate);
    if (unsafe) return unsafe;
    const parsed = CreateProjectSchema.safeParse(body);
    if (!parsed.success) return fail('invalid_request', 'invalid project', { details: zodDetails(parsed.error.issues) }, rate);
    const input = parsed.data;
    // Creation times strictly increase, so (created_at, id) order is Map order and cursors never skip a project.
    const now = Math.max(this.parts.now(), this.lastCreatedAt + 1);
    this.lastCreatedAt = now;
    const project: ProjectRecord = {
      id: generateId('p_'),
      name: input.name ?? 'Untitled project',
      ownerId: key.ownerId,
      allowedOrigins: [...new Set(input.allowed_origins.map(normalizeOrigin))],
      allowedReferrers: [...new Set(input.allowed_referrers.map((h) => h.toLowerCase()))],
      timezone: input.timezone ?? 'UTC',
      monthlyQuota: input.monthly_quota ?? DEFAULT_MONTHLY_QUOTA,
      createdAt: now,
    };
    if (input.tracked_props !== undefined && input.tracked_props.length > 0) project.trackedProps = [...new Set(input.tracked_props)];
    if (input.rate_limit) project.rate = rateOf(input.rate_limit);
    const taken = this.domainTaken(input.domain, undefined, rate);
    if (taken) return taken;
    if (input.domain !== undefined) project.domain = input.domain.toLowerCase();
    const secret = generateKey('secret');
    const publishable = generateKey('publishable');
    const record = (kind: 'secret' | 'publishable', k: string): KeyRecord => ({
      kind,
      projectId: project.id,
      ownerId: key.ownerId,
      createdAt: now,
      id: generateId('key_'),
      hint: keyHint(k),
    });
    const keys: Array<[string, KeyRecord]> = [[hashKey(secret), record('secret', secret)], [hashKey(publishable), record('publishable', publishable)]];
    const written = await this.write(() => this.catalog.putProject(project, keys), rate, 'project');
    if (written) return written;
    this.projects.set(project.id, project);
    return { ok: true, value: { project: view(project), keys: { secret, publishable } }, rate };
  }

  async updateProject(meta: RequestMeta, projectId: string, body: unknown): Promise<Outcome<{ project: ProjectView }>> {
    const gate = this.parts.admission.admitChange(meta, projectId);
    if (!gate.ok) return gate;
    const { project, rate } = gate.value;
    const unsafe = unsafeBody(body, rate);
    if (unsafe) return unsafe;
    if (isRecord(body) && 'timezone' in body) {
      return fail('invalid_request', 'timezone cannot change: past days were counted in it; create a new project instead', {
        details: [{ path: 'timezone', message: 'cannot be changed' }],
      }, rate);
    }
    const parsed = UpdateProjectSchema.safeParse(body);
    if (!parsed.success) return fail('invalid_request', 'invalid project update', { details: zodDetails(parsed.error.issues) }, rate);
    const input = parsed.data;
    const next: ProjectRecord = { ...project };
    if (input.name !== undefined) next.name = input.name;
    if (input.allowed_origins !== undefined) next.allowedOrigins = [...new Set(input.allowed_origins.map(normalizeOrigin))];
    if (input.allowed_referrers !== undefined) next.allowedReferrers = [...new Set(input.allowed_referrers.map((h) => h.toLowerCase()))];
    if (input.monthly_quota !== undefined) next.monthlyQuota = input.monthly_quota;
    if (input.tracked_props !== undefined) next.trackedProps = [...new Set(input.tracked_props)];
    if (input.rate_limit !== undefined) next.rate = rateOf(input.rate_limit);
    const taken = this.domainTaken(input.domain ?? undefined, project.id, rate);
    if (taken) return taken;
    if (input.domain === null) delete next.domain;
    else if (input.domain !== undefined) next.domain = input.domain.toLowerCase();
    const written = await this.save(next, rate);
    if (written) return written;
    return { ok: true, value: { project: view(next) }, rate };
  }

  async deleteProject(meta: RequestMeta, projectId: string): Promise<Outcome<{ ok: true }>> {
    const gate = this.parts.admission.admitChange(meta, projectId);
    if (!gate.ok) return gate;
    const { rate } = gate.value;
    // Gone for every request from here on: its keys answer 401, its metrics 404, nothing more is appended for it.
    this.projects.delete(projectId);
    const removed = await this.write(() => this.catalog.deleteProject(projectId), rate);
    if (removed) return removed;
    const erased = await this.write(() => this.backend.eraseProject(projectId), rate);
    if (erased) return erased;
    return { ok: true, value: { ok: true }, rate };
  }

  /** The catalog changed (here or on another node): keep creation order, so cursors never skip a project. */
  private sync(id: string): void {
    const p = this.catalog.project(id);
    if (!p) {
      this.projects.delete(id);
      return;
    }
    const had = this.projects.has(id);
    this.projects.set(id, p);
    if (p.createdAt > this.lastCreatedAt) this.lastCreatedAt = p.createdAt;
    if (!had) {
      const last = [...this.projects.values()].at(-2);
      if (last && byCreation(last, p) > 0) {
        const sorted = [...this.projects.values()].sort(byCreation);
        this.projects.clear();
        for (const q of sorted) this.projects.set(q.id, q);
      }
    }
  }
}

/** A body the JSON guard refuses (depth, size, keys) is an invalid_request naming the place. */
function unsafeBody(body: unknown, rate: RateInfo): Fail | undefined {
  const guard = guardJson(body);
  return guard.ok ? undefined : fail('invalid_request', guard.message, { details: [{ path: guard.path, message: guard.message }] }, rate);
}

/** The wire's rate_limit object as the project record holds it (absent fields = the service defaults). */
function rateOf(r: { per_key?: number | undefined; burst_per_key?: number | undefined; per_ip?: number | undefined; burst_per_ip?: number | undefined }): NonNullable<ProjectRecord['rate']> {
  const out: NonNullable<ProjectRecord['rate']> = {};
  if (r.per_key !== undefined) out.perKey = r.per_key;
  if (r.burst_per_key !== undefined) out.burstPerKey = r.burst_per_key;
  if (r.per_ip !== undefined) out.perIp = r.per_ip;
  if (r.burst_per_ip !== undefined) out.burstPerIp = r.burst_per_ip;
  return out;
}

function byCreation(a: ProjectRecord, b: ProjectRecord): number {
  return a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

function view(p: ProjectRecord): ProjectView {
  return {
    id: p.id,
    name: p.name,
    allowed_origins: p.allowedOrigins,
    allowed_referrers: p.allowedReferrers,
    timezone: p.timezone,
    monthly_quota: p.monthlyQuota,
    created_at: new Date(p.createdAt).toISOString(),
    tracked_props: p.trackedProps ?? [],
    ...(p.domain !== undefined ? { domain: p.domain } : {}),
  };
}
