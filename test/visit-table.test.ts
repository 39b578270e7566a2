import assert from 'node:assert/strict';
import { deserialize, serialize } from 'node:v8';
import { test } from 'node:test';
import fc from 'fast-check';
import { VisitTable, type RawVisitTable } from '../src/core/visit-table.ts';

/** Every operation of a day's visit table against a Map, with the key 0, growth and snapshot round trips between. */

type Op = { k: number; visitor: number; first: number; snapshot: boolean };

const key = fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 40 }), fc.integer({ min: 1, max: 2 ** 53 - 1 }));
const op = fc.record({ k: key, visitor: fc.integer({ min: 1, max: 1000 }), first: fc.integer({ min: 0, max: 1e6 }), snapshot: fc.boolean() });

function check(t: VisitTable, ref: Map<number, { visitor: number; first: number }>): void {
  assert.equal(t.size, ref.size);
  for (const [k, v] of ref) {
    const slot = t.find(k);
    assert.ok(slot >= 0, `visit ${k} is found`);
    assert.deepEqual([t.visitorAt(slot), t.firstAt(slot)], [v.visitor, v.first], `visit ${k}`);
  }
}

test('a visit table answers as a Map does, through growth, the key 0 and snapshot round trips', () => {
  fc.assert(
    fc.property(fc.array(op, { maxLength: 300 }), (ops: Op[]) => {
      let t = new VisitTable();
      const ref = new Map<number, { visitor: number; first: number }>();
      for (const o of ops) {
        const slot = t.find(o.k);
        const had = ref.get(o.k);
        assert.equal(slot >= 0, had !== undefined, `presence of ${o.k}`);
        if (!had) {
          t.add(o.k, o.visitor, o.first);
          ref.set(o.k, { visitor: o.visitor, first: o.first });
        } else if (o.first < had.first) {
          // an earlier event moves the visit's visitor, as the day aggregate does
          t.setAt(slot, o.visitor, o.first);
          ref.set(o.k, { visitor: o.visitor, first: o.first });
        }
        if (o.snapshot) t = VisitTable.fromRaw(deserialize(serialize(t.raw())) as RawVisitTable);
      }
      check(t, ref);
      assert.equal(t.find(2 ** 53 - 2) >= 0, ref.has(2 ** 53 - 2), 'a visit never added is not found');
    }),
    { numRuns: 300 },
  );
});

test('a snapshot form with the key 0 in its last slot (as written before) restores; one written now holds the visits only', () => {
  // capacity 16 + the zero slot, the shape every earlier snapshot holds
  const keys = new Float64Array(17);
  const visitors = new Float64Array(17);
  const firsts = new Float64Array(17);
  keys[3] = 3;
  visitors[3] = 30;
  firsts[3] = 300;
  visitors[16] = 7;
  firsts[16] = 70;
  const t = VisitTable.fromRaw({ keys, visitors, firsts, hasZero: true, size: 2 });
  assert.deepEqual([t.visitorAt(t.find(0)), t.firstAt(t.find(0))], [7, 70]);
  assert.deepEqual([t.visitorAt(t.find(3)), t.firstAt(t.find(3))], [30, 300]);
  assert.equal(t.find(4), -1);
  // written again, the snapshot form holds its visits only (the key 0's among them), and restores the same
  const back = t.raw();
  assert.deepEqual([back.keys.length, back.hasZero, back.size], [2, true, 2]);
  const again = VisitTable.fromRaw(deserialize(serialize(back)) as RawVisitTable);
  assert.deepEqual([again.visitorAt(again.find(0)), again.firstAt(again.find(0)), again.visitorAt(again.find(3)), again.size], [7, 70, 30, 2]);
  // a new day's table: its snapshot form is its one visit
  const small = new VisitTable();
  small.add(5, 1, 1);
  assert.equal(small.raw().keys.length, 1);
  assert.throws(() => VisitTable.fromRaw({ keys: new Float64Array(7), visitors: new Float64Array(7), firsts: new Float64Array(7), hasZero: false, size: 0 }), /impossible shape/);
});
