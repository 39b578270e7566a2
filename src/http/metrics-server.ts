import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { OperatorMetrics } from '../engine/operator-metrics.ts';

/**
 * The operator metrics listener: `GET /metrics` in the Prometheus text format, no auth, on its own port (bound to
 * HOST like the rest), so the public port never exposes it and a scraper never competes with ingest for limits.
 */
export async function startMetricsServer(ops: OperatorMetrics, host: string, port: number): Promise<{ port: number; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== '/metrics') {
      res.writeHead(404, { 'Content-Type': 'text/plain; charset=utf-8' }).end('only GET /metrics here\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { Allow: 'GET, HEAD', 'Content-Type': 'text/plain; charset=utf-8' }).end('GET /metrics\n');
      return;
    }
    ops.text().then(
      (text) => res.writeHead(200, { 'Content-Type': ops.contentType, 'Cache-Control': 'no-store' }).end(req.method === 'HEAD' ? undefined : text),
      (err: unknown) => {
        console.error('metrics collection failed:', err);
        res.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8' }).end('metrics collection failed\n');
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
