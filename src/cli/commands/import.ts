import { convert, SOURCES } from '../convert.ts';
import { createHash } from 'node:crypto';
import { createReadStream, statSync } from 'node:fs';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { parse } from 'csv-parse';
import { type Command, Option } from 'commander';
import { MAX_BATCH_EVENTS, MAX_BODY_BYTES } from '../../core/limits.ts';
import { CliError } from '../errors.ts';
import { progress } from '../progress.ts';
import { describe, errorCode, print, Remote, remote, type RemoteOptions } from '../remote.ts';

/**
 * `analytics import --project ID FILE`: NDJSON (one event a line) or CSV (a header row naming the fields), `-` for
 * stdin, sent through POST /projects/{id}/history in batches of 500, so events of any day since 2000 count in their
 * own day. A line without an `eventId` gets one derived from its text, so running the file again counts nothing
 * twice. A refused line never stops the rest: a batch refused with per-event details is sent again without the bad
 * lines, and the summary lists every refused line by number.
 */

/** Leave room under the 1 MiB body limit for the array brackets and commas. */
const MAX_BATCH_BYTES = MAX_BODY_BYTES - 64 * 1024;
/** A 429 or 503 is retried (after Retry-After, else a second) this many times before giving up. */
const MAX_RETRIES = 30;
/**
 * Batches in flight at once, one per lane. Sending one batch at a time waits for one log flush (fsync) per 500
 * events; lanes let the service commit several batches in one flush. A visit's events all go to the same lane
 * (by sessionId, else userId, else fingerprint), in file order, so its first event is folded first as it was. Two,
 * not four: the same rate within the noise (1M events, alternating runs: 33–49k against 28–43k events/s), and a
 * request to the service waits behind half as many batches (`/health` longest 37–70 ms against 88–113 ms).
 */
const LANES = 2;
/**
 * A lane's first batches; every second one doubles, up to MAX_BATCH_EVENTS. The service's code is cold for an
 * import's first thousands of events: two full batches in it held its event loop for 37–77 ms in the first second of
 * bench/history.ts (a few ms once warm), the longest turns of the whole import. Ten smaller round trips cost nothing.
 */
const FIRST_BATCH_EVENTS = 16;
/** The events a lane's next batch holds once it has sent `sent` batches (see FIRST_BATCH_EVENTS). */
const batchLimit = (sent: number): number => Math.min(MAX_BATCH_EVENTS, FIRST_BATCH_EVENTS * 2 ** Math.floor(sent / 2));
/** Refused lines listed in the text summary; --json lists them all. */
const LISTED_REFUSALS = 20;

export function derivedEventId(projectId: string, line: string): string {
  return `imp_${createHash('sha256').update(`${projectId}\n${line}`).digest('base64url').slice(0, 40)}`;
}

interface Line {
  n: number;
  event: Record<string, unknown>;
  /** the event as sent, encoded once */
  json: string;
  bytes: number;
}

interface Refusal {
  line: number;
  message: string;
}

type Parsed = { line: Line } | { refused: Refusal };

const KNOWN_SCALARS = new Set(['event', 'url', 'referrer', 'sessionId', 'userId', 'fingerprint', 'country', 'device', 'source', 'browser', 'os', 'eventId']);

/** One CSV record as an event: known columns as fields, `timestamp` as ms when all digits, JSON columns parsed. */
export function csvEvent(row: Record<string, string>): Record<string, unknown> | string {
  const e: Record<string, unknown> = {};
  let params: Record<string, unknown> | undefined;
  for (const [column, value] of Object.entries(row)) {
    if (value === '' || value === undefined) continue;
    if (column === 'timestamp' || column === 'ts') e.timestamp = /^\d+$/.test(value) ? Number(value) : value;
    else if (column === 'eventParams' || column === 'params' || column === 'items') {
      try {
        e[column === 'items' ? 'items' : 'eventParams'] = JSON.parse(value);
      } catch {
        return `column ${column} is not JSON`;
      }
    } else if (column.startsWith('param.') || column.startsWith('eventParams.')) {
      (params ??= {})[column.slice(column.indexOf('.') + 1)] = value;
    } else if (KNOWN_SCALARS.has(column)) e[column] = value;
    else e[column] = value; // page context
  }
  if (params) e.eventParams = { ...(e.eventParams as Record<string, unknown> | undefined), ...params };
  return e;
}

/** The lane of an event: its visit's key (FNV-1a), so one visit's events keep their order. */
function laneOf(e: Record<string, unknown>): number {
  const key = String(e.sessionId ?? e.userId ?? e.fingerprint ?? '');
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
  return (h >>> 0) % LANES;
}

/**
 * `text`: the line as read. A line with an eventId and no projectId is sent as it is (re-encoding it is the
 * largest part of this process's work); any other is sent re-encoded without projectId, with its derived eventId.
 */
