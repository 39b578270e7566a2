import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import fc from 'fast-check';
import type { LogRecord } from '../src/core/types.ts';
import { check, rawEvents, rebuild } from '../src/engine/maintenance.ts';
import { compress, CorruptStream, decompress, Dictionary, MAX_DICTIONARY } from '../src/store/lmdb/dict-lz.ts';
import { checkEntry } from '../src/store/lmdb/log-entry-format.ts';
import { LogDamage, LogStore, type StoreFaults, type StoredEntries } from '../src/store/lmdb/log-store.ts';

/**
 * Log format 4 (issue 18, disk): entries compressed against dictionaries built from the log's own records, with the
 * count and a CRC-32 over the bytes as stored; logs written by the previous release (format 2) still read, in one log
 * with new entries; a project's erasure leaves no dictionary holding its strings.
 */

const DAY = '2026-11-21';
const T0 = Date.parse(`${DAY}T08:00:00Z`);
const PATHS = ['/', '/pricing', '/docs/getting-started', '/blog/launch', '/login', '/signup', '/products/widget'];

function rec(p: string, i: number, marker = ''): LogRecord {
  const path_ = `${PATHS[i % PATHS.length]}${marker}`;
  const ts = T0 + i * 1000;
  return {
    t: 'e', p, ts, rt: ts, day: DAY, event: i % 9 === 0 ? 'click' : 'page_view', url: `https://shop.example${path_}`, path: path_,
    referrer: i % 3 === 0 ? 'https://www.google.com/' : '', source: i % 3 === 0 ? 'Google' : 'Direct', sessionId: `s${i % 37}-${(i * 7919).toString(36)}`,
    user: `s:s${i % 37}`, country: ['DE', 'US', 'FR'][i % 3]!, device: i % 4 === 0 ? 'mobile' : 'desktop', params: {},
    eventId: `${i.toString(36)}-${(i * 104729).toString(36)}`, browser: 'Chrome', os: 'Windows', ctx: { screen: '1920x1080', language: 'en-US' },
  } as LogRecord;
}

const tmp = () => mkdtempSync(path.join(tmpdir(), 'analytics-logformat-'));

function allFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name);
    return statSync(full).isDirectory() ? allFiles(full) : [full];
  });
}

test('dict-lz: every input comes back byte for byte, with and without a dictionary; garbage is refused, never mis-sized', () => {
  const bytes = fc.uint8Array({ maxLength: 3000 });
  // inputs with repeats (what records are), and dictionaries sharing some of them
  const repetitive = fc.array(fc.constantFrom('https://', 'page_view', 'Chrome', '/pricing', '\u0000\u0001', 'xyz'), { maxLength: 300 }).map((a) => Buffer.from(a.join('')));
  fc.assert(
    fc.property(fc.oneof(bytes, repetitive), fc.oneof(bytes, repetitive), (input, dictBytes) => {
      const dict = new Dictionary(dictBytes.subarray(0, MAX_DICTIONARY));
      for (const d of [undefined, dict]) {
        const c = Buffer.from(compress(input, d)); // a view of the compressor's own buffer: copied, as encodePacked does
        assert.ok(c.length <= input.length + input.length / 255 + 16);
        assert.deepEqual(decompress(c, input.length, d), Buffer.from(input));
      }
    }),
    { numRuns: 400 },
  );
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 200 }), fc.nat(500), (garbage, size) => {
      try {
        assert.equal(decompress(garbage, size).length, size);
      } catch (err) {
        assert.ok(err instanceof CorruptStream, String(err));
      }
    }),
    { numRuns: 2000 },
  );
});

