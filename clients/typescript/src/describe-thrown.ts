/** Turns whatever was thrown into the `description` of an `exception` event. */

export function describeThrown(error: unknown): string {
  try {
    if (error instanceof Error) return error.message || error.name;
    return typeof error === 'string' ? error : JSON.stringify(error) ?? String(error);
  } catch {
    return 'unserializable error';
  }
}

/** Cuts to `max` UTF-16 units without leaving half of a surrogate pair behind. */
export function truncate(s: string, max: number): string {
  if (s.length <= max) return s;
  const cut = s.slice(0, max);
  return /[\ud800-\udbff]$/.test(cut) ? cut.slice(0, -1) : cut;
}
