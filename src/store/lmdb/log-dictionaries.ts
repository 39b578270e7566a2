import { crc32 } from 'node:zlib';
import type { LogRecord } from '../../core/types.ts';
import { decompress, Dictionary, MAX_DICTIONARY } from './dict-lz.ts';
import { checkEntry, KIND_PACKED, KIND_TOMBSTONE, LogDamage, unwrap, type CheckedEntry } from './log-entry-format.ts';
import { STRUCTURES_KEY, type LmdbEnv } from './log-env.ts';

/**
 * Log dictionaries (meta `logDict:<id>`: the bytes; meta `logDicts`: id, the sequence it was built at and the projects
 * whose records it holds). A dictionary is the tail of the newest entries' raw msgpack, up to 32 KiB: this log's own
 * URLs, paths, field values and record layouts, which is what a single-event entry is made of. It is built from the
 * log itself when the log reaches DICT_FIRST records, then at 10x that, and so on up to every DICT_EVERY records, so it
 * follows the traffic; the first entry using it is written in the same transaction. Dictionaries are never changed
 * (an entry names the one it was compressed with) and are small (32 KiB per 100,000 records: 0.3 B per event).
 * Erasing a project rewrites the entries compressed with a dictionary that holds its records and drops that
 * dictionary, so no file keeps the project's strings. The codec itself is dict-lz.ts.
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
/** The first size of the buffer entries are decompressed into to be decoded at once; it grows to the largest entry. */
const SCRATCH_BYTES = 64 * 1024;

interface DictInfo {
  id: number;
  /** the log's last sequence when it was built */
  from: number;
  /** projects whose records are in its bytes */
  projects: string[];
  /** crc32 of its bytes: a changed dictionary byte would decompress entries wrongly, so it is checked when loaded */
  crc: number;
}

/** A dictionary to compress with: its id (named in the entry) and the decoded dictionary (undefined: id 0, none). */
export interface DictChoice {
  id: number;
  dict: Dictionary | undefined;
}

/** A dictionary build's progress through the log's tail, newest entry first. */
interface TailScan {
  exclude: string | undefined;
  /** the excluded project's id as bytes: raw msgpack that does not hold them holds no record of it */
  excludeBytes: Buffer | undefined;
  parts: Buffer[];
  projects: Set<string>;
  size: number;
  skipped: number;
  /** the lowest key read so far (undefined: none yet) */
  below: number | undefined;
}

function newScan(exclude: string | undefined): TailScan {
  return { exclude, excludeBytes: exclude === undefined ? undefined : Buffer.from(exclude), parts: [], projects: new Set(), size: 0, skipped: 0, below: undefined };
}

/** The log's dictionaries: which exist, building a new one when due, decoding them, and decompressing entries. */
export class LogDictionaries {
  /** log dictionaries known, oldest first (see DICT_FIRST) */
  private infos: DictInfo[] = [];
  /** the decoded ones, at most DICT_CACHE */
  private readonly decoded = new Map<number, Dictionary>();
  /** where entries are decompressed to be decoded at once (see payload) */
  private scratch = Buffer.allocUnsafeSlow(SCRATCH_BYTES);

  constructor(private readonly env: LmdbEnv) {
    this.reload();
    env.onOpen(() => this.reload());
  }

  /** The environment was (re)opened: the stored list, nothing decoded. */
  private reload(): void {
    this.infos = this.stored();
    this.decoded.clear();
  }

  private stored(): DictInfo[] {
    return (this.env.meta.get(DICTS_KEY) as DictInfo[] | undefined) ?? [];
  }

  /** A write transaction failed: the stored list again (a dictionary built in it is not stored). */
  forgetUncommitted(): void {
    this.infos = this.stored();
  }

