import type { LogRecord } from '../../core/types.ts';
import { ERASED } from '../records.ts';
import type { LogDictionaries } from './log-dictionaries.ts';
import { checkEntry, entryCount, FORMAT2_FROM_KEY, KIND_TOMBSTONE, LogDamage, unwrap, type CheckedEntry } from './log-entry-format.ts';
import { STRUCTURES_KEY, type LmdbEnv } from './log-env.ts';
import type { LoggedId } from './remembered-ids.ts';

/** Receive times may step back by this much (a clock correction) when the log is searched by receive time. */
const RECEIVE_CLOCK_SLACK_MS = 3_600_000;
/** A bisection probe gives up on a run of erased records this long and treats its spot as inside the window. */
const BISECT_SKIP_ERASED = 10_000;

/** The records of one stored value: undefined for a tombstone; `entry` undefined for a first-format record. */
export interface EntryRecords {
  count: number;
  records: LogRecord[] | undefined;
  entry: CheckedEntry | undefined;
}

/** Reads the log, verifying every entry as it goes. */
export class LogReader {
  /** Records verified by readAfter since the store was opened (health reports the last verification). */
  verified = 0;
  /** the first sequence written in format 2 or later: entries below may be first-format records (no checksum) */
  private readonly format2From: number;

  constructor(
    private readonly env: LmdbEnv,
    private readonly dicts: LogDictionaries,
    /** the appender's count of the log's last sequence */
    private readonly lastSeq: () => number,
  ) {
    // Entries below this sequence were written before format 2 (one msgpack record each, no checksum) and are read
    // as such; from here on every entry must be a checked entry. Recorded once, on the first open that may write
    // (a read-only tool on an old log only reads it).
    const recorded = env.meta.get(FORMAT2_FROM_KEY) as number | undefined;
    this.format2From = recorded ?? env.lastKey() + 1;
    if (recorded === undefined && !env.readOnly) env.meta.putSync(FORMAT2_FROM_KEY, this.format2From);
  }

  /** Where the log starts: 1, or the first sequence kept after a deliberate retention cut (meta `logStart`). */
  logStart(): number {
    return this.env.start;
  }

