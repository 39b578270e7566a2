/**
 * One shared copy of strings that repeat across days, projects and ring entries (paths, sources, countries, devices,
 * event names, days): every event brings its own copy from JSON.parse, and every restored day its own from the
 * snapshot, so without this a breakdown key costs ~40 bytes per day that holds it. Bounded: when full the table starts
 * over (holders keep their strings; only sharing with later copies is lost).
 */
const INTERNED_MAX = 100_000;
let interned = new Map<string, string>();

export function intern(s: string): string {
  const hit = interned.get(s);
  if (hit !== undefined) return hit;
  if (interned.size >= INTERNED_MAX) interned = new Map();
  interned.set(s, s);
  return s;
}