function toLine(projectId: string, n: number, text: string, value: unknown, fromText: boolean): Parsed {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return { refused: { line: n, message: 'not a JSON object' } };
  const given = value as Record<string, unknown>;
  if (fromText && given.eventId !== undefined && !Object.hasOwn(given, 'projectId')) {
    return { line: { n, event: given, json: text, bytes: Buffer.byteLength(text) + 1 } };
  }
  const event = { ...given };
  delete event.projectId; // the project is the one named by --project
  if (event.eventId === undefined) event.eventId = derivedEventId(projectId, text);
  const json = JSON.stringify(event);
  return { line: { n, event, json, bytes: Buffer.byteLength(json) + 1 } };
}

/** Rows of another service's export (`--from`) become events (../convert.ts); without it a row is one of ours. */
type Convert = ((row: Record<string, unknown>) => Record<string, unknown>) | undefined;

async function* ndjson(input: Readable, projectId: string, onBytes: (n: number) => void, convertRow: Convert): AsyncGenerator<Parsed> {
  let n = 0;
  for await (const text of createInterface({ input, crlfDelay: Infinity })) {
    n++;
    onBytes(Buffer.byteLength(text) + 1);
    if (text.trim() === '') continue;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      yield { refused: { line: n, message: 'not JSON' } };
      continue;
    }
    if (convertRow && (typeof value !== 'object' || value === null || Array.isArray(value))) {
      yield { refused: { line: n, message: 'not a JSON object' } };
      continue;
    }
    yield convertRow ? toLine(projectId, n, text, convertRow(value as Record<string, unknown>), false) : toLine(projectId, n, text, value, true);
  }
}

async function* csv(input: Readable, projectId: string, onBytes: (n: number) => void, convertRow: Convert): AsyncGenerator<Parsed> {
  const parser = input.pipe(parse({ columns: true, info: true, skip_empty_lines: true, relax_column_count: true, bom: true }));
  let lastBytes = 0;
  for await (const { record, info } of parser as AsyncIterable<{ record: Record<string, string>; info: { lines: number; bytes: number } }>) {
    onBytes(info.bytes - lastBytes);
    lastBytes = info.bytes;
    const e = convertRow ? convertRow(record) : csvEvent(record);
    if (typeof e === 'string') yield { refused: { line: info.lines, message: e } };
    else yield toLine(projectId, info.lines, JSON.stringify(record), e, false);
  }
}

/** The first bytes decide: NDJSON when the first non-blank character is `{`, else CSV. */
async function sniff(input: Readable): Promise<{ format: 'ndjson' | 'csv'; input: Readable }> {
  const { PassThrough } = await import('node:stream');
  const out = new PassThrough();
  let decided: 'ndjson' | 'csv' | undefined;
  return new Promise((resolve, reject) => {
    input.on('error', reject);
    input.on('data', (chunk: Buffer) => {
      if (decided === undefined) {
        const text = chunk.toString('utf8').replace(/^\uFEFF/, '').trimStart();
        if (text !== '') {
          decided = text.startsWith('{') ? 'ndjson' : 'csv';
          resolve({ format: decided, input: out });
        }
      }
      if (!out.write(chunk)) {
        input.pause();
        out.once('drain', () => input.resume());
      }
    });
    input.on('end', () => {
      out.end();
      if (decided === undefined) resolve({ format: 'ndjson', input: out });
    });
  });
}

