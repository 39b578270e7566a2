/**
 * Frees a typed array's memory at the next minor collection instead of the next full one. A hash table that doubles
 * leaves its old arrays as garbage at once, but an array buffer that lived long enough to be promoted is freed only
 * when V8 next collects the whole heap: seconds later under load, 15–20 s once the service is idle, and meanwhile it
 * counts in the process's memory. Handing its memory to a clone nothing keeps (a transfer detaches the original)
 * lets the next scavenge free it. Only for an array that owns its buffer and that nothing else views.
 */

/**
 * Smaller arrays are left to the collector: a transfer costs ~3–6 µs, more than rehashing a table of a few thousand
 * slots, and their memory is small beside a busy day's tables (a day of 100,000 visits doubles through 2–6 MB arrays).
 */
const FREE_NOW_BYTES = 64 * 1024;

export function freeNow(a: ArrayBufferView): void {
  if (a.byteLength < FREE_NOW_BYTES) return;
  structuredClone(a.buffer, { transfer: [a.buffer] });
}
