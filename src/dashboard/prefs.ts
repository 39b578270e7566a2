import { DEFAULT_PRESET, isPreset, type Preset, type Range } from './ranges.ts';

/**
 * What the tab remembers, all in sessionStorage (gone when the tab closes): the key, the project an admin key
 * last looked at, the range and the comparison.
 */

export const STORE_KEY = 'analytics.key';
export const STORE_PROJECT = 'analytics.project';
const STORE_RANGE = 'analytics.range';
const STORE_COMPARE = 'analytics.compare';

export type CompareMode = 'previous' | 'year' | 'off';
export const COMPARE_OPTIONS: ReadonlyArray<readonly [CompareMode, string]> = [
  ['previous', 'vs previous period'],
  ['year', 'vs a year earlier'],
  ['off', 'No comparison'],
];

export type ChosenRange = { preset: Preset } & Partial<Range>;

export function storedRange(): ChosenRange {
  try {
    const v = JSON.parse(sessionStorage.getItem(STORE_RANGE) ?? 'null') as { preset?: string; from?: string; to?: string } | null;
    if (v && isPreset(v.preset ?? null)) return v as ChosenRange;
  } catch {
    /* fall through to the default */
  }
  return { preset: DEFAULT_PRESET };
}

export function storeRange(range: ChosenRange): void {
  sessionStorage.setItem(STORE_RANGE, JSON.stringify(range));
}

export function compareMode(): CompareMode {
  const v = sessionStorage.getItem(STORE_COMPARE);
  return COMPARE_OPTIONS.find(([o]) => o === v)?.[0] ?? 'previous';
}

export function storeCompare(mode: string): void {
  sessionStorage.setItem(STORE_COMPARE, mode);
}
