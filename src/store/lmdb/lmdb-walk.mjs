// The LMDB walk run in a short-lived child process by lmdb-probe.ts: opens the environment read-only, reads every
// key and value of every table while a budget of records (and past 20,000 records or 4 MiB, of time) lasts, and checks that
// each table walked whole holds as many records as its header counts; it samples the tables past the budget by random
// lookups and both ends. LMDB has no checksums: damage to its own pages makes the native code crash (SIGSEGV,
// SIGBUS) or abort on an assertion, so this runs where that ends only this process. Plain JavaScript so the child starts without a TypeScript loader (~50 ms instead of ~400 ms).
// Prints one JSON line: { ok, problem?, tables, records, sampled, bytes, ms }.
import { statSync } from 'node:fs';
import { open } from 'lmdb';

const [file, budgetArg, timeArg] = process.argv.slice(2);
/** Records walked one by one in all (lmdb-probe.ts passes WALK_BUDGET_RECORDS): past it, tables are sampled. */
const budget = Number(budgetArg ?? 500_000);
/**
 * Records and bytes every store has walked one by one whatever the time it takes: a small directory (and every
 * test's) is walked whole. Past either the walk also stops at WALK_TIME_MS.
 */
const WALK_RECORDS_ALWAYS = 20_000;
const WALK_BYTES_ALWAYS = 4 << 20;
/**
 * Time the one-by-one walk may take once WALK_RECORDS_ALWAYS or WALK_BYTES_ALWAYS are read: the walk is a start's critical path (a year of
 * 10,000 projects: 1.5 s of a 1.9 s start with the file in the page cache, 9.9 s of 10.9 s without). What is left
 * then is sampled.
 */
const WALK_TIME_MS = Number(timeArg ?? 300);
/** Random descents into a table too big to walk: each reads the branch pages down to one leaf (~5 µs). */
const SAMPLE_DESCENTS = 20_000;
/**
 * A sampled table's descents stop after this long (at least SAMPLE_DESCENTS_ALWAYS): with the file out of the page
 * cache each descent waits for the disk (20,000 took seconds).
 */
const SAMPLE_TIME_MS = 40;
/** Descents every sampled table gets whatever the time they take. */
const SAMPLE_DESCENTS_ALWAYS = 32;
/** Keys read at each end of a sampled table (new pages are taken at the end of the file). */
const SAMPLE_RUN = 8;
/**
 * Value bytes on overflow pages (values too big for a leaf: the log's entries) a table may have and still have its
 * values read by the walk. Past it the walk reads every key (every branch and leaf page of the tree) and about this
 * many bytes of values, spread evenly: the log's entries carry their own checksums, checked when read, and reading all
 * of them made the walk follow the history (a year of 100M events is 6.9 GB).
 */
const WALK_VALUE_BYTES = 64 << 20;
const started = performance.now();
const say = (out) => {
  process.stdout.write(`${JSON.stringify({ ...out, ms: Math.round(performance.now() - started) })}\n`);
  process.exit(0);
};
let tables = 0;
let records = 0;
let bytes = 0;
let sampled = 0;
try {
  const size = statSync(file).size;
  const env = open({ path: file, noSubdir: true, readOnly: true, maxDbs: 64 });
  const stats = env.getStats();
  const reach = (stats.lastPageNumber + 1) * stats.pageSize;
  // LMDB may count a page it allocated but never wrote (freed in the same transaction), so a short file is damage
  // only if the walk reaches past its end (SIGBUS): this line is then the parent's explanation.
  if (reach > size) process.stderr.write(`the file is ${size} bytes long; its pages reach ${reach} bytes\n`);
  // names first: opening a table while a cursor walks the table of tables spoils its read transaction
  const names = [...env.getKeys()];
  const dbs = names.map((name) => {
    if (typeof name !== 'string') say({ ok: false, problem: 'the table of tables holds a name that is not text' });
    const db = env.openDB({ name, encoding: 'binary', keyEncoding: 'binary', create: false });
    const st = db.getStats();
    return { name, db, count: st.entryCount, overflowBytes: st.overflowPages * st.pageSize };
  });
  // the smallest tables are walked whole first; what the budget (records, then time) cannot cover is sampled
  let left = budget;
  /** past the records every walk reads, the time is up: the rest is sampled */
  const timeUp = () => (records >= WALK_RECORDS_ALWAYS || bytes >= WALK_BYTES_ALWAYS) && performance.now() - started > WALK_TIME_MS;
  for (const { name, db, count, overflowBytes } of dbs.sort((a, b) => a.count - b.count)) {
    let whole = false;
    if (count <= left && !timeUp()) {
      // Every key (the whole tree) and value; for the log (values on overflow pages) the values of a sample spread
      // over it. Walking a table past the time left stops it: the rest of it is sampled below.
      const every = overflowBytes > WALK_VALUE_BYTES ? Math.ceil(overflowBytes / WALK_VALUE_BYTES) : 0;
      let n = 0;
      let cut = false;
      for (const row of every > 0 ? db.getKeys() : db.getRange()) {
        if (every > 0) bytes += row.length + (n % every === 0 ? (db.get(row)?.length ?? 0) : 0);
        else bytes += row.key.length + row.value.length;
        n++;
        records++;
        if ((n & 15) === 0 && timeUp()) {
          cut = true;
          break;
        }
      }
      if (!cut && n !== count) say({ ok: false, problem: `table ${name}: ${n} records walked but its header counts ${count}` });
      left -= n;
      whole = !cut;
    }
    if (!whole) {
      // random keys between the first and the last (their common prefix, then a byte between theirs): lookups
      // spread over the table's leaves, each descending from the root (cheaper than opening a cursor there)
      const first = [...db.getKeys({ limit: 1 })][0];
      const last = [...db.getKeys({ reverse: true, limit: 1 })][0];
      if (first && last) {
        let common = 0;
        while (common < first.length && common < last.length && first[common] === last[common]) common++;
        const lo = first[common] ?? 0;
        const hi = last[common] ?? 255;
        const sampling = performance.now();
        for (let i = 0; i < SAMPLE_DESCENTS && (i < SAMPLE_DESCENTS_ALWAYS || performance.now() - sampling < SAMPLE_TIME_MS); i++) {
          const probe = Buffer.alloc(common + 4);
          first.copy(probe, 0, 0, common);
          probe[common] = lo + Math.floor(Math.random() * (hi - lo + 1));
          for (let j = common + 1; j < probe.length; j++) probe[j] = Math.floor(Math.random() * 256);
          bytes += db.get(probe)?.length ?? 0;
        }
      }
      // both ends: new pages are taken at the end of the file
      for (const key of db.getKeys({ limit: SAMPLE_RUN })) bytes += key.length;
      for (const key of db.getKeys({ reverse: true, limit: SAMPLE_RUN })) bytes += key.length;
      sampled++;
    }
    tables++;
  }
  say({ ok: true, tables, records, sampled, bytes });
} catch (err) {
  say({ ok: false, problem: err instanceof Error ? err.message : String(err) });
}
