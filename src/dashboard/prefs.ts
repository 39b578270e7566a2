/**
 * What the tab remembers in sessionStorage (gone when the tab closes): the key and the project an admin key last
 * looked at. The range, comparison and filters live in the address (state.ts).
 */

export const STORE_KEY = 'analytics.key';
export const STORE_PROJECT = 'analytics.project';

export type CompareMode = 'previous' | 'year' | 'off';
export const COMPARE_OPTIONS: ReadonlyArray<readonly [CompareMode, string]> = [
  ['previous', 'vs previous period'],
  ['year', 'vs a year earlier'],
  ['off', 'No comparison'],
];
