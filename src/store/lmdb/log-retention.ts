import type { LogRecord } from '../../core/types.ts';
import type { LogAppender } from './log-append.ts';
import { entryCount } from './log-entry-format.ts';
import { LOG_START, STRUCTURES_KEY, type LmdbEnv } from './log-env.ts';
import type { LogReader } from './log-read.ts';
import type { IdKey } from './remembered-ids.ts';

/** Records removed per retention transaction: keeps each commit short. */
const DELETE_SLICE = 10_000;

/** Cuts the log: its start (retention) or its end (repair). Neither runs while a compaction copies. */
export class LogRetention {
  constructor(
    private readonly env: LmdbEnv,
    private readonly reader: LogReader,
    private readonly appender: LogAppender,
  ) {}

  /**
   * Retention: removes the entries wholly below `seq` (an entry holds a batch and goes whole, so the log then starts
   * at the first entry reaching `seq` or beyond), in slices. The `logStart` marker is written first, so a crash
   * midway leaves a log that says where it starts (entries left below it are skipped and removed next time).
   * Key 0 (msgpackr's shared structures) stays. Returns how many records were removed.
   */
  async deleteBelow(seq: number): Promise<number> {
    const env = this.env;
    while (env.copyGate ?? env.gate) await (env.copyGate ?? env.gate);
    const start = this.reader.logStart();
    if (seq <= start) return 0;
    let cut = start;
    for (const { key, value } of env.raw.getRange({ start })) {
      if (key === STRUCTURES_KEY) continue;
      const end = key + entryCount(value);
      if (end > seq) break;
      cut = end;
    }
    if (cut <= start) return 0;
    await env.meta.put(LOG_START, cut);
    env.start = cut;
    await env.root.flushed;
    for (;;) {
      const keys = [...env.raw.getKeys({ start: STRUCTURES_KEY + 1, end: cut, limit: DELETE_SLICE })];
      if (keys.length === 0) break;
      await env.log.transaction(() => {
        for (const key of keys) env.raw.removeSync(key);
      });
    }
    await env.root.flushed;
    return cut - start;
  }

  /**
   * Repair (`analytics repair`, an explicit operator action on a stopped service): removes the log entry at `seq`
   * (the first one that failed verification) and every entry after it, in one transaction, so the log ends where it
   * was last trustworthy and stays continuous. The eventIds those records carried are forgotten in the same
   * transaction (a resend must count again, not be taken for a duplicate): those of every removed entry that still
   * decodes, and every remembered id received after the newest kept record (covers the damaged entry's own ids,
   * which cannot be read). Returns the removed sequence range (`from` > `to` when nothing went).
   */
  async cutFrom(seq: number): Promise<{ from: number; to: number; forgottenIds: number }> {
    const env = this.env;
    while (env.copyGate ?? env.gate) await (env.copyGate ?? env.gate);
    const before = this.appender.lastSeq();
    let forgottenIds = 0;
    await env.root.transaction(() => {
      // the newest receive time the kept log holds (the entry just before the cut; the log is in receive order)
      let keptRt = -Infinity;
      for (const { key, value } of env.raw.getRange({ start: seq - 1, reverse: true, limit: 1 })) {
        if (key === STRUCTURES_KEY) break;
        const recs = this.reader.entryRecords(key, value).records ?? [];
        for (const r of recs) if ('rt' in r && typeof r.rt === 'number') keptRt = Math.max(keptRt, r.rt);
      }
      const forget = new Set<string>();
      const ids: IdKey[] = [];
      for (const { key, value } of env.raw.getRange({ start: Math.max(seq, STRUCTURES_KEY + 1) })) {
        let recs: LogRecord[] = [];
        try {
          recs = this.reader.entryRecords(key, value).records ?? [];
        } catch {
          // the damaged entry: its ids are caught by the receive-time sweep below
        }
        for (const r of recs) {
          if (r.t === 'e' && r.eventId !== undefined && !forget.has(`${r.p}\u0000${r.eventId}`)) {
            forget.add(`${r.p}\u0000${r.eventId}`);
            ids.push([r.p, r.eventId]);
          }
        }
        env.raw.removeSync(key);
      }
      for (const { key, value } of env.eventIds.getRange()) {
        if (value > keptRt && !forget.has(`${key[0]}\u0000${key[1]}`)) ids.push(key);
      }
      for (const k of ids) if (env.eventIds.removeSync(k)) forgottenIds++;
    });
    await env.root.flushed;
    this.appender.recount();
    return { from: this.appender.lastSeq() + 1, to: before, forgottenIds };
  }
}
