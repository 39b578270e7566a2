import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { LogStore } from '../src/store/lmdb/log-store.ts';
import { replaceFile } from '../src/store/lmdb/replace-file.ts';

test('a compacted file is swapped in by name; the old one is removed afterwards, and a crash leftover at the next open', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'analytics-replace-'));
  try {
    const file = path.join(dir, 'x.lmdb');
    writeFileSync(file, 'old bytes');
    writeFileSync(`${file}.compact`, 'new bytes');
    const freed = replaceFile(`${file}.compact`, file);
    // the swap is done when replaceFile returns: the new file is in place, the old one still has its second name
    assert.equal(readFileSync(file, 'utf8'), 'new bytes');
    assert.equal(existsSync(`${file}.compact`), false);
    const second = readdirSync(dir).filter((f) => f.startsWith('x.lmdb.replaced-'));
    assert.equal(second.length, 1, 'the old file keeps a second name until its removal');
    assert.equal(statSync(path.join(dir, second[0]!)).nlink, 1);
    await freed;
    assert.deepEqual(readdirSync(dir).sort(), ['x.lmdb']);
    // nothing to replace: the rename alone
    writeFileSync(`${dir}/y.lmdb.compact`, 'only');
    await replaceFile(`${dir}/y.lmdb.compact`, `${dir}/y.lmdb`);
    assert.equal(readFileSync(`${dir}/y.lmdb`, 'utf8'), 'only');

    // A process that died between the swap and the removal leaves the old file under its second name (with whatever
    // an erasure removed from the new one): the next open of the store removes it.
    const data = path.join(dir, 'data');
    let store = LogStore.open(data, 'commit');
    await store.close();
    const leftover = path.join(data, 'analytics.lmdb.replaced-4242-1');
    writeFileSync(leftover, 'an erased project lived here');
    store = LogStore.open(data, 'commit');
    for (let i = 0; i < 100 && existsSync(leftover); i++) await new Promise((r) => setTimeout(r, 10));
    await store.close();
    assert.equal(existsSync(leftover), false);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