  /**
   * The dictionary new entries are compressed with, inside a write transaction: the newest one, or a new one built
   * from the log's tail (and stored in this transaction, with the entry that first uses it) when the log has grown
   * enough since the newest was built. `exclude`: build a new one now, without that project's records (erasure).
   */
  forAppend(last: number, exclude?: string): { id: number; dict: Dictionary } | undefined {
    const newest = this.infos[this.infos.length - 1];
    const due = newest === undefined ? DICT_FIRST : newest.from < DICT_EVERY ? newest.from * 10 : newest.from + DICT_EVERY;
    if (last >= due || exclude !== undefined) {
      const scan = newScan(exclude);
      this.scanTail(scan, Infinity);
      this.adopt(last, scan);
    }
    return this.current();
  }

  /**
   * Erasure's dictionary without `exclude`'s records, built outside any write transaction in slices of `sliceMs` with
   * a turn between them (the scan may decode thousands of the project's entries), then stored in one short transaction.
   * Entries appended meanwhile with an older dictionary are found by the erasure's scan, which runs after this.
   */
  async replaceWithout(exclude: string, sliceMs: number): Promise<void> {
    const scan = newScan(exclude);
    while (!this.scanTail(scan, performance.now() + sliceMs)) await new Promise((resolve) => setImmediate(resolve));
    await this.env.log.transaction(() => this.adopt(this.env.lastKey(), scan));
  }

  /** The dictionary new entries are compressed with now (forAppend may replace it inside the next transaction). */
  current(): { id: number; dict: Dictionary } | undefined {
    const use = this.infos[this.infos.length - 1];
    return use ? { id: use.id, dict: this.get(use.id, use.id) } : undefined;
  }

  /** Stores the dictionary a scan found (inside a write transaction), built at sequence `last`. */
  private adopt(last: number, scan: TailScan): void {
    if (scan.size === 0) return;
    const all = Buffer.concat(scan.parts);
    const bytes = Buffer.from(all.subarray(Math.max(0, all.length - MAX_DICTIONARY)));
    const meta = this.env.meta;
    const id = ((meta.get(DICT_LAST_ID) as number | undefined) ?? 0) + 1;
    const info: DictInfo = { id, from: last, projects: [...scan.projects].sort(), crc: crc32(bytes) };
    meta.putSync(DICT_LAST_ID, info.id);
    meta.putSync(`${DICT_PREFIX}${info.id}`, bytes);
    this.infos = [...this.infos, info];
    meta.putSync(DICTS_KEY, this.infos);
    for (const k of [DICT_LAST_ID, `${DICT_PREFIX}${info.id}`, DICTS_KEY]) this.env.touch('meta', k);
    this.decoded.set(info.id, new Dictionary(bytes));
  }

  /**
   * Gathers the raw msgpack of the newest entries (tombstones and first-format records skipped, and entries holding
   * `exclude`'s records), newest last, until MAX_DICTIONARY bytes, from where the scan stopped; with the projects they
   * hold. Returns whether the scan is done (false: `until` came first).
   */
  private scanTail(scan: TailScan, until: number): boolean {
    const range = scan.below === undefined ? { reverse: true } : { reverse: true, start: scan.below - 1 };
    for (const { key, value } of this.env.raw.getRange(range)) {
      if (key === STRUCTURES_KEY || key < this.env.start || scan.size >= MAX_DICTIONARY) return true;
      if (performance.now() >= until) return false; // this entry is read again by the next slice
      scan.below = key;
      const e = unwrap(value);
      if (!e || e[0] === KIND_TOMBSTONE) continue;
      let raw: Buffer;
      let records: LogRecord[] = [];
      let excluded = false;
      try {
        const p = this.payload(checkEntry(e, key), key);
        raw = p.bytes.subarray(p.start, p.end);
        // an entry whose bytes name the excluded project is skipped undecoded (decoding is half the cost of a read);
        // one whose bytes do not hold its id holds none of its records
        excluded = scan.excludeBytes !== undefined && raw.indexOf(scan.excludeBytes) >= 0;
        if (!excluded) records = this.env.codec.decode(raw) as LogRecord[];
      } catch {
        continue; // damage is reported by the verifying reader, not here
      }
      if (excluded) {
        if (++scan.skipped >= DICT_SCAN_SKIPPED) return true; // the project fills the log's tail: a smaller dictionary will do
        continue;
      }
      for (const r of records) if (r.t !== 'x') scan.projects.add(r.p);
      // a copy of its own: the scan may go on in a later turn, in a read transaction of its own
      scan.parts.unshift(Buffer.from(raw.length > MAX_DICTIONARY ? raw.subarray(raw.length - MAX_DICTIONARY) : raw));
      scan.size += raw.length;
    }
    return true;
  }

