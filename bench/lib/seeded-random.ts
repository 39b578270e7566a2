/**
 * A seeded pseudo-random source (mulberry32): the same seed gives the same events in the bench and in the tests that
 * compare the column store with SQL references, on every machine. Returns numbers in [0, 1).
 */
export function rng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