export function registerImport(program: Command): void {
  remote(
    program
      .command('import')
      .description('send the events of an NDJSON or CSV file through POST /projects/{id}/history; re-runs count nothing twice')
      .requiredOption('--project <id>', 'project id')
      .addOption(new Option('--format <format>', 'input format (default: by the file name, else by its first character)').choices(['ndjson', 'csv']))
      .addOption(new Option('--from <service>', 'the file is a raw-event export of another service (docs/history.md says how to make one)').choices(SOURCES))
      .argument('<file>', 'NDJSON or CSV file, or - for stdin'),
    // The history route is a project-management call: an admin key or the project's own secret key.
    'the project\'s sk_ key or an ak_ admin key (POST /projects/{id}/history takes both; pk_ and rk_ are refused)',
  ).action(async (file: string, opts: RemoteOptions & { project: string; format?: 'ndjson' | 'csv'; from?: string }) => {
    const convertRow: Convert = opts.from === undefined ? undefined : (row) => convert(opts.from!, row);
    const api = new Remote(opts);
    let input: Readable;
    let size = 0;
    if (file === '-') input = process.stdin;
    else {
      try {
        size = statSync(file).size;
      } catch {
        throw new CliError(`cannot read ${file}`);
      }
      input = createReadStream(file);
    }
    let format = opts.format ?? (/\.csv$/i.test(file) ? 'csv' : /\.(nd)?jsonl?$/i.test(file) ? 'ndjson' : undefined);
    if (format === undefined) ({ format, input } = await sniff(input));
    const route = `/projects/${encodeURIComponent(opts.project)}/history`;
    const bar = progress('import', size);
    let bytesRead = 0;
    let lines = 0;
    let accepted = 0;
    let duplicates = 0;
    const refused: Refusal[] = [];
    const lanes = Array.from({ length: LANES }, () => ({ batch: [] as Line[], bytes: 0, sent: 0, inflight: Promise.resolve() }));
    let failure: unknown;

    const send = async (part: Line[]): Promise<void> => {
      let pending = part;
      while (pending.length > 0) {
        const res = await api.send('POST', route, undefined, `[${pending.map((l) => l.json).join(',')}]`);
        if (res.ok) {
          const body = res.body as { accepted: number; duplicates: number };
          accepted += body.accepted;
          duplicates += body.duplicates;
          return;
        }
        const code = errorCode(res.body);
        if ((res.status === 429 && code === 'rate_limited') || res.status === 503) {
          pending = await retry(pending, res.retryAfter);
          continue;
        }
        const details = (res.body as { error?: { details?: Array<{ index?: number; path?: string; message?: string }> } }).error?.details;
        const bad = new Map<number, string>();
        if (res.status === 400 && code === 'invalid_event' && Array.isArray(details)) {
          for (const d of details) {
            if (typeof d.index !== 'number' || d.index < 0 || d.index >= pending.length) continue;
            const message = `${d.path ? `${d.path}: ` : ''}${d.message ?? 'refused'}`;
            bad.set(d.index, bad.has(d.index) ? `${bad.get(d.index)}; ${message}` : message);
          }
        }
        if (bad.size === 0) {
          if (res.status === 401 || res.status === 403 || res.status === 404) throw new CliError(describe(res.status, res.body));
          // refused as a whole, without saying which event: every line of it is reported
          for (const l of pending) refused.push({ line: l.n, message: describe(res.status, res.body) });
          return;
        }
        for (const [i, message] of bad) refused.push({ line: pending[i]!.n, message });
        pending = pending.filter((_, i) => !bad.has(i));
      }
    };
    const attempts = new WeakMap<Line[], number>();
    const retry = async (pending: Line[], after: number | undefined): Promise<Line[]> => {
      const n = (attempts.get(pending) ?? 0) + 1;
      if (n > MAX_RETRIES) throw new CliError(`the service kept refusing for now (429/503); stopped at line ${pending[0]!.n}: ${accepted} accepted before`);
      attempts.set(pending, n);
      await new Promise((r) => setTimeout(r, (after ?? 1) * 1000));
      return pending;
    };
    /** Sends the lane's batch once its previous one is answered; the reader goes on meanwhile. */
    const flush = async (lane: (typeof lanes)[number]) => {
      await lane.inflight;
      if (failure !== undefined) throw failure;
      if (lane.batch.length === 0) return;
      const part = lane.batch;
      lane.batch = [];
      lane.bytes = 0;
      lane.sent++;
      lane.inflight = send(part).then(
        () => bar.update(bytesRead),
        (err: unknown) => {
          failure ??= err;
        },
      );
    };
    try {
      const parsed = format === 'csv' ? csv(input, opts.project, (n) => (bytesRead += n), convertRow) : ndjson(input, opts.project, (n) => (bytesRead += n), convertRow);
      for await (const p of parsed) {
        lines++;
        if ('refused' in p) {
          refused.push(p.refused);
          continue;
        }
        const lane = lanes[laneOf(p.line.event)]!;
        if (lane.batch.length >= batchLimit(lane.sent) || lane.bytes + p.line.bytes > MAX_BATCH_BYTES) await flush(lane);
        lane.batch.push(p.line);
        lane.bytes += p.line.bytes;
      }
      for (const lane of lanes) await flush(lane);
      for (const lane of lanes) await lane.inflight;
      if (failure !== undefined) throw failure;
    } finally {
      bar.stop();
    }
    refused.sort((a, b) => a.line - b.line);
    const summary = { ok: refused.length === 0, lines, accepted, duplicates, sent: accepted + duplicates, refused };
    print(opts.json, summary, () => {
      const head = `imported ${lines} lines: ${accepted} accepted, ${duplicates} duplicates (seen before), ${refused.length} refused`;
      const listed = refused.slice(0, LISTED_REFUSALS).map((r) => `\n  line ${r.line}: ${r.message}`).join('');
      const more = refused.length > LISTED_REFUSALS ? `\n  ... and ${refused.length - LISTED_REFUSALS} more (--json lists them all)` : '';
      return head + listed + more;
    });
    if (refused.length > 0) throw new CliError(`${refused.length} line${refused.length === 1 ? ' was' : 's were'} refused (listed above); the others were imported`);
  });
}