  /**
   * The records of the stored value at `key`, verified: undefined for a tombstone. A first-format record (below
   * format2From) is returned as the one record it is.
   */
  entryRecords(key: number, value: Buffer): EntryRecords {
    const codec = this.env.codec;
    const e = unwrap(value);
    if (e === undefined && key < this.format2From) {
      // a record of a log written before format 2: readable, not checkable
      return { count: 1, records: [codec.decode(value) as LogRecord], entry: undefined };
    }
    const entry = checkEntry(e, key);
    if (entry.kind === KIND_TOMBSTONE) return { count: entry.count, records: undefined, entry };
    const raw = this.dicts.payload(entry, key, true);
    let records: LogRecord[];
    try {
      records = (raw.start === 0 ? codec.decode(raw.bytes, raw.end) : codec.decode(raw.bytes.subarray(raw.start, raw.end))) as LogRecord[];
    } catch (err) {
      throw new LogDamage(key, `entry does not decode: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (!Array.isArray(records) || records.length !== entry.count) throw new LogDamage(key, 'entry holds a different number of records than its header says');
    return { count: entry.count, records, entry };
  }

  /**
   * Records after `afterSeq`, in order, each entry verified as it is read: its checksum, and that it starts where the
   * previous one ended (or where the log starts: 1, or the retention marker `logStart`). The first problem throws a
   * LogDamage naming the first sequence that cannot be trusted; `verified` counts what passed (unless `countVerified`
   * is false: background readers, whose reads are not the startup verification health reports).
   */
  *readAfter(afterSeq: number, countVerified = true): Generator<{ seq: number; record: LogRecord }> {
    // the entry holding afterSeq + 1 starts at or before it
    // (never below the log's start: entries a crashed retention cut left there are not part of the log)
    const logStart = this.logStart();
    const from = Math.max(afterSeq + 1, logStart);
    let start = from;
    for (const key of this.env.raw.getKeys({ start: from, reverse: true, limit: 1 })) if (key !== STRUCTURES_KEY && key >= logStart) start = key;
    let expected = start;
    for (const { key, value } of this.env.raw.getRange({ start })) {
      if (key === STRUCTURES_KEY) continue;
      if (key !== expected) {
        throw new LogDamage(Math.min(key, expected), `the log jumps from sequence ${expected - 1} to ${key}: ${key > expected ? key - expected : 'overlapping'} records missing`);
      }
      const { count, records, entry } = this.entryRecords(key, value);
      expected = key + count;
      if (entry && countVerified) this.verified += count;
      if (records === undefined) {
        // an erased batch: its sequences stay (as ERASED markers, so a fold moves past them), its records are gone
        for (let i = 0; i < count; i++) if (key + i > afterSeq) yield { seq: key + i, record: ERASED };
        continue;
      }
      for (let i = 0; i < records.length; i++) if (key + i > afterSeq) yield { seq: key + i, record: records[i]! };
    }
  }

  /**
   * Every record from where events received at or after `since` begin, in log order, with its eventId when it has
   * one, from the log itself (the truth the remembered table is checked against). The start is found by bisecting on
   * receive time, less RECEIVE_CLOCK_SLACK_MS (receive times follow the clock, which may step back a little).
   */
  *eventIdsSince(since: number, afterSeq?: number): Generator<LoggedId> {
    const firstRt = (seq: number): number | undefined => {
      let n = 0;
      for (const { record } of this.readAfter(seq - 1, false)) {
        if (record.t !== 'x') return record.rt;
        if (++n >= BISECT_SKIP_ERASED) return undefined;
      }
      return undefined;
    };
    let lo = this.logStart();
    if (afterSeq !== undefined) lo = afterSeq + 1;
    else {
      let hi = this.lastSeq() + 1;
      while (lo < hi) {
        const mid = Math.floor((lo + hi) / 2);
        const rt = firstRt(mid);
        if (rt !== undefined && rt < since - RECEIVE_CLOCK_SLACK_MS) lo = mid + 1;
        else hi = mid;
      }
    }
    for (const { seq, record } of this.readAfter(lo - 1, false)) {
      // every record is yielded (id or not), so a caller can slice its pass by sequence
      // history ids are kept for good in history_ids, not in the 48-hour table
      yield { seq, id: record.t === 'e' && record.eventId !== undefined && record.h !== 1 && record.rt >= since ? { p: record.p, eventId: record.eventId, rt: record.rt } : undefined };
    }
  }

  /** First sequences of the log's entries (one appended batch each) from `fromSeq` on: LmdbEventLog groups by them. */
  *entryStarts(fromSeq: number): Generator<number> {
    for (const key of this.env.log.getKeys({ start: Math.max(fromSeq, STRUCTURES_KEY + 1) })) yield key;
  }

  /**
   * Entries, records and stored value bytes of the log, and the bytes of the log dictionaries (bench: bytes per
   * event).
   */
  logSize(): { entries: number; records: number; bytes: number; dictionaryBytes: number } {
    let entries = 0;
    let records = 0;
    let bytes = 0;
    for (const { key, value } of this.env.raw.getRange({ start: 1 })) {
      void key;
      entries++;
      records += entryCount(value);
      bytes += value.length;
    }
    return { entries, records, bytes, dictionaryBytes: this.dicts.storedBytes() };
  }
}

/** The entries of the log as stored: for tests that damage one on purpose (they find its bytes in the file). */
export interface StoredEntries {
  /** the bytes stored for the entry that holds `seq` */
  storedEntry(seq: number): Buffer | undefined;
}

export function storedEntries(env: LmdbEnv): StoredEntries {
  return {
    storedEntry(seq) {
      for (const { key, value } of env.raw.getRange({ start: seq, reverse: true, limit: 1 })) if (key !== STRUCTURES_KEY) return Buffer.from(value);
      return undefined;
    },
  };
}
