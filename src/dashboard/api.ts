import type { Breakdown, MetricsResponse, RealtimeResponse } from '../core/types.ts';

/**
 * The dashboard's only way to the service: same-origin GETs with the key in the Authorization header, never in the
 * URL, never with cookies, never with a Referer. Every outcome, including "the service is not there", is a value.
 */

export type { Breakdown };

/** The insight figures, optional here so the page also works against a service without them. */
type Insights = 'compare' | 'entryPages' | 'browsers' | 'operatingSystems' | 'utmMediums' | 'utmCampaigns' | 'revenue' | 'props';

/** GET /metrics as the page reads it: the service's own answer type, with the insight figures optional. */
export type Metrics = Omit<MetricsResponse, Insights> & Partial<Pick<MetricsResponse, Insights>>;

/** GET /metrics/realtime: the service's own answer type. */
export type Realtime = RealtimeResponse;

export interface Project {
  id: string;
  name: string;
  timezone: string;
  /** events a month; 0: unlimited (absent from older services) */
  monthly_quota?: number;
}

export type Answer<T> = { ok: true; value: T } | Refusal;

export interface Refusal {
  ok: false;
  /** 0: no answer at all (network down, service stopped) */
  status: number;
  code: string;
  message: string;
  /** seconds, from Retry-After */
  retryAfter?: number;
}

/** Never send more than this many pages of GET /projects (100 each by default): a picker of 10,000 is plenty. */
const MAX_PROJECT_PAGES = 100;

export function get<T>(path: string, key: string, params: Record<string, string | undefined> = {}): Promise<Answer<T>> {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value !== undefined) query.set(name, value);
  const qs = query.toString();
  return request<T>(qs ? `${path}?${qs}` : path, key);
}

export function post<T>(path: string, key: string, body: unknown): Promise<Answer<T>> {
  return request<T>(path, key, { method: 'POST', body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } });
}

export function del<T>(path: string, key: string): Promise<Answer<T>> {
  return request<T>(path, key, { method: 'DELETE' });
}

async function request<T>(url: string, key: string, init: { method?: string; body?: string; headers?: Record<string, string> } = {}): Promise<Answer<T>> {
  let res: Response;
  try {
    res = await fetch(url, {
      ...init,
      headers: { ...init.headers, Authorization: `Bearer ${key}` },
      credentials: 'omit',
      cache: 'no-store',
      referrerPolicy: 'no-referrer',
    });
  } catch {
    return { ok: false, status: 0, code: 'unreachable', message: 'no answer' };
  }
  let body: unknown;
  try {
    body = await res.json();
  } catch {
    body = undefined;
  }
  if (res.ok && body !== undefined) return { ok: true, value: body as T };
  const error = (body as { error?: { code?: string; message?: string } } | undefined)?.error;
  const retry = Number(res.headers.get('Retry-After'));
  const refusal: Refusal = { ok: false, status: res.status, code: error?.code ?? 'unknown', message: error?.message ?? res.statusText };
  if (Number.isFinite(retry) && retry > 0) refusal.retryAfter = retry;
  return refusal;
}

/** Every project the key may see, following `next_cursor` when the service pages its answer. */
export async function listProjects(key: string): Promise<Answer<Project[]>> {
  const all: Project[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < MAX_PROJECT_PAGES; page++) {
    const res = await get<{ projects: Project[]; next_cursor?: string | null }>('projects', key, { cursor });
    if (!res.ok) return res;
    all.push(...res.value.projects);
    cursor = res.value.next_cursor ?? undefined;
    if (!cursor) break;
  }
  return { ok: true, value: all };
}

/** What a person should read for a refusal; 401 and 403 carry the words the contract promises. */
export function describe(r: Refusal): string {
  if (r.status === 401) return 'That is an invalid key, or it has been revoked or has expired. Check it and sign in again.';
  if (r.status === 403) return `This key is not allowed to read these figures (${r.message}).`;
  if (r.status === 429) {
    const wait = r.retryAfter ? ` Trying again in ${r.retryAfter} s.` : '';
    return r.code === 'quota_exceeded' ? `The project is over its monthly quota.${wait}` : `Too many requests for this key right now.${wait}`;
  }
  if (r.status === 0 || r.status === 502 || r.status === 503 || r.status === 504) {
    return 'The analytics service is not reachable: it may be down or restarting. Trying again shortly.';
  }
  if (r.status === 404) return `Not found: ${r.message}. The project may have been deleted.`;
  if (r.status >= 500) return `The service failed to answer (${r.status}). Trying again shortly.`;
  return `The service refused the request: ${r.message}`;
}
