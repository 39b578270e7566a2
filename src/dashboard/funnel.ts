import { h, uid } from './dom.ts';
import type { FunnelStepFigure } from './figures.ts';
import { count } from './format.ts';

/**
 * The funnel view: 2–8 steps chosen from the project's goals, top pages and events; POST /query/funnel answers each
 * step's visits, conversion from step 1 and drop-off from the step before, drawn as bars.
 */

export const MIN_STEPS = 2;
export const MAX_STEPS = 8;

export interface FunnelChoices {
  goals: string[];
  pages: string[];
  events: string[];
}

export interface FunnelContext {
  steps: string[];
  choices: FunnelChoices;
  /** the steps to ask for (recorded in the address) */
  run(steps: string[]): void;
  /** filters the funnel cannot take (event-level), said under it */
  skipped: string[];
}

const KIND = { goal: 'Goal', page: 'Page', event: 'Event' } as const;

export function stepLabel(step: string): string {
  const i = step.indexOf(':');
  return `${KIND[step.slice(0, i) as keyof typeof KIND] ?? step.slice(0, i)}: ${step.slice(i + 1)}`;
}

export function funnelCard(c: FunnelContext): { el: HTMLElement; show(result: FunnelStepFigure[] | string): void } {
  const heading = uid('h');
  const options = (chosen: string) => {
    const groups: Array<[string, string[]]> = [['Goals', c.choices.goals.map((g) => `goal:${g}`)], ['Pages', c.choices.pages.map((p) => `page:${p}`)], ['Events', c.choices.events.map((e) => `event:${e}`)]];
    // A step from the address that is not among today's choices is still offered.
    if (chosen && !groups.some(([, xs]) => xs.includes(chosen))) groups.unshift(['Chosen', [chosen]]);
    return groups.filter(([, xs]) => xs.length > 0).map(([label, xs]) => h('optgroup', { label }, ...xs.map((x) => h('option', { value: x, selected: x === chosen }, stepLabel(x)))));
  };
  const all = [...c.choices.goals.map((g) => `goal:${g}`), ...c.choices.pages.map((p) => `page:${p}`), ...c.choices.events.map((e) => `event:${e}`)];
  const initial = c.steps.length >= MIN_STEPS ? c.steps : all.slice(0, MIN_STEPS);
  const list = h('ol', { class: 'steps' });
  const addButton = h('button', { type: 'button', class: 'quiet' }, 'Add step');
  const renumber = () => {
    const items = [...list.children] as HTMLElement[];
    items.forEach((li, i) => {
      li.querySelector('select')!.setAttribute('aria-label', `Step ${i + 1}`);
      const remove = li.querySelector<HTMLButtonElement>('button')!;
      remove.setAttribute('aria-label', `Remove step ${i + 1}`);
      remove.disabled = items.length <= MIN_STEPS;
    });
    addButton.disabled = items.length >= MAX_STEPS;
  };
  const addStep = (chosen: string) => {
    const select = h('select', {}, ...options(chosen));
    const remove = h('button', { type: 'button', class: 'quiet small' }, '✕');
    const li = h('li', {}, select, remove);
    remove.addEventListener('click', () => {
      li.remove();
      renumber();
    });
    list.append(li);
    renumber();
  };
  for (const s of initial) addStep(s);
  while (list.children.length < MIN_STEPS) addStep(all[list.children.length] ?? '');
  addButton.addEventListener('click', () => addStep(all[list.children.length] ?? all[0] ?? ''));
  const form = h('form', { class: 'funnel-form', 'aria-label': 'Funnel steps' }, list, h('div', { class: 'row' }, addButton, h('button', { type: 'submit' }, 'Show funnel')));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    c.run([...list.querySelectorAll('select')].map((s) => s.value).filter(Boolean));
  });
  const result = h('div', { class: 'funnel-result', 'aria-live': 'polite' });
  const el = h(
    'section',
    { class: 'card wide', id: 'funnel', 'aria-labelledby': heading },
    h('div', { class: 'card-head' }, h('h2', { id: heading }, 'Funnel')),
    c.skipped.length ? h('p', { class: 'hint' }, `A funnel takes visit filters only; not applied here: ${c.skipped.join(', ')}.`) : null,
    h('div', { class: 'funnel-body' }, form, result),
  );
  const show = (r: FunnelStepFigure[] | string) => {
    if (typeof r === 'string') return void result.replaceChildren(h('p', { class: 'error' }, r));
    const first = r[0]?.visits ?? 0;
    result.replaceChildren(
      h(
        'table',
        { class: 'funnel', 'data-table': 'funnel' },
        h('caption', { class: 'sr-only' }, 'Funnel: visits, conversion and drop-off per step'),
        h('thead', {}, h('tr', {}, ...['Step', 'Visits', 'Conversion', 'Drop-off'].map((x, i) => h('th', { scope: 'col', class: i ? 'num' : undefined }, x)))),
        h(
          'tbody',
          {},
          ...r.map((s, i) => {
            const bar = h('span', { class: 'bar', 'aria-hidden': 'true' });
            bar.style.width = `${first > 0 ? (s.visits / first) * 100 : 0}%`;
            return h(
              'tr',
              { 'data-step': String(i + 1) },
              h('th', { scope: 'row' }, bar, h('span', { class: 'name' }, `${i + 1}. ${s.label}`)),
              h('td', { class: 'num' }, count(s.visits)),
              h('td', { class: 'num' }, `${s.conversionRate.toFixed(1)}%`),
              h('td', { class: 'num drop' }, i === 0 ? '—' : `−${count(s.dropoff)}`),
            );
          }),
        ),
      ),
    );
  };
  return { el, show };
}
