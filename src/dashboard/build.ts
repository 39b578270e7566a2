import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

/**
 * Builds the dashboard (app.ts and the CSS it imports, uPlot's included) into one script, one stylesheet and the
 * HTML page that loads them, all served by the HTTP face under /dashboard. Built once per process on first
 * request, like the tracker: later calls share the same promise.
 */

export interface DashboardAsset {
  /** path under /dashboard/, with the content hash in it (cached forever) */
  name: string;
  contentType: string;
  body: Buffer;
  /** `body` gzipped once (-9), served when the request accepts gzip */
  gzip: Buffer;
}

export interface DashboardBuild {
  html: DashboardAsset;
  /** the script and the stylesheet, by `name` */
  assets: Map<string, DashboardAsset>;
  /** what a browser downloads for a first visit: page + script + stylesheet, gzipped */
  gzipBytes: number;
}

/** 16 hex chars = 64 bits: two dashboard builds never share a name. */
const HASH_CHARS = 16;
const ENTRY = fileURLToPath(new URL('./app.ts', import.meta.url));

let cached: Promise<DashboardBuild> | undefined;

export function buildDashboard(): Promise<DashboardBuild> {
  cached ??= bundle().catch((error: unknown) => {
    cached = undefined; // a failed build must not be remembered; the next request tries again
    throw error;
  });
  return cached;
}

function asset(name: string, contentType: string, text: string): DashboardAsset {
  const body = Buffer.from(text);
  return { name, contentType, body, gzip: gzipSync(body, { level: 9 }) };
}

function hashed(stem: string, ext: string, text: string): string {
  return `${stem}.${createHash('sha256').update(text).digest('hex').slice(0, HASH_CHARS)}.${ext}`;
}

async function bundle(): Promise<DashboardBuild> {
  const esbuild = await import('esbuild');
  const result = await esbuild.build({
    entryPoints: [ENTRY],
    bundle: true,
    write: false,
    outdir: 'out', // names only: nothing is written
    minify: true,
    format: 'iife',
    platform: 'browser',
    target: 'es2020', // every browser still in use; uPlot needs nothing newer
    legalComments: 'none',
    charset: 'utf8',
    logLevel: 'silent',
  });
  const js = result.outputFiles.find((f) => f.path.endsWith('.js'))?.text;
  const css = result.outputFiles.find((f) => f.path.endsWith('.css'))?.text;
  if (js === undefined || css === undefined) throw new Error('esbuild produced no dashboard script or stylesheet');
  const script = asset(hashed('app', 'js', js), 'application/javascript; charset=utf-8', js);
  const style = asset(hashed('app', 'css', css), 'text/css; charset=utf-8', css);
  const html = asset('', 'text/html; charset=utf-8', page(script.name, style.name));
  return {
    html,
    assets: new Map([script, style].map((a) => [a.name, a])),
    gzipBytes: html.gzip.length + script.gzip.length + style.gzip.length,
  };
}

/**
 * The page works before the script runs: the sign-in form is in the HTML. Its input has no `name`, so even a
 * submission without the script could not put the key in a URL (and the CSP forbids form submission anyway).
 * Paths are relative ("dashboard/…" from /dashboard) so the service can sit behind a path prefix.
 */
function page(script: string, style: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<meta name="referrer" content="no-referrer">
<title>Analytics</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="dashboard/${style}">
<script defer src="dashboard/${script}"></script>
</head>
<body>
<a class="skip" href="#main">Skip to figures</a>
<div id="app">
<main id="signin" class="signin">
<h1>Analytics</h1>
<form id="signin-form" autocomplete="off" novalidate>
<label for="key">API key</label>
<p id="key-help" class="hint">A read-only <code>rk_</code> key, the project's secret <code>sk_</code> key, or an admin <code>ak_</code> key. It stays in this tab only.</p>
<input id="key" type="password" aria-describedby="key-help signin-error" autocomplete="off" spellcheck="false" required>
<button type="submit">Sign in</button>
<p id="signin-error" class="error" role="alert"></p>
</form>
<noscript><p class="error">The dashboard needs JavaScript.</p></noscript>
</main>
</div>
</body>
</html>
`;
}
