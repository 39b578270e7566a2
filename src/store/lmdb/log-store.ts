// This file is long because the log's append, verified read, retention and erasure share one environment handle that a
// compaction swaps; its entry format and dictionaries already live apart (dict-lz.ts).
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { crc32 } from 'node:zlib';
import path from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import type { LogRecord } from '../../core/types.ts';
import { compress, crc32Of, decompress, Dictionary, MAX_DICTIONARY } from './dict-lz.ts';
import { holdDataDir, releaseDataDir } from '../files/data-dir-lock.ts';
import { HistoryIds } from './history-ids.ts';
import { RememberedIds, type IdKey, type LoggedId } from './remembered-ids.ts';
import { SealedStore } from './sealed-store.ts';
import { ERASED, type KeyRecord, type ProjectRecord, type Salt } from '../records.ts';

/**
 * The LMDB environment: the event log (the truth), projects, key hashes and salts. This folder is the only code
 * that imports lmdb.
 *
 * The log is keyed by an increasing integer sequence, so LMDB's key order is log order and a replay is one range
 * scan. Writes are asynchronous and lmdb-js groups every write of one event-loop turn into one transaction, so
 * durability costs one commit (and one fsync) per turn, not per event.
 */

export type Durability = 'flush' | 'commit';

/** 1 TiB of address space: LMDB maps lazily, so this costs nothing until used and never needs a resize. */
const MAP_SIZE = 2 ** 40;
/**
 * Sequence numbers start at 1, so key 0 of the log holds msgpackr's shared structures: records are then written as
 * a structure id plus values instead of a map with every field name. A log record shrinks from ~330 to ~200 bytes
 * and decodes about twice as fast, which is what bounds a full replay (bench: `npm run bench`, startup.replay).
 * Logs written before this still decode (plain msgpack maps are always readable).
 */
const STRUCTURES_KEY = 0;
/** Meta entry listing deleted projects whose events are still to be erased. */
const PENDING_ERASURES = 'pending_erasures';
/**
 * Erasure works in slices of this long (a scan step, one rewrite transaction, one batch of eventId removals) and
 * yields between them: appends of other projects wait at most about this long behind it, whatever the project's size.
 */
const ERASE_SLICE_MS = 8;
/** A compaction's catch-up transactions (writes made during the copy, copied into it) hold the copy's writer this long. */
const CATCH_UP_SLICE_MS = 20;
/** Catch-up rounds before the swap: each copies what the one before left; writes keep coming, so it is bounded. */
const CATCH_UP_ROUNDS = 5;
/** Entries left after which the last catch-up runs under the gate: a few hundred copy in a few milliseconds. */
const CATCH_UP_FINAL = 500;

const yieldTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
/** Records removed per retention transaction: keeps each commit short. */
const DELETE_SLICE = 10_000;
/** Meta entry: the first sequence kept after a retention cut (absent: the log starts at 1). */
const LOG_START = 'logStart';

/**
 * lmdb-js rejects a failed commit's writes with 'Commit failed' and hangs the real cause on `error.commitError`, a
 * second promise rejected a moment later. Nobody awaited that one, so a full disk ended the process with an
 * unhandled rejection. This takes it over and returns the error with the cause in its message.
 */
function commitFailure(err: unknown): Error {
  const e = err instanceof Error ? err : new Error(String(err));
  const cause = (e as Error & { commitError?: Promise<unknown> }).commitError;
  if (cause && typeof cause.then === 'function') {
    cause.then(
      () => {},
      (why: unknown) => {
        e.message = `${e.message}: ${why instanceof Error ? why.message : String(why)}`;
      },
    );
  }
  return e;
}

/**
 * lmdb-js also writes on its own inside our transactions (msgpackr's shared structures, through a put whose promise
 * nobody holds), so a failed commit leaves rejections we cannot reach. Our own writes report the failure through the
 * promises we await, so these are noise; anything else still ends the process as Node would.
 */
let lmdbRejectionsContained = false;
function containLmdbRejections(): void {
  if (lmdbRejectionsContained) return;
  lmdbRejectionsContained = true;
  // lmdb-js prints a failed commit's error itself (a stack per failure, `Input/output error` on a full disk) and
  // rejects the commit's promise with it too: the caller's one line is the report.
  const printError = console.error.bind(console);
  console.error = (...args: unknown[]) => {
    if (args.length === 1 && args[0] instanceof Error && /[\\/]lmdb[\\/]write\.js/.test(args[0].stack ?? '')) return;
    printError(...args);
  };
  process.on('unhandledRejection', (reason) => {
    const stack = reason instanceof Error ? (reason.stack ?? '') : '';
    if (/[\\/]lmdb[\\/]write\.js/.test(stack)) {
      return; // the same failure as the commit we await: its caller logs it once per episode, not once per stray write
    }
    throw reason;
  });
}

/**
 * The log's on-disk format: one LMDB entry per appended batch, keyed by the batch's first sequence. The first byte
 * is the entry's kind, which is also its format version, so entries of every format can follow each other in one log:
 *   kind 4 (format 4, written now): [u8 4][u32 count][u32 crc32 of the rest][varint dictionary id][varint raw length]
 *     [the msgpack array of the records, compressed by dict-lz against the log dictionary with that id (0: none)]
 *     (varint: 7 bits a byte, low first, high bit set on all but the last)
 *   kind 2 (format 2, read): [u8 2][u32 count][u32 crc32 of payload][payload: msgpack array of the records]
 *   kind 3 (tombstone): [u8 3][u32 count][u32 crc32 of the empty payload]
 * Format 2 entries were stored through the msgpack encoder (a msgpack bin around those bytes); format 4 entries and
 * tombstones written now are stored as they are, read through a binary handle on the same database. Below the
 * recorded 'logFormat2From' sequence, entries may be plain msgpack records of the first format (one record each, no
 * checksum).
 * The count makes the sequence continuous (an entry must start where the previous one ended), the checksum (over the
 * bytes as stored, so damage is caught before anything is decompressed) catches changed bytes. A tombstone keeps the
 * count and drops the records: erasing a deleted project's events replaces each of its entries (one request = one
 * project = one entry) with a tombstone of the same count, so continuity and checksums still hold; readers see its
 * sequences as ERASED markers.
 */
const FORMAT2_FROM_KEY = 'logFormat2From';
const KIND_RECORDS = 2;
const KIND_TOMBSTONE = 3;
const KIND_PACKED = 4;
const HEADER_BYTES = 9;
/** Longest varint header tail of a kind 4 entry: two varints of up to 5 bytes. */
const MAX_VARINTS = 10;
/** A decompressed entry larger than this is damage, not data (a batch is at most a few MB of records). */
const MAX_RAW_ENTRY = 256 * 2 ** 20;

