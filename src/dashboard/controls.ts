import type { Project } from './api.ts';
import { h } from './dom.ts';
import { type CompareMode, COMPARE_OPTIONS } from './prefs.ts';
import { checkCustom, type Preset, PRESETS } from './ranges.ts';
import { sharePanel } from './share.ts';
import { setView, view } from './state.ts';

/** The header's controls: project (admin keys), range, comparison, Share (keys that may create keys), Sign out. */

/** The signed-in session (read when used, so a project switch is seen). */
export interface ControlsFor {
  key: string;
  /** admin keys pick among these */
  projects: Project[] | undefined;
  admin: boolean;
  projectId: string | undefined;
}

export interface ControlHandlers {
  project(p: Project | undefined): void;
  /** the range or the comparison changed */
  reload(): void;
  problem(message: string): void;
  csv(): void;
  signOut(): void;
}

/** `compareOffered` is false once the service said it does not know `compare`. */
export function controls(s: ControlsFor, compareOffered: boolean, on: ControlHandlers): HTMLElement {
  const bar = h('div', { class: 'controls' });
  const field = (label: string, control: HTMLElement) => h('label', { class: 'field' }, h('span', { class: 'sr-only' }, label), control);
  if (s.admin && s.projects) {
    const projects = s.projects;
    // by name; the id only tells apart projects that share one
    const named = new Map<string, number>();
    for (const p of projects) named.set(p.name, (named.get(p.name) ?? 0) + 1);
    const label = (p: Project) => (named.get(p.name)! > 1 ? `${p.name} (${p.id})` : p.name);
    const select = h('select', { id: 'project', 'aria-label': 'Project' }, ...projects.map((p) => h('option', { value: p.id, selected: p.id === s.projectId }, label(p))));
    select.addEventListener('change', () => {
      document.getElementById('share')?.remove(); // made for the other project
      document.getElementById('share-toggle')?.setAttribute('aria-expanded', 'false');
      on.project(projects.find((x) => x.id === select.value));
    });
    bar.append(field('Project', select));
  }

  const range = view();
  const rangeSelect = h('select', { id: 'range', 'aria-label': 'Date range' }, ...PRESETS.map(([p, label]) => h('option', { value: p, selected: p === range.preset }, label)));
  const from = h('input', { type: 'date', id: 'from', 'aria-label': 'From', value: range.from, required: true });
  const to = h('input', { type: 'date', id: 'to', 'aria-label': 'To', value: range.to, required: true });
  const custom = h('form', { id: 'custom', class: 'custom', hidden: range.preset !== 'custom', novalidate: true }, from, h('span', { 'aria-hidden': 'true' }, '–'), to, h('button', { type: 'submit' }, 'Apply'));
  rangeSelect.addEventListener('change', () => {
    const preset = rangeSelect.value as Preset;
    custom.hidden = preset !== 'custom';
    if (preset === 'custom') return from.focus(); // the figures change on Apply
    setView({ preset, from: undefined, to: undefined });
    on.reload();
  });
  custom.addEventListener('submit', (e) => {
    e.preventDefault();
    const wrong = checkCustom(from.value, to.value);
    if (wrong) return on.problem(wrong);
    setView({ preset: 'custom', from: from.value, to: to.value });
    on.reload();
  });
  bar.append(field('Date range', rangeSelect), custom);

  if (compareOffered) {
    const chosen = view().compare;
    const compare = h('select', { id: 'compare', 'aria-label': 'Compare with' }, ...COMPARE_OPTIONS.map(([v, label]) => h('option', { value: v, selected: v === chosen }, label)));
    compare.addEventListener('change', () => {
      setView({ compare: compare.value as CompareMode });
      on.reload();
    });
    bar.append(field('Compare with', compare));
  }

  if (s.projects) {
    // Admin and secret keys may create read-only keys to share; a read-only key may not.
    const toggle = h('button', { type: 'button', class: 'quiet', id: 'share-toggle', 'aria-expanded': 'false', 'aria-controls': 'share' }, 'Share');
    toggle.addEventListener('click', () => {
      let panel = document.getElementById('share');
      if (!panel) {
        panel = sharePanel(s.key, s.projectId!);
        document.getElementById('problem')?.before(panel);
      }
      panel.hidden = !panel.hidden;
      toggle.setAttribute('aria-expanded', String(!panel.hidden));
    });
    bar.append(toggle);
  }
  bar.append(h('button', { type: 'button', class: 'quiet', id: 'csv', onclick: on.csv }, 'Download CSV'));
  bar.append(h('button', { type: 'button', class: 'quiet', id: 'signout', onclick: on.signOut }, 'Sign out'));
  return bar;
}
