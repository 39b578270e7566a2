/**
 * Server-side analytics from an edge function (Cloudflare Workers; the same shape works on Deno Deploy and Vercel
 * Edge): record events while handling the request, answer at once, and let the runtime finish delivery after the
 * response with `ctx.waitUntil(analytics.flush())`. The client uses web APIs only (fetch, timers, crypto.randomUUID,
 * TextEncoder), so it bundles for the neutral platform with no `node:` import.
 *
 * test/edge-runtime.test.ts bundles this file with esbuild and runs it in workerd (the Workers runtime) and in a
 * node:vm context that has web globals only, against a real service. Your worker imports '@privacy-analytics/client'.
 */
import { createClient, type AnalyticsClient } from '../clients/typescript/src/index.ts';

export interface Env {
  ANALYTICS_ENDPOINT: string; // https://analytics.example.com/analytics
  ANALYTICS_KEY: string; // the project's sk_ key, kept as a secret of the worker
  ANALYTICS_PROJECT: string;
}

/** What the runtime hands a fetch handler; Workers, Vercel Edge and Deno's adapters all offer waitUntil. */
export interface ExecutionContext {
  waitUntil(promise: Promise<unknown>): void;
}

// One client per isolate: its queue batches the events of concurrent requests into one POST.
let analytics: AnalyticsClient | undefined;

export default {
  async fetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
    analytics ??= createClient({
      apiKey: env.ANALYTICS_KEY,
      projectId: env.ANALYTICS_PROJECT,
      endpoint: env.ANALYTICS_ENDPOINT,
      // an isolate may be frozen between requests: send on flush(), not on a timer
      flushIntervalMs: 60_000,
    });
    const url = new URL(request.url);
    const sessionId = request.headers.get('x-session-id') ?? crypto.randomUUID();
    analytics.pageView({ url: url.pathname, referrer: request.headers.get('referer') ?? '', sessionId });
    if (url.searchParams.has('signup')) analytics.track('signup', { plan: url.searchParams.get('signup') }, { sessionId });

    const response = new Response(`hello from the edge: ${url.pathname}\n`, { headers: { 'content-type': 'text/plain' } });
    // Delivery continues after the response is sent; flush() settles (never rejects) once the queue is empty.
    ctx.waitUntil(analytics.flush());
    return response;
  },
};
