import type { LogRecord } from '../../core/types.ts';
import { commitFailure } from './commit-failures.ts';
import type { Dictionary } from './dict-lz.ts';
import type { LogDictionaries } from './log-dictionaries.ts';
import { encodeFormat2, encodePacked } from './log-entry-format.ts';
import { StructureSaveDeferred, TRANSIENT_ENCODING, type LmdbEnv, type LogCodec } from './log-env.ts';

/** `flush`: an append resolves once its commit is on disk; `commit`: once it is committed. */
export type Durability = 'flush' | 'commit';

/**
 * An append of more records than this (tools and benches write batches of thousands; the service's are at most 500)
 * is stored as several entries of at most this many, in the same transaction. Decoding a 20,000-record entry at once
 * made every record outlive V8's young generation: a full replay of such entries spent half its time in the
 * garbage collector (decoded 650k -> 300k records/s); entries this size decode at the rate of single records.
 */
const ENTRY_RECORDS = 256;

/** A batch's log entries, encoded with this codec (the environment's, until a compaction reopens it) and dictionary. */
interface EncodedEntries {
  codec: LogCodec;
  dictId: number;
  bytes: Buffer[];
}

/** Appends to the log and counts its sequence. */
export class LogAppender {
  private nextSeq: number;
  /** the key of the entry this store appended last (0: none yet, or no longer trusted) */
  private lastEntry = 0;

  constructor(
    private readonly env: LmdbEnv,
    private readonly dicts: LogDictionaries,
    private readonly durability: Durability,
    /** 4 (default): compressed entries; 2: in format 2, the older entry format (tests of reading old logs) */
    private readonly writeFormat: 2 | 4,
  ) {
    this.nextSeq = env.lastKey() + 1;
  }

  /** Sequence number of the newest record in the log (0 when empty). */
  lastSeq(): number {
    return this.nextSeq - 1;
  }

  /**
   * Appends records as one transaction and resolves with their first sequence number once they are committed
   * (and, in `flush` mode, on disk). Transactions run in call order, so sequence numbers follow call order too.
   * `extra` runs inside the same transaction (more writes that must commit with the records, or not at all).
   * `admit`, when given, runs first in it and returns the records to append (those it drops are not stored): history's
   * eventIds are claimed there, so a repeat is found by the write that would store it, not by a lookup before.
   *
   * The sequence is taken from the log itself inside the transaction, not counted ahead: a commit that fails (a
   * full disk) leaves no gap for the next one. Writes inside use putSync: the transaction's one promise carries
   * the outcome (per-put promises of a failed commit reject with nobody listening otherwise, which would kill the process).
   */
  async append(given: readonly LogRecord[], extra?: (firstSeq: number) => void, admit?: (records: readonly LogRecord[]) => readonly LogRecord[]): Promise<number> {
    const env = this.env;
    let first = 0;
    let records = given;
    if (env.gate) await env.gate; // a compaction is swapping the environment
    try {
      // Encoded and compressed now, in the caller's turn: lmdb-js runs the callbacks of every append queued behind a
      // commit back to back in one turn (an import's two lanes: 1,000 events' claims, encoding and compression, its
      // longest turns), so the callback keeps the claims and puts, and encodes again only if what it stores changed.
      const early = this.writeFormat === 4 ? this.encodeEarly(given) : undefined;
      await env.log.transaction(() => {
        const fault = env.faults?.fault?.('append');
        if (fault) throw fault;
        first = this.nextInTransaction();
        if (admit) records = admit(given);
        if (records.length === 0) return;
        if (this.writeFormat === 2) env.log.putSync(first, encodeFormat2(env.codec.encode(records, TRANSIENT_ENCODING), records.length));
        else {
          const dict = this.dicts.forAppend(first - 1);
          const entries = early && records === given && early.codec === env.codec && early.dictId === (dict?.id ?? 0) ? early : this.encodeEntries(records, dict);
          for (let k = 0; k < entries.bytes.length; k++) {
            env.raw.putSync(first + k * ENTRY_RECORDS, entries.bytes[k]!);
            this.lastEntry = first + k * ENTRY_RECORDS;
          }
        }
        if (this.writeFormat === 2) this.lastEntry = first;
        extra?.(first);
        this.nextSeq = first + records.length;
      });
    } catch (err) {
      this.recount(); // what is committed, whatever the failed transaction counted
      this.dicts.forgetUncommitted(); // a dictionary built in it is not
      throw commitFailure(err);
    }
    if (this.durability === 'flush') await env.root.flushed;
    return first;
  }

  /**
   * encodeEntries before the transaction, or undefined when a record needs a shared structure not stored yet: the
   * transaction's callback encodes those, and the structure is saved in the same commit (see LmdbEnv.deferStructures).
   */
  private encodeEarly(records: readonly LogRecord[]): EncodedEntries | undefined {
    this.env.deferStructures = true;
    try {
      return this.encodeEntries(records, this.dicts.current());
    } catch (err) {
      if (err instanceof StructureSaveDeferred) return undefined;
      throw err;
    } finally {
      this.env.deferStructures = false;
    }
  }

  /** The format 4 entries of `records` (one per ENTRY_RECORDS), compressed against `dict`, with what they depend on. */
  private encodeEntries(records: readonly LogRecord[], dict: { id: number; dict: Dictionary } | undefined): EncodedEntries {
    const codec = this.env.codec;
    const bytes: Buffer[] = [];
    for (let i = 0; i < records.length; i += ENTRY_RECORDS) {
      const part = records.length <= ENTRY_RECORDS ? records : records.slice(i, i + ENTRY_RECORDS);
      bytes.push(encodePacked(codec.encode(part, TRANSIENT_ENCODING), part.length, dict?.id ?? 0, dict?.dict));
    }
    return { codec, dictId: dict?.id ?? 0, bytes };
  }

  /** Counts from what the log holds (after a failed commit, or a cut): the next append reads the log's end. */
  recount(): void {
    this.nextSeq = this.env.lastKey() + 1;
    this.lastEntry = 0;
  }

  /**
   * The next sequence, inside a write transaction: what this store counted, if the entry it last wrote is there
   * (one point read), else what the log says (a range read: after a failed commit, or the first append). A
   * transaction that failed rolled its entry back, so its count is never trusted.
   */
  private nextInTransaction(): number {
    if (this.lastEntry > 0 && this.env.raw.doesExist(this.lastEntry)) return this.nextSeq;
    return this.env.lastKey() + 1;
  }
}
