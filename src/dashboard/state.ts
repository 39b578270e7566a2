import { type CompareMode, COMPARE_OPTIONS } from './prefs.ts';
import { checkCustom, DEFAULT_PRESET, isPreset, type Preset } from './ranges.ts';

/**
 * The view lives in the page's address (the query string), so a reload, back / forward and a shared link show the
 * same figures: range, comparison, project (admin keys), filters, extra property keys and funnel steps. The key is
 * never part of it: only the names below are ever written.
 */

/** A filter the dashboard sets: `is <dimension> <value>` (one per dimension; a new one replaces the old). */
export interface ViewFilter {
  dimension: string;
  value: string;
}

export interface ViewState {
  preset: Preset;
  from?: string;
  to?: string;
  compare: CompareMode;
  project?: string;
  filters: ViewFilter[];
  /** property keys asked for by name, beside those the project tracks */
  props: string[];
  /** funnel steps as `goal:<name>`, `page:<pattern>` or `event:<name>` */
  steps: string[];
}

/** Filters, properties and steps past these are dropped from an address: the service takes 20 filters and 8 steps. */
const MAX_FILTERS = 20;
const MAX_PROPS = 20;
const MAX_STEPS = 8;
const FILTER_PREFIX = 'f.';

export function readState(search: string = location.search): ViewState {
  const q = new URLSearchParams(search);
  const range = q.get('range');
  let preset: Preset = isPreset(range) ? range : DEFAULT_PRESET;
  const from = q.get('from') ?? undefined;
  const to = q.get('to') ?? undefined;
  if (preset === 'custom' && (!from || !to || checkCustom(from, to))) preset = DEFAULT_PRESET;
  const compare = COMPARE_OPTIONS.find(([c]) => c === q.get('compare'))?.[0] ?? 'previous';
  const filters: ViewFilter[] = [];
  for (const [name, value] of q) {
    if (name.startsWith(FILTER_PREFIX) && name.length > FILTER_PREFIX.length && !filters.some((f) => f.dimension === name.slice(2))) {
      filters.push({ dimension: name.slice(FILTER_PREFIX.length), value });
    }
  }
  return {
    preset,
    ...(preset === 'custom' ? { from, to } : {}),
    compare,
    project: q.get('project') ?? undefined,
    filters: filters.slice(0, MAX_FILTERS),
    props: [...new Set(q.getAll('prop').filter(Boolean))].slice(0, MAX_PROPS),
    steps: q.getAll('step').filter((s) => /^(goal|page|event):./.test(s)).slice(0, MAX_STEPS),
  };
}

export function writeState(s: ViewState): string {
  const q = new URLSearchParams();
  if (s.preset !== DEFAULT_PRESET) q.set('range', s.preset);
  if (s.preset === 'custom' && s.from && s.to) {
    q.set('from', s.from);
    q.set('to', s.to);
  }
  if (s.compare !== 'previous') q.set('compare', s.compare);
  if (s.project) q.set('project', s.project);
  for (const f of s.filters) q.append(FILTER_PREFIX + f.dimension, f.value);
  for (const p of s.props) q.append('prop', p);
  for (const step of s.steps) q.append('step', step);
  const text = q.toString();
  return text ? `?${text}` : '';
}

let current: ViewState = readState();

export function view(): ViewState {
  return current;
}

/** Changes the view and records it in the address: a new history entry, so Back returns to the view before. */
export function setView(change: Partial<ViewState>, replace = false): void {
  current = { ...current, ...change };
  const url = location.pathname + writeState(current);
  if (replace) history.replaceState(null, '', url);
  else if (url !== location.pathname + location.search) history.pushState(null, '', url);
}

/** After Back / Forward: the address is the truth again. */
export function reread(): ViewState {
  current = readState();
  return current;
}

export function withFilter(filters: ViewFilter[], f: ViewFilter): ViewFilter[] {
  return [...filters.filter((x) => x.dimension !== f.dimension), f];
}
