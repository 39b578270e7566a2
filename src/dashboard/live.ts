import { get, type Realtime } from './api.ts';
import { fillLive } from './view.ts';

/**
 * Visitors right now: GET /metrics/realtime every 15 s while the tab is visible (and at once when it becomes
 * visible again), drawn into the #live tile. A service without the endpoint leaves the tile hidden.
 */

/** Often enough to feel live, rare enough to cost nothing: 4 small reads a minute per open tab. */
const REALTIME_POLL_MS = 15_000;

export interface LiveTarget {
  key: string;
  /** admin keys name the project */
  projectId: string | undefined;
}

let target: (() => LiveTarget | undefined) | undefined;
let timer: ReturnType<typeof setInterval> | undefined;
let seq = 0;
let supported = true;

export function startLive(current: () => LiveTarget | undefined): void {
  stopLive();
  if (!supported) return;
  target = current;
  void poll();
  timer = setInterval(() => {
    if (document.visibilityState === 'visible') void poll();
  }, REALTIME_POLL_MS);
}

export function stopLive(): void {
  clearInterval(timer);
  timer = undefined;
  seq++; // an answer still on its way is for a view that is gone
}

async function poll(): Promise<void> {
  const t = target?.();
  if (!t) return;
  const mine = ++seq;
  const r = await get<Realtime>('metrics/realtime', t.key, { projectId: t.projectId });
  if (mine !== seq) return;
  if (r.ok) {
    const el = document.getElementById('live');
    if (el) fillLive(el, r.value);
  } else if (r.status === 404 && r.code === 'not_found' && /route/.test(r.message)) {
    supported = false; // an older service without realtime figures
    stopLive();
  }
  // Other failures keep the last figure: the main view reports problems with the key or the service.
}

document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible' && timer !== undefined) void poll();
});
