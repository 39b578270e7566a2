import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { RecentRing } from '../src/core/recent-ring.ts';
import { StringIndex, stringHash } from '../src/core/string-index.ts';

/**
 * The ring's string index against a Map over random adds and removes: few distinct hash homes (short strings, a
 * small table) make long probe runs, so removal's backward shift is exercised across runs and the table's wrap.
 */
describe('string index', () => {
  test('finds what a Map finds through adds, removes and growth', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.boolean(), fc.string({ maxLength: 3 })), { maxLength: 400 }), (ops) => {
        const index = new StringIndex();
        const model = new Map<string, number>();
        const strings: Array<string | undefined> = [];
        const free: number[] = [];
        for (const [adding, s] of ops) {
          const h = stringHash(s);
          if (adding && !model.has(s)) {
            const id = free.pop() ?? strings.length;
            strings[id] = s;
            index.add(id, h);
            model.set(s, id);
          } else if (!adding && model.has(s)) {
            const id = model.get(s)!;
            index.remove(id, h);
            model.delete(s);
            strings[id] = undefined;
            free.push(id);
          }
          assert.equal(index.size, model.size);
          for (const [k, id] of model) assert.equal(index.find(k, stringHash(k), strings), id);
          assert.equal(index.find(`${s}!`, stringHash(`${s}!`), strings), model.get(`${s}!`) ?? -1);
        }
      }),
      { numRuns: 300 },
    );
  });

  test('a table that turns for ever stays as large as its contents', () => {
    const index = new StringIndex();
    const strings: Array<string | undefined> = [];
    for (let i = 0; i < 200_000; i++) {
      const id = i % 1000;
      if (strings[id] !== undefined) index.remove(id, stringHash(strings[id]!));
      strings[id] = `s${i}`;
      index.add(id, stringHash(strings[id]!));
    }
    assert.equal(index.size, 1000);
    for (let id = 0; id < 1000; id++) assert.equal(index.find(strings[id]!, stringHash(strings[id]!), strings), id);
    assert.equal(index.find('s0', stringHash('s0'), strings), -1);
    // 1,000 strings at a load of at most 1/2: 2,048 or 4,096 slots, never more however long it turned.
    assert.ok((index as unknown as { slots: Uint32Array }).slots.length <= 4096);
  });

  test('refuses an id the slot cannot hold, and a removal of what it does not hold', () => {
    const index = new StringIndex();
    assert.throws(() => index.add(0xffff, 1), /does not fit/);
    assert.throws(() => index.remove(3, stringHash('x')), /not in the index/);
  });

  test('a ring of the largest capacity its ids allow turns with every field a new string; one larger is refused', () => {
    // (capacity + 1) × 8 ids must fit 16 bits: a push holds its 8 new strings before releasing the 8 it overwrites.
    const largest = 8190;
    assert.throws(() => new RecentRing(largest + 1), /16-bit string ids/);
    const ring = new RecentRing(largest);
    const entry = (i: number) => ({ day: `d${i}`, ts: i, event: `e${i}`, url: `u${i}`, referrer: `r${i}`, source: `s${i}`, country: `c${i}`, device: `v${i}`, sessionId: `x${i}` });
    const pushes = largest * 3;
    for (let i = 0; i < pushes; i++) ring.push(entry(i));
    const newest = [...ring.newestFirst()];
    assert.equal(newest.length, largest);
    assert.deepEqual(newest[0], entry(pushes - 1));
    assert.deepEqual(newest[largest - 1], entry(pushes - largest));
  });
});
