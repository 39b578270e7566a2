import { post } from './api.ts';
import { h } from './dom.ts';

/**
 * "Share": creates a read-only rk_ key for the project (POST /projects/{id}/keys, which sk_ and ak_ keys may call)
 * and shows the link that carries it in the fragment, /dashboard#key=rk_…, which browsers never send to a server.
 */

interface CreatedKey {
  key: string;
  id: string;
}

export function sharePanel(key: string, projectId: string): HTMLElement {
  const result = h('div', { class: 'share-result', 'aria-live': 'polite' });
  const create = h('button', { type: 'button' }, 'Create read-only link');
  create.addEventListener('click', async () => {
    create.disabled = true;
    const r = await post<CreatedKey>(`projects/${encodeURIComponent(projectId)}/keys`, key, { type: 'read' });
    create.disabled = false;
    if (!r.ok) {
      const why = r.status === 404 && /route/.test(r.message) ? 'this service cannot issue read-only keys' : r.message;
      result.replaceChildren(h('p', { class: 'error' }, `No link was created: ${why}.`));
      return;
    }
    const link = `${location.origin}${location.pathname}#key=${r.value.key}`;
    const field = h('input', { type: 'text', readonly: true, value: link, 'aria-label': 'Read-only link', id: 'share-link', spellcheck: 'false' });
    const copy = h('button', { type: 'button' }, 'Copy');
    copy.addEventListener('click', async () => {
      field.select();
      try {
        await navigator.clipboard.writeText(link);
        copy.textContent = 'Copied';
      } catch {
        copy.textContent = 'Press Ctrl+C'; // no clipboard permission: the text is selected
      }
    });
    result.replaceChildren(
      h('div', { class: 'share-row' }, field, copy),
      h('p', { class: 'hint' }, `Key id ${r.value.id}. Revoke it any time: analytics keys revoke ${projectId} ${r.value.id}`),
    );
    field.focus();
    field.select();
  });
  return h(
    'section',
    { class: 'card share-panel', id: 'share', 'aria-labelledby': 'share-h', hidden: true },
    h('h2', { id: 'share-h' }, 'Share these figures'),
    h('p', { class: 'hint' }, 'Anyone with the link sees this project\'s figures and nothing else. The key rides in the part of the link after #, which browsers never send to a server.'),
    create,
    result,
  );
}