/**
 * Log dictionaries (meta `logDict:<id>`: the bytes; meta `logDicts`: id, the sequence it was built at and the projects
 * whose records it holds). A dictionary is the tail of the newest entries' raw msgpack, up to 32 KiB: this log's own
 * URLs, paths, field values and record layouts, which is what a single-event entry is made of. It is built from the
 * log itself when the log reaches DICT_FIRST records, then at 10x that, and so on up to every DICT_EVERY records, so it
 * follows the traffic; the first entry using it is written in the same transaction. Dictionaries are never changed
 * (an entry names the one it was compressed with) and are small (32 KiB per 100,000 records: 0.3 B per event).
 * Erasing a project rewrites the entries compressed with a dictionary that holds its records and drops that
 * dictionary, so no file keeps the project's strings.
 */
const DICT_PREFIX = 'logDict:';
const DICTS_KEY = 'logDicts';
/** The last dictionary id given (ids are never reused, even after an erasure dropped one). */
const DICT_LAST_ID = 'logDictLastId';
/** The first dictionary once the log has this many records (a fresh log writes uncompressed-ish entries until then). */
const DICT_FIRST = 100;
/** Dictionaries are rebuilt at 10x the last one's sequence until they are this many records apart, then every this many. */
const DICT_EVERY = 100_000;
/**
 * Entries of the excluded project a dictionary build skips before it settles for what it found: each is decoded, and
 * a log whose tail is all that project's would otherwise be decoded whole inside one write transaction.
 */
const DICT_SCAN_SKIPPED = 2_000;
/** Decoded dictionaries kept in memory (48 KiB each with their index); replay walks them in order. */
const DICT_CACHE = 16;

interface DictInfo {
  id: number;
  /** the log's last sequence when it was built */
  from: number;
  /** projects whose records are in its bytes */
  projects: string[];
  /** crc32 of its bytes: a changed dictionary byte would decompress entries wrongly, so it is checked when loaded */
  crc: number;
}

function tombstone(count: number): Buffer {
  const out = Buffer.alloc(HEADER_BYTES);
  out[0] = KIND_TOMBSTONE;
  out.writeUInt32BE(count, 1);
  out.writeUInt32BE(crc32(out.subarray(HEADER_BYTES)), 5);
  return out;
}

/** A format 2 entry (kept for tests that write a log in format 2). */
function encodeFormat2(payload: Buffer, count: number): Buffer {
  const out = Buffer.allocUnsafe(HEADER_BYTES + payload.length);
  out[0] = KIND_RECORDS;
  out.writeUInt32BE(count, 1);
  out.writeUInt32BE(crc32(payload), 5);
  payload.copy(out, HEADER_BYTES);
  return out;
}

function writeVarint(out: Buffer, o: number, v: number): number {
  while (v >= 0x80) {
    out[o++] = (v & 0x7f) | 0x80;
    v >>>= 7;
  }
  out[o++] = v;
  return o;
}

function encodePacked(raw: Uint8Array, count: number, dictId: number, dict: Dictionary | undefined): Buffer {
  const packed = compress(raw, dict);
  const out = Buffer.allocUnsafe(HEADER_BYTES + MAX_VARINTS + packed.length);
  out[0] = KIND_PACKED;
  out.writeUInt32BE(count, 1);
  let o = writeVarint(out, HEADER_BYTES, dictId);
  o = writeVarint(out, o, raw.length);
  o += packed.copy(out, o);
  out.writeUInt32BE(crc32(out.subarray(HEADER_BYTES, o)), 5);
  return out.subarray(0, o);
}

/**
 * The entry bytes of a stored value read through the binary handle: as they are for entries stored raw (kinds 2–4),
 * without msgpack's bin header for format 2 entries stored through the encoder, undefined for a first-format record.
 */
function unwrap(raw: Buffer): Buffer | undefined {
  const k = raw[0];
  if (k === KIND_RECORDS || k === KIND_TOMBSTONE || k === KIND_PACKED) return raw;
  if (k === 0xc4 && raw.length >= 2) return raw.subarray(2, 2 + raw[1]!);
  if (k === 0xc5 && raw.length >= 3) return raw.subarray(3, 3 + raw.readUInt16BE(1));
  if (k === 0xc6 && raw.length >= 5) return raw.subarray(5, 5 + raw.readUInt32BE(1));
  return undefined;
}

/** How many sequences a stored value covers (a record of a log written before format 2 covers one). */
function entryCount(raw: Buffer): number {
  const e = unwrap(raw);
  return e && e.length >= HEADER_BYTES ? e.readUInt32BE(1) : 1;
}

interface CheckedEntry {
  count: number;
  kind: number;
  /** the entry's bytes; its payload starts at `at` (kind 2: the msgpack array; kind 4: the compressed bytes) */
  bytes: Buffer;
  at: number;
  dictId: number;
  rawLength: number;
}

function checkEntry(e: Buffer | undefined, seq: number): CheckedEntry {
  if (!e || e.length < HEADER_BYTES) throw new LogDamage(seq, 'entry is not a log entry (no header)');
  const kind = e[0]!;
  if (kind !== KIND_RECORDS && kind !== KIND_TOMBSTONE && kind !== KIND_PACKED) throw new LogDamage(seq, `entry has an unknown kind ${kind}`);
  const count = e.readUInt32BE(1);
  if (count === 0) throw new LogDamage(seq, 'entry claims no records');
  // in JS for entries of a record or two (no buffer view per call), natively for larger ones
  const sum = e.length < 512 ? crc32Of(e, HEADER_BYTES, e.length) : crc32(e.subarray(HEADER_BYTES));
  if (sum !== e.readUInt32BE(5)) throw new LogDamage(seq, 'checksum mismatch');
  if (kind !== KIND_PACKED) return { count, kind, bytes: e, at: HEADER_BYTES, dictId: 0, rawLength: e.length - HEADER_BYTES };
  const dictId = readVarint(e, HEADER_BYTES, seq);
  const rawLength = readVarint(e, varintEnd, seq);
  if (rawLength > MAX_RAW_ENTRY) throw new LogDamage(seq, `entry claims ${rawLength} bytes of records`);
  return { count, kind, bytes: e, at: varintEnd, dictId, rawLength };
}

/** Where the last readVarint ended (module state: a closure or a tuple per entry costs more than the read). */
let varintEnd = 0;

function readVarint(e: Buffer, at: number, seq: number): number {
  let v = 0;
  for (let shift = 0; shift < 35 && at < e.length; shift += 7) {
    const b = e[at++]!;
    v += (b & 0x7f) * 2 ** shift;
    if (b < 0x80) {
      varintEnd = at;
      return v;
    }
  }
  throw new LogDamage(seq, 'entry header does not end');
}

/**
 * An append of more records than this (tools and benches write batches of thousands; the service's are at most 500)
 * is stored as several entries of at most this many, in the same transaction. Decoding a 20,000-record entry at once
 * made every record outlive V8's young generation: a full replay of such entries spent half its time in the
 * garbage collector (decoded 650k -> 300k records/s); entries this size decode at the rate of single records.
 */
const ENTRY_RECORDS = 256;

