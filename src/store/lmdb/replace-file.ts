import { linkSync, readdirSync, renameSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';

/**
 * Swapping in a compacted LMDB file without freeing the old one on the main thread. A rename over a file drops its
 * last link, and the file system frees its extents inside that call: measured here, 66 ms for 200 MB, 318 ms for
 * 1 GB and 557 ms for 3 GB, while every write waits at the swap's gate. The old file gets a second name first (a
 * hard link, instant), the rename then only moves a name, and the old file is removed on libuv's thread pool.
 */

/** The suffix of an old file's second name: `analytics.lmdb.replaced-<pid>-<n>`. */
const REPLACED = '.replaced-';
let replaced = 0;

/**
 * Renames `tmp` over `file`; resolves once the old file's bytes are freed (the caller need not wait: the swap itself
 * is done when this returns). A crash in between leaves a second name that `removeReplaced` removes at the next start.
 */
export function replaceFile(tmp: string, file: string): Promise<void> {
  const old = `${file}${REPLACED}${process.pid}-${++replaced}`;
  let linked = true;
  try {
    linkSync(file, old);
  } catch {
    linked = false; // no old file (or a file system without hard links): the rename frees it, as before
  }
  renameSync(tmp, file);
  return linked ? rm(old, { force: true }) : Promise.resolve();
}

/** Removes old files a crash left under their second name (their bytes may hold an erased project's events). */
export function removeReplaced(file: string): Promise<void> {
  const dir = path.dirname(file);
  const prefix = `${path.basename(file)}${REPLACED}`;
  let names: string[];
  try {
    names = readdirSync(dir).filter((f) => f.startsWith(prefix));
  } catch {
    return Promise.resolve();
  }
  return Promise.all(names.map((f) => rm(path.join(dir, f), { force: true }))).then(() => {});
}
