import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { open } from 'lmdb';
import { walkEnvironment } from '../src/store/lmdb/lmdb-probe.ts';

/**
 * The startup walk of analytics.lmdb is bounded in time as well as in records: past its first 20,000 records (or 4
 * MiB) it stops at its time and samples what is left, so a year of 10,000 projects starts without reading for
 * seconds (most of all with the file out of the page cache); a small directory is still walked whole, and damage the
 * walk is there for is still named.
 */

const dir = mkdtempSync(path.join(tmpdir(), 'walk-bounds-'));
const file = path.join(dir, 'analytics.lmdb');
const BIG = 60_000;
const SMALL = 100;

before(async () => {
  const env = open({ path: file, noSubdir: true, maxDbs: 8 });
  const small = env.openDB({ name: 'small' });
  const big = env.openDB({ name: 'big' });
  await env.transaction(() => {
    for (let i = 0; i < SMALL; i++) void small.put(`s${i}`, { i });
    for (let i = 0; i < BIG; i++) void big.put(`b${String(i).padStart(6, '0')}`, { i, pad: 'x'.repeat(40) });
  });
  await env.close();
});

after(() => rmSync(dir, { recursive: true, force: true }));

test('with time enough every record is walked; with none, the first 20,000 are and the rest of the table is sampled', () => {
  const whole = walkEnvironment(file, { timeMs: 600_000 });
  assert.equal(whole.ok, true, whole.problem);
  assert.equal(whole.records, BIG + SMALL);
  assert.equal(whole.sampled, 0);

  const bounded = walkEnvironment(file, { timeMs: 0 });
  assert.equal(bounded.ok, true, bounded.problem);
  assert.ok(bounded.records! >= 20_000 && bounded.records! < 20_000 + SMALL + 16, `walked ${bounded.records} records one by one`);
  assert.equal(bounded.sampled, 1, 'the big table, cut by the time, is sampled');
});

test('a walk out of time still names a damaged file', () => {
  const copy = path.join(dir, 'damaged.lmdb');
  const bytes = readFileSync(file);
  for (let i = 16; i < 80; i++) bytes[i] = bytes[i]! ^ 0xff; // meta page 0
  for (let i = 4096 + 16; i < 4096 + 80; i++) bytes[i] = bytes[i]! ^ 0xff; // and meta page 1
  writeFileSync(copy, bytes);
  const r = walkEnvironment(copy, { timeMs: 0 });
  assert.equal(r.ok, false);
  assert.ok(r.problem && r.problem.length > 0);
});