test('a log written by the previous release (format 2) and continued in format 4 reads back every record in order, verified; check, export and rebuild read it', async () => {
  const dir = tmp();
  try {
    const records = Array.from({ length: 1200 }, (_, i) => rec('p_a', i));
    const old = LogStore.open(dir, 'commit', { writeFormat: 2 });
    await old.putProject({ id: 'p_a', name: 'a', ownerId: 'o', allowedOrigins: [], allowedReferrers: [], timezone: 'UTC', monthlyQuota: 0, createdAt: T0 }, []);
    for (let i = 0; i < 300; i++) await old.append([records[i]!]);
    await old.append(records.slice(300, 400));
    await old.close();
    let stored!: StoredEntries;
    const store = LogStore.open(dir, 'commit', { entries: (e) => (stored = e) });
    for (let i = 400; i < 1100; i++) await store.append([records[i]!]);
    await store.append(records.slice(1100, 1200));
    // both kinds are there: format 2 entries are not rewritten, the new ones are kind 4
    assert.equal(stored.storedEntry(1)![0], 0xc4, 'a format 2 entry, as the previous release stored it (msgpack bin)');
    assert.equal(stored.storedEntry(1000)![0], 4);
    const read = [...store.readAfter(0)];
    assert.deepEqual(read.map((r) => r.seq), records.map((_, i) => i + 1));
    assert.deepEqual(read.map((r) => r.record), records);
    assert.equal(store.verified, 1200);
    assert.deepEqual([...store.readAfter(850)].map((r) => r.record), records.slice(850));
    // the compressed single-event entries, after the log's first dictionaries, are a fraction of format 2's
    const format2 = stored.storedEntry(200)!.length;
    const format4 = stored.storedEntry(1050)!.length;
    assert.ok(format4 < format2 * 0.6, `format 4 entry ${format4} B vs format 2 ${format2} B`);
    await store.close();
    const report = await check(dir);
    assert.deepEqual(report.problems, []);
    const exported: unknown[] = [];
    for await (const e of rawEvents(dir, 'p_a', DAY, DAY)) exported.push(e);
    assert.deepEqual(exported, records);
    await rebuild(dir);
    assert.deepEqual((await check(dir)).problems, []);
    // a restart reads on from where it was
    const again = LogStore.open(dir, 'commit');
    assert.equal(again.lastSeq(), 1200);
    assert.equal(await again.append([rec('p_a', 1200)]), 1201);
    assert.equal([...again.readAfter(1199)].length, 2);
    await again.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('entries encoded before their transaction are encoded again when it adopts a new dictionary or admits fewer records', async () => {
  const dir = tmp();
  try {
    let stored!: StoredEntries;
    const store = LogStore.open(dir, 'commit', { entries: (e) => (stored = e) });
    const records = Array.from({ length: 400 }, (_, i) => rec('p_a', i));
    assert.equal(await store.append(records.slice(0, 100)), 1);
    // the log holds 100 records: this append's transaction builds the first dictionary, after its entry was encoded
    assert.equal(await store.append(records.slice(100, 150)), 101);
    assert.equal(checkEntry(stored.storedEntry(101), 101).dictId, 1, 'compressed against the dictionary its transaction adopted');
    assert.ok(Buffer.isBuffer(store.getMeta<Buffer>('logDict:1')));
    // admit drops every other record: what is stored is what it kept, not what was encoded before
    const kept = records.slice(150, 400).filter((_, i) => i % 2 === 0);
    assert.equal(await store.append(records.slice(150, 400), undefined, (given) => given.filter((_, i) => i % 2 === 0)), 151);
    assert.equal(checkEntry(stored.storedEntry(151), 151).count, kept.length);
    assert.deepEqual([...store.readAfter(0)].map((r) => r.record), [...records.slice(0, 150), ...kept]);
    assert.equal(store.lastSeq(), 150 + kept.length);
    await store.close();
    assert.deepEqual((await check(dir)).problems, []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a record shape first met before its transaction has its structure saved in that transaction, not in one of its own', async () => {
  const dir = tmp();
  try {
    const faults: StoreFaults = { fault: undefined };
    let store = LogStore.open(dir, 'commit', { faults });
    // the log's shared msgpack structures, as stored (key 0 of the log's table)
    const structures = (s: LogStore) => (s as unknown as { env: { raw: { get(k: number): Buffer | undefined } } }).env.raw.get(0);
    const first = rec('p_a', 1);
    await store.append([first]);
    const before = structures(store);
    assert.ok(before, 'the first append stored its structures');
    // a shape not seen yet (its ctx has another key): the append's transaction fails, as on a full disk
    const shaped = { ...rec('p_a', 2), ctx: { screen: '390x844', language: 'de-DE', timezone: 'Europe/Berlin' } } as LogRecord;
    faults.fault = (op) => (op === 'append' ? new Error('ENOSPC: no space left on device') : undefined);
    await assert.rejects(store.append([shaped]));
    assert.deepEqual(structures(store), before, 'nothing of the failed append is stored, its new structure neither');
    faults.fault = undefined;
    assert.equal(await store.append([shaped]), 2);
    assert.notDeepEqual(structures(store), before, 'stored with the entry that first uses it');
    await store.close();
    store = LogStore.open(dir, 'commit');
    assert.deepEqual([...store.readAfter(0)].map((r) => r.record), [first, shaped]);
    await store.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a byte changed inside a format 4 entry or a log dictionary is refused at its sequence, before anything is decompressed', async () => {
  const dir = tmp();
  try {
    let stored!: StoredEntries;
    const store = LogStore.open(dir, 'commit', { entries: (e) => (stored = e) });
    for (let i = 0; i < 400; i++) await store.append([rec('p_a', i)]);
    const entry = stored.storedEntry(300)!;
    const dictionary = store.getMeta<Buffer>('logDict:1')!;
    assert.ok(Buffer.isBuffer(dictionary) && dictionary.length > 10_000, 'the first dictionary, built at 100 records');
    await store.close();
    const damage = async (name: string, bytes: Buffer, at: number): Promise<LogDamage> => {
      const d = path.join(dir, name);
      const file = readFileSync(path.join(dir, 'analytics.lmdb'));
      const where = file.indexOf(bytes);
      assert.ok(where > 0, `${name}: found in the file`);
      file[where + at] = file[where + at]! ^ 0x10;
      mkdirSync(d, { recursive: true });
      writeFileSync(path.join(d, 'analytics.lmdb'), file);
      const reader = LogStore.open(d, 'commit', { readOnly: true });
      try {
        let caught: unknown;
        try {
          for (const _ of reader.readAfter(0)) void _;
        } catch (err) {
          caught = err;
        }
        assert.ok(caught instanceof LogDamage, `${name}: ${String(caught)}`);
        return caught;
      } finally {
        await reader.close();
      }
    };
    const inEntry = await damage('entry', entry, entry.length - 3);
    assert.equal(inEntry.seq, 300);
    assert.match(inEntry.message, /checksum mismatch/);
    const inDictionary = await damage('dictionary', dictionary, dictionary.length >> 1);
    assert.equal(inDictionary.seq, 101, 'the first entry compressed with it');
    assert.match(inDictionary.message, /dictionary 1 .*damaged/);
    const report = await check(path.join(dir, 'entry'));
    assert.ok(report.problems.some((p) => p.includes('damaged at sequence 300:')), report.problems.join('\n'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('erasing a project drops the log dictionaries holding its records: no file keeps its strings, other entries still read', async () => {
  const dir = tmp();
  try {
    const marker = `/gone-${randomBytes(8).toString('hex')}`;
    const store = LogStore.open(dir, 'commit');
    const kept: LogRecord[] = [];
    for (let i = 0; i < 600; i++) {
      const r = i % 2 === 0 ? rec('p_gone', i, marker) : rec('p_keep', i);
      if (r.t === 'e' && r.p === 'p_keep') kept.push(r);
      await store.append([r]);
    }
    assert.ok(allFiles(dir).some((f) => readFileSync(f).includes(Buffer.from(marker))), 'the marker is stored (in entries and dictionaries)');
    assert.equal(await store.eraseProjectEvents('p_gone'), 300);
    // still writing after the erasure, with a dictionary without the project
    for (let i = 600; i < 700; i++) {
      const r = rec('p_keep', i);
      kept.push(r);
      await store.append([r]);
    }
    const read = [...store.readAfter(0)];
    assert.equal(read.length, 700);
    assert.deepEqual(read.filter((r) => r.record.t !== 'x').map((r) => r.record), kept);
    await store.compact();
    await store.close();
    assert.deepEqual(allFiles(dir).filter((f) => readFileSync(f).includes(Buffer.from(marker))), []);
    assert.deepEqual((await check(dir)).problems, []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
