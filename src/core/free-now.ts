/**
 * Frees an array buffer's memory at the next minor collection instead of the next full one. A hash table that doubles
 * leaves its old arrays as garbage at once, but an array buffer that lived long enough to be promoted is freed only
 * when V8 next collects the whole heap: seconds later under load, 15–20 s once the service is idle, and meanwhile it
 * counts in the process's memory. Handing its memory to a clone nothing keeps (a transfer detaches the original)
 * lets the next scavenge free it. Only for a buffer that nothing else views (a typed array's whole buffer, owned).
 */

/**
 * Smaller buffers are left to the collector: a transfer costs ~3–6 µs, more than rehashing a table of a few thousand
 * slots, and their memory is small beside a busy day's tables (a day of 100,000 visits doubles through 2–6 MB arrays).
 */
const FREE_NOW_BYTES = 64 * 1024;

export function freeNow(buffer: ArrayBufferLike): void {
  if (buffer.byteLength < FREE_NOW_BYTES || !(buffer instanceof ArrayBuffer)) return;
  structuredClone(buffer, { transfer: [buffer] });
}
