import { del, post } from './api.ts';
import { h, uid } from './dom.ts';
import type { GoalRow } from './figures.ts';
import { count } from './format.ts';
import type { OnFilter } from './view.ts';

/**
 * The goals card: each goal's visitors and conversion rate (POST /query with a goal dimension), each row a filter;
 * keys that may (sk_, ak_) add and delete goals here; a read-only key sees them only.
 */

export interface GoalsContext {
  key: string;
  projectId: string;
  /** sk_ and ak_ keys may add and delete goals */
  canEdit: boolean;
  onFilter: OnFilter;
  /** the goals changed: ask the figures again */
  changed(): void;
}

export function goalsCard(goals: GoalRow[], c: GoalsContext): HTMLElement {
  const heading = uid('h');
  const message = h('p', { class: 'error', role: 'status' });
  const body =
    goals.length === 0
      ? h('p', { class: 'empty', 'data-table': 'goals' }, c.canEdit ? 'No goals yet: add one below.' : 'No goals yet.')
      : h(
          'table',
          { class: 'bars', 'data-table': 'goals' },
          h('caption', { class: 'sr-only' }, 'Goals, visitors and conversion rate'),
          h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, h('span', { class: 'sr-only' }, 'Goal')), h('th', { scope: 'col', class: 'num' }, 'Visitors'), h('th', { scope: 'col', class: 'num' }, 'Conversion'), c.canEdit ? h('th', { scope: 'col' }, h('span', { class: 'sr-only' }, 'Delete')) : null)),
          h(
            'tbody',
            {},
            ...goals.map((g) => {
              const id = g.id;
              const name = c.onFilter
                ? h('button', { type: 'button', class: 'name filter', onclick: () => c.onFilter!('goal', g.name) }, h('span', { class: 'sr-only' }, 'Filter by goal: '), g.name)
                : h('span', { class: 'name' }, g.name);
              const remove =
                c.canEdit && id
                  ? h('td', {}, confirmButton(`Delete goal ${g.name}`, async () => {
                      const r = await del(`projects/${encodeURIComponent(c.projectId)}/goals/${encodeURIComponent(id)}`, c.key);
                      if (r.ok) c.changed();
                      else message.textContent = `The goal was not deleted: ${r.message}`;
                    }))
                  : c.canEdit ? h('td') : null;
              return h('tr', { 'data-key': g.name }, h('th', { scope: 'row' }, name), h('td', { class: 'num' }, count(g.visitors)), h('td', { class: 'num' }, `${g.conversionRate.toFixed(1)}%`), remove);
            }),
          ),
        );
  const section = h('section', { class: 'card', 'aria-labelledby': heading, 'data-card': 'Goals' }, h('div', { class: 'card-head' }, h('h2', { id: heading }, 'Goals')), body);
  if (c.canEdit) section.append(goalForm(c, message));
  section.append(message);
  return section;
}

/** How long a delete button waits for its confirming second press before it turns back. */
const CONFIRM_MS = 5000;

/** A delete button that asks first: the first press turns it into "Delete?", a second within CONFIRM_MS does it. */
function confirmButton(label: string, act: () => Promise<void>): HTMLElement {
  let armed: ReturnType<typeof setTimeout> | undefined;
  const b = h('button', { type: 'button', class: 'quiet small', 'aria-label': label }, '✕');
  const disarm = () => {
    clearTimeout(armed);
    armed = undefined;
    b.textContent = '✕';
    b.setAttribute('aria-label', label);
    b.classList.remove('armed');
  };
  b.addEventListener('click', () => {
    if (armed === undefined) {
      b.textContent = 'Delete?';
      b.setAttribute('aria-label', `Confirm: ${label.charAt(0).toLowerCase()}${label.slice(1)}`);
      b.classList.add('armed');
      armed = setTimeout(disarm, CONFIRM_MS);
      return;
    }
    disarm();
    void act();
  });
  b.addEventListener('blur', () => armed !== undefined && disarm());
  return b;
}

function goalForm(c: GoalsContext, message: HTMLElement): HTMLElement {
  const name = h('input', { type: 'text', id: 'goal-name', 'aria-label': 'Goal name', placeholder: 'Name', maxlength: 64, required: true });
  const kind = h('select', { id: 'goal-kind', 'aria-label': 'Goal is completed by' }, h('option', { value: 'event' }, 'Event'), h('option', { value: 'page' }, 'Page'));
  const target = h('input', { type: 'text', id: 'goal-target', 'aria-label': 'Event name or page path', placeholder: 'signup or /thanks*', required: true, spellcheck: 'false' });
  const form = h('form', { class: 'inline-form', 'aria-label': 'Add a goal', novalidate: true }, name, kind, target, h('button', { type: 'submit' }, 'Add goal'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (!name.value.trim() || !target.value.trim()) return void (message.textContent = 'A goal needs a name and an event or a page.');
    const r = await post(`projects/${encodeURIComponent(c.projectId)}/goals`, c.key, { name: name.value.trim(), [kind.value]: target.value.trim() });
    if (r.ok) c.changed();
    else message.textContent = `The goal was not added: ${r.message}`;
  });
  return form;
}
