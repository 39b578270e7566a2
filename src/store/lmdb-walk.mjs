// The LMDB walk run in a short-lived child process by lmdb-probe.ts: opens the environment read-only and reads
// every table's every key (and, unless --keys-only, every value), and checks that each table holds as many records
// as its header counts. LMDB has no checksums: damage to its own pages makes the native code crash (SIGSEGV,
// SIGBUS) or abort on an assertion, so this runs where that ends only this process. Plain JavaScript so the child starts without a TypeScript loader (~50 ms instead of ~400 ms).
// Prints one JSON line: { ok, problem?, tables, records, bytes, ms }.
import { statSync } from 'node:fs';
import { open } from 'lmdb';

const [file, mode] = process.argv.slice(2);
const started = performance.now();
const say = (out) => {
  process.stdout.write(`${JSON.stringify({ ...out, ms: Math.round(performance.now() - started) })}\n`);
  process.exit(0);
};
let tables = 0;
let records = 0;
let bytes = 0;
try {
  const size = statSync(file).size;
  const env = open({ path: file, noSubdir: true, readOnly: true, maxDbs: 64 });
  const stats = env.getStats();
  const reach = (stats.lastPageNumber + 1) * stats.pageSize;
  // LMDB may count a page it allocated but never wrote (freed in the same transaction), so a short file is damage
  // only if the walk reaches past its end (SIGBUS): this line is then the parent's explanation.
  if (reach > size) process.stderr.write(`the file is ${size} bytes long; its pages reach ${reach} bytes\n`);
  // names first: opening a table while a cursor walks the table of tables spoils its read transaction
  for (const name of [...env.getKeys()]) {
    if (typeof name !== 'string') say({ ok: false, problem: `the table of tables holds a name that is not text` });
    const db = env.openDB({ name, encoding: 'binary', keyEncoding: 'binary', create: false });
    const expected = db.getStats().entryCount;
    let n = 0;
    if (mode === '--keys-only') {
      for (const key of db.getKeys()) {
        n++;
        bytes += key.length;
      }
    } else {
      for (const { key, value } of db.getRange()) {
        n++;
        bytes += key.length + value.length;
      }
    }
    if (n !== expected) say({ ok: false, problem: `table ${name}: ${n} records walked but its header counts ${expected}` });
    tables++;
    records += n;
  }
  say({ ok: true, tables, records, bytes });
} catch (err) {
  say({ ok: false, problem: err instanceof Error ? err.message : String(err) });
}
