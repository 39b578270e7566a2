/**
 * A fast 53-bit string hash (cyrb53-style: two Math.imul lanes with a final avalanche). Distinct sets hold these
 * numbers instead of strings: a number key costs a third of a short string key, and with 2^53 values a day of
 * 3 million sessions collides with probability ~5e-4, far below the 1 % the contract allows for ranges.
 */
export function hash53(input: string, seed = 0): number {
  let h1 = 0xdeadbeef ^ seed;
  let h2 = 0x41c6ce57 ^ seed;
  for (let i = 0; i < input.length; i++) {
    const ch = input.charCodeAt(i);
    h1 = Math.imul(h1 ^ ch, 2654435761);
    h2 = Math.imul(h2 ^ ch, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507);
  h1 ^= Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507);
  h2 ^= Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}

/**
 * FNV-1a, 32 bits, over the string's UTF-16 code units (project ids are ASCII). Cluster mode places a project's events
 * on partition `fnv1a32(projectId) mod P`: every node and every version must agree, so this never changes.
 */
export function fnv1a32(input: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < input.length; i++) {
    h ^= input.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}