/** The log cannot be trusted from `seq` on. */
/** Free space health asks for: more than one append of the biggest batch (500 events, ~250 KB stored). */
const SPACE_PROBE_BYTES = 1024 * 1024;
/** Incompressible, so a compressing filesystem must find the space too. */
const SPACE_PROBE = Buffer.allocUnsafe(SPACE_PROBE_BYTES);
for (let i = 0, x = 2463534242; i < SPACE_PROBE_BYTES; i++) {
  x ^= x << 13;
  x ^= x >>> 17;
  x ^= x << 5;
  SPACE_PROBE[i] = x & 0xff;
}

/** Receive times may step back by this much (a clock correction) when the log is searched by receive time. */
const RECEIVE_CLOCK_SLACK_MS = 3_600_000;
/** A bisection probe gives up on a run of erased records this long and treats its spot as inside the window. */
const BISECT_SKIP_ERASED = 10_000;

export class LogDamage extends Error {
  constructor(
    readonly seq: number,
    readonly reason: string,
  ) {
    super(`the event log is damaged at sequence ${seq}: ${reason}`);
  }
}

/** A fault injected into the store's writes, for tests of failing disks: return an error to make the write fail. */
export type StoreFault = (op: 'append' | 'write') => Error | undefined;

export class LogStore {
  /**
   * Set by tests to make writes fail inside the real LMDB transaction (the transaction aborts, exactly as on ENOSPC).
   * Not a mock: everything else runs for real.
   */
  fault: StoreFault | undefined;

  private root!: RootDatabase;
  /** the log through the msgpack encoder: msgpackr's shared structures (key 0), first-format records */
  private log!: Database<Buffer | LogRecord, number>;
  /** the same database read and written as bytes: entries as stored */
  private raw!: Database<Buffer, number>;
  /** the log db's msgpack encoder (with its shared structures): a batch's records are one msgpack array */
  private codec!: { encode(v: unknown): Buffer; decode(b: Buffer, end?: number): unknown };
  private projects!: Database<ProjectRecord, string>;
  private keys!: Database<KeyRecord, string>;
  private meta!: Database<unknown, string>;
  /** [project, eventId] -> receive time, written with the events (see remembered-ids.ts) */
  private eventIds!: Database<number, IdKey>;
  /** the same table as stored bytes (keys and values), so one damaged record is named and skipped, not fatal */
  private eventIdsRaw!: Database<Buffer, Buffer>;
  /** opened once; given the new handles when a compaction reopens the environment */
  private rememberedIds: RememberedIds | undefined;
  /** [project, eventId] -> 1 for history, kept for good (see history-ids.ts) */
  private historyIdsDb!: Database<number, IdKey>;
  private historyIds: HistoryIds | undefined;
  private sealedStore: SealedStore | undefined;
  private nextSeq: number;
  private readonly file: string;
  /** set for the few milliseconds a compaction copies the last writes and swaps the file: writes wait for it */
  private gate: Promise<void> | undefined;
  /** set while a compaction copies the environment: writes off the request path (sealing, upkeep, retention) wait */
  private copyGate: Promise<void> | undefined;
  /** while a compaction copies: the last log entry in the copy, and the projects, keys and meta keys written since */
  private copying: { touched: Set<string>; copied: number } | undefined;
  /** erasures and compactions, one at a time */
  private serial: Promise<unknown> = Promise.resolve();
  /** true for the few milliseconds the environment is closed during a swap: LMDB reads would throw */
  private swapping = false;
  /** the keys, held in memory for the few milliseconds the environment is closed during a swap (auth keeps working) */
  private swapKeys: Map<string, KeyRecord> | undefined;
  /** the key of the entry this store appended last (0: none yet, or no longer trusted) */
  private lastEntry = 0;
  /** the meta `logStart` marker, read once (only this store moves it) */
  private start = 1;
  /** log dictionaries known, oldest first, and the decoded ones (see DICT_FIRST) */
  private dictInfos: DictInfo[] = [];
  private readonly dicts = new Map<number, Dictionary>();
  /** where entries are decompressed to be decoded at once (see rawPayload) */
  private scratch = Buffer.allocUnsafeSlow(64 * 1024);
  /** the writer's hold on the data directory (see data-dir-lock.ts), released by close */
  private hold: string | undefined;

  private constructor(
    dataDir: string,
    private readonly durability: Durability,
    private readonly readOnly: boolean,
    /** 4 (default): compressed entries; 2: in format 2, the older entry format (tests of reading old logs) */
    private readonly writeFormat: 2 | 4,
  ) {
    if (!readOnly) mkdirSync(dataDir, { recursive: true });
    this.file = path.join(dataDir, 'analytics.lmdb');
    this.openEnv();
    this.nextSeq = this.lastKey() + 1;
    // Entries below this sequence were written before format 2 (one msgpack record each, no checksum) and are read
    // as such; from here on every entry must be a checked entry. Recorded once, on the first open that may write
    // (a read-only tool on an old log only reads it).
    const recorded = this.meta.get(FORMAT2_FROM_KEY) as number | undefined;
    this.format2From = recorded ?? this.nextSeq;
    if (recorded === undefined && !readOnly) this.meta.putSync(FORMAT2_FROM_KEY, this.format2From);
  }

  private readonly format2From: number;

  private openEnv(): void {
    this.root = open({ path: this.file, mapSize: MAP_SIZE, maxDbs: 16, noSubdir: true, readOnly: this.readOnly });
    this.log = this.root.openDB<Buffer | LogRecord, number>({ name: 'log', sharedStructuresKey: STRUCTURES_KEY });
    this.raw = this.root.openDB<Buffer, number>({ name: 'log', encoding: 'binary' });
    this.codec = (this.log as unknown as { encoder: { encode(v: unknown): Buffer; decode(b: Buffer, end?: number): unknown } }).encoder;
    this.projects = this.root.openDB<ProjectRecord, string>({ name: 'projects' });
    this.keys = this.root.openDB<KeyRecord, string>({ name: 'keys' });
    this.meta = this.root.openDB<unknown, string>({ name: 'meta' });
    this.eventIds = this.root.openDB<number, IdKey>({ name: 'event_ids' });
    this.eventIdsRaw = this.root.openDB<Buffer, Buffer>({ name: 'event_ids', encoding: 'binary', keyEncoding: 'binary' });
    this.historyIdsDb = this.root.openDB<number, IdKey>({ name: 'history_ids' });
    this.start = (this.meta.get(LOG_START) as number | undefined) ?? 1;
    this.dictInfos = (this.meta.get(DICTS_KEY) as DictInfo[] | undefined) ?? [];
    this.dicts.clear();
    this.rememberedIds?.reopen(this.eventIds, this.eventIdsRaw);
    this.historyIds?.reopen(this.historyIdsDb);
    this.sealedStore?.reopen(this.root);
  }

