import { createHash } from 'node:crypto';
import { createReadStream, statSync } from 'node:fs';
import { createInterface } from 'node:readline';
import type { Command } from 'commander';
import { MAX_BATCH_EVENTS, MAX_BODY_BYTES } from '../../core/limits.ts';
import { CliError } from '../errors.ts';
import { progress } from '../progress.ts';
import { describe, errorCode, print, Remote, remote, type RemoteOptions } from '../remote.ts';

/**
 * `analytics import --project ID FILE.ndjson`: one JSON event per line, sent through the normal ingest path
 * (POST /analytics) in batches of 500. A line without an `eventId` gets one derived from its line number and text, so
 * running the same file again stores nothing twice (within the service's 48 h idempotency window).
 */

/** Leave room under the 1 MiB body limit for the array brackets and commas. */
const MAX_BATCH_BYTES = MAX_BODY_BYTES - 64 * 1024;
/** A 429 is retried after Retry-After this many times before giving up. */
const MAX_RETRIES = 10;

export function derivedEventId(projectId: string, lineNumber: number, line: string): string {
  return `imp_${createHash('sha256').update(`${projectId}\n${lineNumber}\n${line}`).digest('base64url').slice(0, 40)}`;
}

export function registerImport(program: Command): void {
  remote(
    program
      .command('import')
      .description('send the events of an NDJSON file (one event per line) through the ingest path; re-runs count nothing twice')
      .requiredOption('--project <id>', 'project id')
      .argument('<file>', 'NDJSON file'),
    // Ingest takes project keys only: an admin key is refused (403) by POST /analytics.
    'the project\'s sk_ key (an ak_ admin key is refused: ingest takes project keys)',
  ).action(async (file: string, opts: RemoteOptions & { project: string }) => {
    const api = new Remote(opts);
    let size: number;
    try {
      size = statSync(file).size;
    } catch {
      throw new CliError(`cannot read ${file}`);
    }
    const bar = progress('import', size);
    let batch: unknown[] = [];
    let batchBytes = 0;
    let lines = 0;
    let sent = 0;
    let bytesRead = 0;
    const flush = async () => {
      if (batch.length === 0) return;
      for (let attempt = 0; ; attempt++) {
        const res = await api.send('POST', '/analytics', batch);
        if (res.ok) break;
        if (res.status === 429 && errorCode(res.body) === 'rate_limited' && attempt < MAX_RETRIES) {
          await new Promise((r) => setTimeout(r, (res.retryAfter ?? 1) * 1000));
          continue;
        }
        const first = lines - batch.length + 1;
        throw new CliError(`lines ${first}-${lines} were refused (${sent} events before them were stored): ${describe(res.status, res.body)}`);
      }
      sent += batch.length;
      batch = [];
      batchBytes = 0;
      bar.update(bytesRead);
    };
    try {
      const rl = createInterface({ input: createReadStream(file), crlfDelay: Infinity });
      for await (const line of rl) {
        lines++;
        bytesRead += Buffer.byteLength(line) + 1;
        if (line.trim() === '') continue;
        let event: unknown;
        try {
          event = JSON.parse(line);
        } catch {
          throw new CliError(`line ${lines} is not JSON (${sent} events before it were stored)`);
        }
        if (typeof event !== 'object' || event === null || Array.isArray(event)) throw new CliError(`line ${lines} is not a JSON object`);
        const e: Record<string, unknown> = { ...(event as Record<string, unknown>), projectId: opts.project };
        if (e.eventId === undefined) e.eventId = derivedEventId(opts.project, lines, line);
        const bytes = Buffer.byteLength(JSON.stringify(e)) + 1;
        if (batch.length >= MAX_BATCH_EVENTS || batchBytes + bytes > MAX_BATCH_BYTES) await flush();
        batch.push(e);
        batchBytes += bytes;
      }
      await flush();
    } finally {
      bar.stop();
    }
    print(opts.json, { ok: true, lines, sent }, () => `sent ${sent} events from ${lines} lines (repeats of earlier runs are acknowledged and not counted again)`);
  });
}