  /** A log dictionary by id, decoded once (bounded cache); LogDamage at `seq` when it is missing or damaged. */
  get(id: number, seq: number): Dictionary {
    let d = this.decoded.get(id);
    if (d) return d;
    const bytes = this.env.meta.get(`${DICT_PREFIX}${id}`) as Buffer | undefined;
    // another process (the service, while a tool reads) may have built it since this store was opened
    if (!this.infos.some((d) => d.id === id)) {
      const known = new Set(this.infos.map((d) => d.id));
      this.infos = [...this.infos, ...this.stored().filter((d) => !known.has(d.id))].sort((a, b) => a.id - b.id);
    }
    const info = this.infos.find((d) => d.id === id);
    if (!Buffer.isBuffer(bytes) || !info) throw new LogDamage(seq, `the log dictionary ${id} its entry names is missing`);
    if (crc32(bytes) !== info.crc) throw new LogDamage(seq, `the log dictionary ${id} its entry names is damaged (checksum mismatch)`);
    d = new Dictionary(bytes);
    if (this.decoded.size >= DICT_CACHE) this.decoded.delete(this.decoded.keys().next().value!);
    this.decoded.set(id, d);
    return d;
  }

  /**
   * The msgpack bytes of a checked entry's records (decompressed for kind 4). `scratch`: into a buffer reused by the
   * next call (for bytes decoded at once: msgpackr copies strings out of its input).
   */
  payload(entry: CheckedEntry, seq: number, scratch = false): { bytes: Buffer; start: number; end: number } {
    if (entry.kind !== KIND_PACKED) return { bytes: entry.bytes, start: entry.at, end: entry.bytes.length };
    const dict = entry.dictId === 0 ? undefined : this.get(entry.dictId, seq);
    try {
      if (!scratch) return { bytes: decompress(entry.bytes, entry.rawLength, dict, undefined, entry.at), start: 0, end: entry.rawLength };
      if (this.scratch.length < entry.rawLength) this.scratch = Buffer.allocUnsafeSlow(Math.max(entry.rawLength, this.scratch.length * 2));
      return { bytes: decompress(entry.bytes, entry.rawLength, dict, this.scratch, entry.at), start: 0, end: entry.rawLength };
    } catch (err) {
      throw new LogDamage(seq, `entry does not decompress: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  /** Ids of the dictionaries whose bytes hold records of `projectId` (an erasure drops them). */
  holding(projectId: string): Set<number> {
    return new Set(this.infos.filter((d) => d.projects.includes(projectId)).map((d) => d.id));
  }

  /** The newest dictionary not in `ids` (none: id 0), to compress an erasure's rewritten entries with. */
  newestWithout(ids: ReadonlySet<number>): DictChoice {
    const d = [...this.infos].reverse().find((x) => !ids.has(x.id));
    return d ? { id: d.id, dict: this.get(d.id, 0) } : { id: 0, dict: undefined };
  }

  /** Removes the dictionaries `ids`, inside a write transaction (once no entry names them). */
  drop(ids: ReadonlySet<number>): void {
    for (const id of ids) {
      this.env.meta.removeSync(`${DICT_PREFIX}${id}`);
      this.decoded.delete(id);
    }
    this.infos = this.infos.filter((d) => !ids.has(d.id));
    this.env.meta.putSync(DICTS_KEY, this.infos);
  }

  /** Bytes of the stored dictionaries (bench: bytes per event). */
  storedBytes(): number {
    let bytes = 0;
    for (const d of this.infos) bytes += (this.env.meta.get(`${DICT_PREFIX}${d.id}`) as Buffer | undefined)?.length ?? 0;
    return bytes;
  }
}