  /**
   * `readOnly` opens an existing data directory for tools (export, check, backup) while the service may be running.
   * `log` is kept for callers; failures lmdb-js reports on its own are contained (see containLmdbRejections) and
   * reported once by whoever awaits the write.
   * `writeFormat: 2` writes entries in format 2 (for tests that a log of that release is read).
   */
  static open(dataDir: string, durability: Durability, opts: { readOnly?: boolean; log?: (line: string) => void; writeFormat?: 2 | 4 } = {}): LogStore {
    containLmdbRejections();
    const hold = opts.readOnly === true ? undefined : holdDataDir(dataDir); // one writing process per data directory
    try {
      const store = new LogStore(dataDir, durability, opts.readOnly === true, opts.writeFormat ?? 4);
      store.hold = hold;
      return store;
    } catch (err) {
      if (hold !== undefined) releaseDataDir(hold);
      throw err;
    }
  }

  /** Sequence number of the newest record in the log (0 when empty). */
  lastSeq(): number {
    return this.nextSeq - 1;
  }

  /**
   * Appends records as one transaction and resolves with their first sequence number once they are committed
   * (and, in `flush` mode, on disk). Transactions run in call order, so sequence numbers follow call order too.
   * `extra` runs inside the same transaction (more writes that must commit with the records, or not at all).
   *
   * The sequence is taken from the log itself inside the transaction, not counted ahead: a commit that fails (a
   * full disk) leaves no gap for the next one. Writes inside use putSync: the transaction's one promise carries
   * the outcome (per-put promises of a failed commit reject with nobody listening otherwise, which would kill the process).
   */
  async append(records: readonly LogRecord[], extra?: (firstSeq: number) => void): Promise<number> {
    let first = 0;
    if (this.gate) await this.gate; // a compaction is swapping the environment
    try {
      await this.log.transaction(() => {
        const fault = this.fault?.('append');
        if (fault) throw fault;
        first = this.nextInTransaction();
        if (this.writeFormat === 2) this.log.putSync(first, encodeFormat2(this.codec.encode(records), records.length));
        else {
          const dict = this.dictionaryFor(first - 1);
          for (let i = 0; i < records.length; i += ENTRY_RECORDS) {
            const part = records.length <= ENTRY_RECORDS ? records : records.slice(i, i + ENTRY_RECORDS);
            this.raw.putSync(first + i, encodePacked(this.codec.encode(part), part.length, dict?.id ?? 0, dict?.dict));
            this.lastEntry = first + i;
          }
        }
        if (this.writeFormat === 2) this.lastEntry = first;
        extra?.(first);
        this.nextSeq = first + records.length;
      });
    } catch (err) {
      this.nextSeq = this.lastKey() + 1; // what is committed, whatever the failed transaction counted
      this.lastEntry = 0;
      this.dictInfos = (this.meta.get(DICTS_KEY) as DictInfo[] | undefined) ?? []; // a dictionary built in it is not
      throw commitFailure(err);
    }
    if (this.durability === 'flush') await this.root.flushed;
    return first;
  }

  /**
   * The dictionary new entries are compressed with, inside a write transaction: the newest one, or a new one built
   * from the log's tail (and stored in this transaction, with the entry that first uses it) when the log has grown
   * enough since the newest was built.
   */
  private dictionaryFor(last: number, exclude?: string): { id: number; dict: Dictionary } | undefined {
    const newest = this.dictInfos[this.dictInfos.length - 1];
    const due = newest === undefined ? DICT_FIRST : newest.from < DICT_EVERY ? newest.from * 10 : newest.from + DICT_EVERY;
    if (last >= due || exclude !== undefined) {
      const built = this.buildDictionary(exclude);
      if (built) {
        const id = ((this.meta.get(DICT_LAST_ID) as number | undefined) ?? 0) + 1;
        const info: DictInfo = { id, from: last, projects: built.projects, crc: crc32(built.bytes) };
        this.meta.putSync(DICT_LAST_ID, info.id);
        this.meta.putSync(`${DICT_PREFIX}${info.id}`, built.bytes);
        this.dictInfos = [...this.dictInfos, info];
        this.meta.putSync(DICTS_KEY, this.dictInfos);
        for (const k of [DICT_LAST_ID, `${DICT_PREFIX}${info.id}`, DICTS_KEY]) this.touch('meta', k);
        this.dicts.set(info.id, new Dictionary(built.bytes));
      }
    }
    const use = this.dictInfos[this.dictInfos.length - 1];
    return use ? { id: use.id, dict: this.dictionary(use.id, use.id) } : undefined;
  }

  /**
   * The raw msgpack of the newest entries (tombstones and first-format records skipped, and entries holding
   * `exclude`'s records), newest last, cut to MAX_DICTIONARY bytes from the end; with the projects it holds.
   */
  private buildDictionary(exclude?: string): { bytes: Buffer; projects: string[] } | undefined {
    const parts: Buffer[] = [];
    const projects = new Set<string>();
    let size = 0;
    let skipped = 0;
    for (const { key, value } of this.raw.getRange({ reverse: true })) {
      if (key === STRUCTURES_KEY || key < this.start || size >= MAX_DICTIONARY) break;
      const e = unwrap(value);
      if (!e || e[0] === KIND_TOMBSTONE) continue;
      let raw: Buffer;
      let records: LogRecord[];
      try {
        const p = this.rawPayload(checkEntry(e, key), key);
        raw = p.bytes.subarray(p.start, p.end);
        records = this.codec.decode(raw) as LogRecord[];
      } catch {
        continue; // damage is reported by the verifying reader, not here
      }
      if (exclude !== undefined && records.some((r) => r.t !== 'x' && r.p === exclude)) {
        if (++skipped >= DICT_SCAN_SKIPPED) break; // the project fills the log's tail: a smaller dictionary will do
        continue;
      }
      for (const r of records) if (r.t !== 'x') projects.add(r.p);
      parts.unshift(raw.length > MAX_DICTIONARY ? raw.subarray(raw.length - MAX_DICTIONARY) : raw);
      size += raw.length;
    }
    if (size === 0) return undefined;
    const all = Buffer.concat(parts);
    return { bytes: Buffer.from(all.subarray(Math.max(0, all.length - MAX_DICTIONARY))), projects: [...projects].sort() };
  }

  /** A log dictionary by id, decoded once (bounded cache). */
  private dictionary(id: number, seq: number): Dictionary {
    let d = this.dicts.get(id);
    if (d) return d;
    const bytes = this.meta.get(`${DICT_PREFIX}${id}`) as Buffer | undefined;
    // another process (the service, while a tool reads) may have built it since this store was opened
    if (!this.dictInfos.some((d) => d.id === id)) {
      const known = new Set(this.dictInfos.map((d) => d.id));
      const stored = (this.meta.get(DICTS_KEY) as DictInfo[] | undefined) ?? [];
      this.dictInfos = [...this.dictInfos, ...stored.filter((d) => !known.has(d.id))].sort((a, b) => a.id - b.id);
    }
    const info = this.dictInfos.find((d) => d.id === id);
    if (!Buffer.isBuffer(bytes) || !info) throw new LogDamage(seq, `the log dictionary ${id} its entry names is missing`);
    if (crc32(bytes) !== info.crc) throw new LogDamage(seq, `the log dictionary ${id} its entry names is damaged (checksum mismatch)`);
    d = new Dictionary(bytes);
    if (this.dicts.size >= DICT_CACHE) this.dicts.delete(this.dicts.keys().next().value!);
    this.dicts.set(id, d);
    return d;
  }

  /**
   * The msgpack bytes of a checked entry's records (decompressed for kind 4). `scratch`: into a buffer reused by the
   * next call (for bytes decoded at once: msgpackr copies strings out of its input).
   */
  private rawPayload(entry: CheckedEntry, seq: number, scratch = false): { bytes: Buffer; start: number; end: number } {
    if (entry.kind !== KIND_PACKED) return { bytes: entry.bytes, start: entry.at, end: entry.bytes.length };
    const dict = entry.dictId === 0 ? undefined : this.dictionary(entry.dictId, seq);
    try {
      if (!scratch) return { bytes: decompress(entry.bytes, entry.rawLength, dict, undefined, entry.at), start: 0, end: entry.rawLength };
      if (this.scratch.length < entry.rawLength) this.scratch = Buffer.allocUnsafeSlow(Math.max(entry.rawLength, this.scratch.length * 2));
      return { bytes: decompress(entry.bytes, entry.rawLength, dict, this.scratch, entry.at), start: 0, end: entry.rawLength };
    } catch (err) {
      throw new LogDamage(seq, `entry does not decompress: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  /**
   * The records of the stored value at `key`, verified: undefined for a tombstone. A first-format record (below
   * format2From) is returned as the one record it is.
   */
  private entryRecords(key: number, value: Buffer): { count: number; records: LogRecord[] | undefined; entry: CheckedEntry | undefined } {
    const e = unwrap(value);
    if (e === undefined && key < this.format2From) {
      // a record of a log written before format 2: readable, not checkable
      return { count: 1, records: [this.codec.decode(value) as LogRecord], entry: undefined };
    }
    const entry = checkEntry(e, key);
    if (entry.kind === KIND_TOMBSTONE) return { count: entry.count, records: undefined, entry };
    const raw = this.rawPayload(entry, key, true);
    let records: LogRecord[];
    try {
      records = (raw.start === 0 ? this.codec.decode(raw.bytes, raw.end) : this.codec.decode(raw.bytes.subarray(raw.start, raw.end))) as LogRecord[];
    } catch (err) {
      throw new LogDamage(key, `entry does not decode: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (!Array.isArray(records) || records.length !== entry.count) throw new LogDamage(key, 'entry holds a different number of records than its header says');
    return { count: entry.count, records, entry };
  }

  /**
   * The next sequence, inside a write transaction: what this store counted, if the entry it last wrote is there
   * (one point read), else what the log says (a range read: after a failed commit, or the first append). A
   * transaction that failed rolled its entry back, so its count is never trusted.
   */
  private nextInTransaction(): number {
    if (this.lastEntry > 0 && this.raw.doesExist(this.lastEntry)) return this.nextSeq;
    return this.lastKey() + 1;
  }

  /** The last sequence in the log (0 when empty): the last entry's first sequence plus its count, less one. */
  private lastKey(): number {
    // a log that retention emptied still continues after its start
    const floor = this.start - 1;
    for (const { key, value } of this.raw.getRange({ reverse: true, limit: 1 })) {
      if (key === STRUCTURES_KEY) return floor;
      return Math.max(floor, key + entryCount(value) - 1);
    }
    return floor;
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
    for (const key of this.raw.getKeys({ start: from, reverse: true, limit: 1 })) if (key !== STRUCTURES_KEY && key >= logStart) start = key;
    let expected = start;
    for (const { key, value } of this.raw.getRange({ start })) {
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
   * Every record from where events received at or after `since` begin, in log order, with its eventId when it has one, from the log itself (the truth the remembered
   * table is checked against). The start is found by bisecting on receive time, less RECEIVE_CLOCK_SLACK_MS (receive
   * times follow the clock, which may step back a little).
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
    for (const key of this.log.getKeys({ start: Math.max(fromSeq, STRUCTURES_KEY + 1) })) yield key;
  }

  /**
   * Entries, records and stored value bytes of the log, and the bytes of the log dictionaries (bench: bytes per
   * event).
   */
  logSize(): { entries: number; records: number; bytes: number; dictionaryBytes: number } {
    let entries = 0;
    let records = 0;
    let bytes = 0;
    for (const { key, value } of this.raw.getRange({ start: 1 })) {
      void key;
      entries++;
      records += entryCount(value);
      bytes += value.length;
    }
    let dictionaryBytes = 0;
    for (const d of this.dictInfos) dictionaryBytes += (this.meta.get(`${DICT_PREFIX}${d.id}`) as Buffer | undefined)?.length ?? 0;
    return { entries, records, bytes, dictionaryBytes };
  }

  /** The bytes stored for the entry that holds `seq` (tests that damage one on purpose find it in the file). */
  storedEntry(seq: number): Buffer | undefined {
    for (const { key, value } of this.raw.getRange({ start: seq, reverse: true, limit: 1 })) if (key !== STRUCTURES_KEY) return Buffer.from(value);
    return undefined;
  }

  /** Records verified by readAfter since the store was opened (health reports the last verification). */
  verified = 0;

  /** Where the log starts: 1, or the first sequence kept after a deliberate retention cut (meta `logStart`). */
  logStart(): number {
    return this.start;
  }

  /**
   * Retention: removes the entries wholly below `seq` (an entry holds a batch and goes whole, so the log then starts
   * at the first entry reaching `seq` or beyond), in slices. The `logStart` marker is written first, so a crash
   * midway leaves a log that says where it starts (entries left below it are skipped and removed next time).
   * Key 0 (msgpackr's shared structures) stays. Returns how many records were removed.
   */
  async deleteBelow(seq: number): Promise<number> {
    while (this.copyGate ?? this.gate) await (this.copyGate ?? this.gate);
    const start = this.logStart();
    if (seq <= start) return 0;
    let cut = start;
    for (const { key, value } of this.raw.getRange({ start })) {
      if (key === STRUCTURES_KEY) continue;
      const end = key + entryCount(value);
      if (end > seq) break;
      cut = end;
    }
    if (cut <= start) return 0;
    await this.meta.put(LOG_START, cut);
    this.start = cut;
    await this.root.flushed;
    for (;;) {
      const keys = [...this.raw.getKeys({ start: STRUCTURES_KEY + 1, end: cut, limit: DELETE_SLICE })];
      if (keys.length === 0) break;
      await this.log.transaction(() => {
        for (const key of keys) this.raw.removeSync(key);
      });
    }
    await this.root.flushed;
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
    while (this.copyGate ?? this.gate) await (this.copyGate ?? this.gate);
    const before = this.lastSeq();
    let forgottenIds = 0;
    await this.root.transaction(() => {
      // the newest receive time the kept log holds (the entry just before the cut; the log is in receive order)
      let keptRt = -Infinity;
      for (const { key, value } of this.raw.getRange({ start: seq - 1, reverse: true, limit: 1 })) {
        if (key === STRUCTURES_KEY) break;
        const recs = this.entryRecords(key, value).records ?? [];
        for (const r of recs) if ('rt' in r && typeof r.rt === 'number') keptRt = Math.max(keptRt, r.rt);
      }
      const forget = new Set<string>();
      const ids: IdKey[] = [];
      for (const { key, value } of this.raw.getRange({ start: Math.max(seq, STRUCTURES_KEY + 1) })) {
        let recs: LogRecord[] = [];
        try {
          recs = this.entryRecords(key, value).records ?? [];
        } catch {
          // the damaged entry: its ids are caught by the receive-time sweep below
        }
        for (const r of recs) {
          if (r.t === 'e' && r.eventId !== undefined && !forget.has(`${r.p}\u0000${r.eventId}`)) {
            forget.add(`${r.p}\u0000${r.eventId}`);
            ids.push([r.p, r.eventId]);
          }
        }
        this.raw.removeSync(key);
      }
      for (const { key, value } of this.eventIds.getRange()) {
        if (value > keptRt && !forget.has(`${key[0]}\u0000${key[1]}`)) ids.push(key);
      }
      for (const k of ids) if (this.eventIds.removeSync(k)) forgottenIds++;
    });
    await this.root.flushed;
    this.nextSeq = this.lastKey() + 1;
    this.lastEntry = 0;
    return { from: this.nextSeq, to: before, forgottenIds };
  }

  countAfter(afterSeq: number): number {
    return Math.max(0, this.lastSeq() - afterSeq);
  }

  /**
   * A consistent online copy of the LMDB environment (LMDB's copy with compaction: a read transaction, so writers
   * go on meanwhile). Other processes may hold the environment open.
   */
  async backup(destFile: string): Promise<void> {
    await this.root.backup(destFile, true);
  }

  getProject(id: string): ProjectRecord | undefined {
    return this.projects.get(id);
  }

  listProjects(): ProjectRecord[] {
    return [...this.projects.getRange()].map((e) => e.value);
  }

  getKey(hash: string): KeyRecord | undefined {
    if (this.swapKeys) return this.swapKeys.get(hash);
    return this.keys.get(hash);
  }

  /** Every key of a project with its hash (a scan: keys are few, and this serves management calls only). */
  listKeys(projectId: string): Array<[string, KeyRecord]> {
    const out: Array<[string, KeyRecord]> = [];
    for (const { key, value } of this.keys.getRange()) if (value.projectId === projectId) out.push([key, value]);
    return out;
  }

  async deleteKey(hash: string): Promise<void> {
    if (this.gate) await this.gate;
    this.touch('keys', hash);
    await this.keys.remove(hash);
    await this.root.flushed;
  }

  async updateProject(project: ProjectRecord): Promise<void> {
    if (this.gate) await this.gate;
    this.touch('projects', project.id);
    await this.projects.put(project.id, project);
    await this.root.flushed;
  }

  /** Deletes a project and all its keys in one transaction (its keys stop working at once). */
  async deleteProject(projectId: string): Promise<void> {
    if (this.gate) await this.gate;
    const keys = this.listKeys(projectId);
    this.touch('projects', projectId);
    for (const [h] of keys) this.touch('keys', h);
    this.touch('meta', PENDING_ERASURES);
    await this.root.transaction(() => {
      void this.projects.remove(projectId);
      for (const [h] of keys) void this.keys.remove(h);
      // Remembered until its events are erased, so a crash in between resumes the erasure at the next start.
      void this.meta.put(PENDING_ERASURES, [...new Set([...this.pendingErasures(), projectId])]);
    });
    await this.root.flushed;
  }

  /** Projects deleted whose events are not erased yet (a crash interrupted the erasure). */
  pendingErasures(): string[] {
    return (this.meta.get(PENDING_ERASURES) as string[] | undefined) ?? [];
  }

  /**
   * Erases a project's records from the log. An entry holding only the project's records (every entry the service
   * writes: one request is one project) becomes a tombstone of the same count; an entry that mixes projects (only
   * tools write those) keeps its other records and gets ERASED markers in place of the project's; a record of a log
   * written before format 2 becomes a tombstone of one. Sequences, continuity and checksums stay valid. Log
   * dictionaries that hold the project's records are dropped, and the entries compressed with them are compressed
   * again with a new dictionary built without the project's records.
   * The work runs in slices of ERASE_SLICE_MS (the scan, each rewrite transaction, the remembered eventIds), yielding
   * between them, so appends of other projects interleave and no write transaction is long. LMDB is copy-on-write:
   * the old pages stay in the file, on its free list, until they are reused, so the environment is then compacted
   * online (compactOnline). The project stays on the pending list until the caller says every file is clean
   * (erasureDone): a crash anywhere before resumes the erasure at the next start. `stopped` ends it early between
   * slices (shutdown).
   * Returns how many records were erased.
   */
  eraseProjectEvents(projectId: string, opts: { onProgress?: (done: number) => void; stopped?: () => boolean } = {}): Promise<number> {
    const run = this.serial.then(() => this.eraseNow(projectId, opts));
    this.serial = run.catch(() => {});
    return run;
  }

  private async eraseNow(projectId: string, opts: { onProgress?: (done: number) => void; stopped?: () => boolean }): Promise<number> {
    if (this.gate) await this.gate;
    const stopped = opts.stopped ?? (() => false);
    const ofProject = (r: LogRecord) => r.t !== 'x' && r.p === projectId;
    const tainted = new Set(this.dictInfos.filter((d) => d.projects.includes(projectId)).map((d) => d.id));
    // 0. a dictionary without the project first, so appends from now on and the rewrites below use it
    if (tainted.size > 0) await this.log.transaction(() => void this.dictionaryFor(this.lastKey(), projectId));
    const clean = (): { id: number; dict: Dictionary | undefined } => {
      const d = [...this.dictInfos].reverse().find((x) => !tainted.has(x.id));
      return d ? { id: d.id, dict: this.dictionary(d.id, 0) } : { id: 0, dict: undefined };
    };
    // 1. which entries hold the project's records or use a dictionary that does (verified as read: erasure never
    // rewrites a damaged entry); a fresh range per slice, so no read transaction is held across turns
    const keys: number[] = [];
    let scanned = STRUCTURES_KEY;
    for (let done = false; !done; ) {
      if (stopped()) return 0;
      const until = performance.now() + ERASE_SLICE_MS;
      done = true;
      for (const { key, value } of this.raw.getRange({ start: scanned + 1 })) {
        scanned = key;
        const { records, entry } = this.entryRecords(key, value);
        if (records !== undefined && (records.some(ofProject) || (entry !== undefined && tainted.has(entry.dictId)))) keys.push(key);
        if (performance.now() >= until) {
          done = false;
          break;
        }
      }
      if (!done) await yieldTurn();
    }
    // 2. rewrite them in transactions of at most ERASE_SLICE_MS of work each, each entry re-read inside its transaction
    let erased = 0;
    const rewrite = (key: number): void => {
      const value = this.raw.get(key);
      if (value === undefined) return;
      const { count, records, entry } = this.entryRecords(key, value);
      if (records === undefined) return;
      const mine = records.filter(ofProject).length;
      if (mine === 0 && !(entry !== undefined && tainted.has(entry.dictId))) return;
      erased += mine;
      if (mine === records.length) {
        this.raw.putSync(key, tombstone(count));
        return;
      }
      const { id, dict } = clean();
      this.raw.putSync(key, encodePacked(this.codec.encode(records.map((r) => (ofProject(r) ? ERASED : r))), count, id, dict));
    };
    for (let i = 0; i < keys.length; ) {
      if (stopped()) return erased;
      if (this.gate) await this.gate;
      await this.log.transaction(() => {
        const until = performance.now() + ERASE_SLICE_MS;
        do rewrite(keys[i++]!);
        while (i < keys.length && performance.now() < until);
      });
      opts.onProgress?.(i);
      await yieldTurn();
    }
    // 3. in one transaction (no append between): entries appended since the scan, then the dictionaries go
    if (tainted.size > 0) {
      await this.log.transaction(() => {
        for (const key of this.raw.getKeys({ start: scanned + 1 })) rewrite(key);
        for (const id of tainted) {
          this.meta.removeSync(`${DICT_PREFIX}${id}`);
          this.dicts.delete(id);
        }
        this.dictInfos = this.dictInfos.filter((d) => !tainted.has(d.id));
        this.meta.putSync(DICTS_KEY, this.dictInfos);
      });
    }
    // Its remembered eventIds (keys hold the project id and its event ids), sliced the same way, then sealed days and
    // month rollups.
    for (;;) {
      if (stopped()) return erased;
      const part: IdKey[] = [];
      const until = performance.now() + ERASE_SLICE_MS / 2;
      for (const k of this.eventIds.getKeys({ start: [projectId], end: [`${projectId}\u0000`] })) {
        if (k[0] === projectId) part.push(k);
        if (performance.now() >= until) break;
      }
      if (part.length === 0) break;
      if (this.gate) await this.gate;
      await this.root.transaction(() => {
        for (const k of part) this.eventIds.removeSync(k);
      });
      await yieldTurn();
    }
    // Its history ids, in slices (an import may have left millions): no transaction holds them all.
    const history = this.openHistoryIds();
    for (;;) {
      if (stopped()) return erased;
      const part: IdKey[] = [];
      const until = performance.now() + ERASE_SLICE_MS / 2;
      for (const k of history.keysOf(projectId)) {
        part.push(k);
        if (performance.now() >= until) break;
      }
      if (part.length === 0) break;
      if (this.gate) await this.gate;
      await this.root.transaction(() => {
        for (const k of part) void this.historyIdsDb.remove(k);
      });
      await yieldTurn();
    }
    const sealed = this.openSealedStore();
    await this.root.transaction(() => {
      sealed.removeProject(projectId);
    });
    await this.root.flushed;
    if (stopped()) return erased;
    await this.compactOnline();
    return erased;
  }

  /**
   * Takes a project off the pending-erasure list: called once every file is clean of it (log, columns, snapshots), so
   * a crash anywhere before finds it pending and erases (and compacts) again at the next start.
   */
  async erasureDone(projectId: string): Promise<void> {
    if (this.gate) await this.gate;
    this.touch('meta', PENDING_ERASURES);
    await this.meta.put(PENDING_ERASURES, this.pendingErasures().filter((id) => id !== projectId));
    await this.root.flushed;
  }

  /** Compacts the environment online (see compactOnline), after any erasure under way. */
  compact(): Promise<void> {
    const run = this.serial.then(() => this.compactOnline());
    this.serial = run.catch(() => {});
    return run;
  }

  /**
   * Copies the environment with compaction (live pages only, so nothing freed survives) while writes go on, then
   * swaps the copy in. LMDB's copy reads one snapshot, in a thread of its own; appends meanwhile go to the old file and
   * are copied over afterwards (their entries, from the sequence the copy began at, and the eventIds they carry), as
   * are the projects, keys and meta entries written meanwhile (each write records its key in `copying`). Writes that
   * are not on a request's path (sealed days, remembered-id upkeep, retention) wait for `copyGate` instead. Only the
   * last catch-up and the swap run under `gate`: appends wait for a few milliseconds, not for the copy.
   */
  private async compactOnline(): Promise<void> {
    const tmp = `${this.file}.compact`;
    let releaseCopy!: () => void;
    this.copyGate = new Promise<void>((r) => (releaseCopy = r));
    let target: RootDatabase | undefined;
    try {
      rmSync(tmp, { force: true });
      rmSync(`${tmp}-lock`, { force: true });
      await this.root.transaction(() => {}); // every queued write is committed first
      await this.root.flushed;
      this.copying = { touched: new Set(), copied: this.lastKey() };
      await this.root.backup(tmp, true);
      target = open({ path: tmp, mapSize: MAP_SIZE, maxDbs: 16, noSubdir: true });
      const to = {
        raw: target.openDB<Buffer, number>({ name: 'log', encoding: 'binary' }),
        eventIds: target.openDB<number, IdKey>({ name: 'event_ids' }),
        historyIds: target.openDB<number, IdKey>({ name: 'history_ids' }),
        projects: target.openDB<Buffer, string>({ name: 'projects', encoding: 'binary' }),
        keys: target.openDB<Buffer, string>({ name: 'keys', encoding: 'binary' }),
        meta: target.openDB<Buffer, string>({ name: 'meta', encoding: 'binary' }),
      };
      // catch up without the gate until what is left is small
      for (let round = 0; round < CATCH_UP_ROUNDS; round++) {
        if ((await this.catchUp(target, to, CATCH_UP_SLICE_MS)) <= CATCH_UP_FINAL) break;
      }
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      while (this.gate) await this.gate;
      this.gate = gate;
      try {
        await this.root.transaction(() => {}); // appends that passed the gate before it closed are committed
        await this.catchUp(target, to, Infinity);
        await target.close();
        target = undefined;
        // lmdb-js cannot open a path again while it is open in this process: close, swap the file, reopen.
        this.swapKeys = new Map([...this.keys.getRange()].map(({ key, value }) => [key, value]));
        this.swapping = true;
        await this.root.close();
        renameSync(tmp, this.file);
        this.openEnv();
      } finally {
        this.swapping = false;
        this.swapKeys = undefined;
        this.gate = undefined;
        release();
      }
    } finally {
      this.copying = undefined;
      if (target) await target.close().catch(() => {});
      rmSync(tmp, { force: true });
      rmSync(`${tmp}-lock`, { force: true });
      this.copyGate = undefined;
      releaseCopy();
    }
  }

  /**
   * Copies into the compacted copy what was written to the live environment since the copy began (or since the last
   * catch-up): log entries after `copying.copied` with their eventIds, msgpackr's shared structures, and the projects,
   * keys and meta entries recorded in `copying.touched`. Transactions of at most `sliceMs` of work. Returns how many
   * entries and keys it copied.
   */
  private async catchUp(
    target: RootDatabase,
    to: { raw: Database<Buffer, number>; eventIds: Database<number, IdKey>; historyIds: Database<number, IdKey>; projects: Database<Buffer, string>; keys: Database<Buffer, string>; meta: Database<Buffer, string> },
    sliceMs: number,
  ): Promise<number> {
    const copying = this.copying!;
    let n = 0;
    for (let more = true; more; ) {
      more = false;
      await target.transaction(() => {
        const until = performance.now() + sliceMs;
        const structures = this.raw.get(STRUCTURES_KEY);
        if (structures !== undefined) to.raw.putSync(STRUCTURES_KEY, structures);
        for (const { key, value } of this.raw.getRange({ start: copying.copied + 1 })) {
          to.raw.putSync(key, value);
          const { records } = this.entryRecords(key, value);
          for (const r of records ?? []) {
            if (r.t !== 'e' || r.eventId === undefined) continue;
            // history ids are kept for good in their own table; live ones in the 48-hour table, as the append wrote them
            if (r.h === 1) to.historyIds.putSync([r.p, r.eventId], 1);
            else to.eventIds.putSync([r.p, r.eventId], r.rt);
          }
          copying.copied = key;
          n++;
          if (performance.now() >= until) {
            more = true;
            return;
          }
        }
        const dbs = { projects: [this.projects, to.projects], keys: [this.keys, to.keys], meta: [this.meta, to.meta] } as const;
        for (const t of copying.touched) {
          const [db, key] = t.split('\u0000') as [keyof typeof dbs, string];
          const [from, into] = dbs[db];
          const bytes = (from as Database<unknown, string>).getBinary(key);
          if (bytes === undefined) into.removeSync(key);
          else into.putSync(key, bytes);
          n++;
        }
        copying.touched.clear();
      });
      if (more) await yieldTurn();
    }
    return n;
  }

  /** Records a write of projects, keys or meta while a compaction copies (see compactOnline). */
  private touch(db: 'projects' | 'keys' | 'meta', key: string): void {
    this.copying?.touched.add(`${db}\u0000${key}`);
  }

  /**
   * Whether LMDB can be read now: false while a compaction swaps the file (a few ms). Synchronous readers of the
   * sealed store answer "unavailable, retry" then instead of failing.
   */
  readable(): boolean {
    return !this.swapping;
  }

  /** Resolves once no compaction is under way (writes wait for it anyway; a reader of event_ids waits here first). */
  async settled(): Promise<void> {
    while (this.gate) await this.gate;
  }

  /** Stores a project and its key hashes in one transaction. */
  async putProject(project: ProjectRecord, keyHashes: Array<[string, KeyRecord]>): Promise<void> {
    if (this.gate) await this.gate;
    this.touch('projects', project.id);
    for (const [h] of keyHashes) this.touch('keys', h);
    await this.root.transaction(() => {
      void this.projects.put(project.id, project);
      for (const [h, rec] of keyHashes) void this.keys.put(h, rec);
    });
    await this.root.flushed;
  }

  async putKey(hash: string, record: KeyRecord): Promise<void> {
    if (this.gate) await this.gate;
    this.touch('keys', hash);
    await this.keys.put(hash, record);
    await this.root.flushed;
  }

  /** Makes `hash` the only admin key: every other admin key record is deleted, in one transaction. */
  async replaceAdminKeys(hash: string, record: KeyRecord): Promise<void> {
    if (this.gate) await this.gate;
    this.touch('keys', hash);
    await this.root.transaction(() => {
      for (const { key, value } of this.keys.getRange()) {
        if (value.kind === 'admin' && key !== hash) {
          this.touch('keys', key);
          void this.keys.remove(key);
        }
      }
      void this.keys.put(hash, record);
    });
    await this.root.flushed;
  }

  /** Whether any admin key is stored. */
  hasAdminKey(): boolean {
    for (const { value } of this.keys.getRange()) if (value.kind === 'admin') return true;
    return false;
  }

  getMeta<T>(key: string): T | undefined {
    return this.meta.get(key) as T | undefined;
  }

  async putMeta(key: string, value: unknown): Promise<void> {
    if (this.gate) await this.gate;
    this.touch('meta', key);
    await this.meta.put(key, value);
    await this.root.flushed;
  }

  loadSalts(): Salt[] {
    return (this.meta.get('salts') as Salt[] | undefined) ?? [];
  }

  async saveSalts(salts: Salt[]): Promise<void> {
    if (this.gate) await this.gate;
    this.touch('meta', 'salts');
    await this.meta.put('salts', salts);
    await this.root.flushed;
  }

  /** A tiny write that proves the store still accepts writes (health). */
  async probeWrite(now: number): Promise<void> {
    if (this.gate) await this.gate;
    try {
      await this.meta.transaction(() => {
        const fault = this.fault?.('write');
        if (fault) throw fault;
        this.meta.putSync('probe', now);
      });
      await this.root.flushed;
    } catch (err) {
      throw commitFailure(err);
    }
  }

  /**
   * Writes and removes SPACE_PROBE_BYTES beside the environment; throws (ENOSPC) when the device is full. LMDB reuses
   * pages freed by earlier transactions, so its own small probe write succeeds on a full disk while an append that
   * needs new pages fails: health must ask for space itself.
   */
  probeSpace(): void {
    const file = path.join(path.dirname(this.file), '.space-check');
    try {
      writeFileSync(file, SPACE_PROBE);
    } finally {
      rmSync(file, { force: true });
    }
  }

  /**
   * One line for a failed write: LMDB reports a short write on a full disk as `Input/output error`, so the space
   * probe says whether the device is full.
   */
  describeWriteFailure(err: unknown): string {
    const said = err instanceof Error ? err.message : String(err);
    try {
      this.probeSpace();
    } catch (space) {
      const code = (space as { code?: string }).code;
      if (code === 'ENOSPC' || code === 'EDQUOT') return `no space left on the device holding ${path.dirname(this.file)} (${code}; LMDB said: ${said})`;
      return `${said} (${this.file}; and ${(space as Error).message})`;
    }
    return `${said} (${this.file})`;
  }

  /** The remembered eventIds (see remembered-ids.ts). */
  openRememberedIds(): RememberedIds {
    return (this.rememberedIds ??= new RememberedIds(this.eventIds, this.eventIdsRaw, () => this.copyGate ?? this.gate, (since, after) => this.eventIdsSince(since, after), this.file));
  }

  /** The eventIds of history, kept for good (see history-ids.ts). */
  openHistoryIds(): HistoryIds {
    return (this.historyIds ??= new HistoryIds(this.historyIdsDb));
  }

  /** Sealed days and month rollups, in this environment (see sealed-store.ts). */
  openSealedStore(): SealedStore {
    return (this.sealedStore ??= new SealedStore(this.root, () => this.copyGate ?? this.gate));
  }

  async close(): Promise<void> {
    try {
      await this.root.close();
    } finally {
      if (this.hold !== undefined) releaseDataDir(this.hold);
      this.hold = undefined;
    }
  }
}
