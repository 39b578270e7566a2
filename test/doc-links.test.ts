import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

/**
 * Every relative link and `#anchor` of the README, ARCHITECTURE.md and docs/*.md resolves: the file exists, and an
 * anchor names a heading of its target as GitHub slugs it. Reference text moves between these files, and a link
 * left behind is found here rather than by a reader.
 */

const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));

function documents(): string[] {
  const docs = readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => path.join('docs', f));
  return ['README.md', 'ARCHITECTURE.md', ...docs];
}

/** The text outside fenced code blocks, line by line (a `# →` comment in a shell block is no heading). */
function prose(text: string): string[] {
  const out: string[] = [];
  let fenced = false;
  for (const line of text.split('\n')) {
    if (/^\s*```/.test(line)) {
      fenced = !fenced;
      continue;
    }
    if (!fenced) out.push(line);
  }
  return out;
}

/** GitHub's heading ids: lower case, punctuation dropped (hyphens and underscores kept), each space a hyphen, repeats numbered. */
function anchorsOf(text: string): Set<string> {
  const seen = new Map<string, number>();
  const ids = new Set<string>();
  for (const line of prose(text)) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const base = m[1]!
      .replace(/<[^>]+>/g, '')
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    ids.add(n === 0 ? base : `${base}-${n}`);
  }
  return ids;
}

function linksOf(text: string): Array<{ line: number; target: string }> {
  const out: Array<{ line: number; target: string }> = [];
  let fenced = false;
  text.split('\n').forEach((raw, i) => {
    if (/^\s*```/.test(raw)) fenced = !fenced;
    if (fenced) return;
    const line = raw.replace(/`[^`]*`/g, '');
    for (const m of line.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) out.push({ line: i + 1, target: m[1]! });
  });
  return out;
}

test('the slugs follow GitHub: punctuation dropped, spaces kept as hyphens, repeats numbered', () => {
  const ids = anchorsOf('# Command line: `analytics`\n## POST /analytics — ingest\n```\n# not a heading\n```\n## Notes\n## Notes\n');
  assert.deepEqual([...ids], ['command-line-analytics', 'post-analytics--ingest', 'notes', 'notes-1']);
});

test('every relative link and anchor in the README, ARCHITECTURE.md and docs/ resolves', () => {
  const broken: string[] = [];
  const anchorCache = new Map<string, Set<string>>();
  const anchors = (file: string): Set<string> => {
    let a = anchorCache.get(file);
    if (!a) anchorCache.set(file, (a = anchorsOf(readFileSync(path.join(ROOT, file), 'utf8'))));
    return a;
  };
  let checked = 0;
  for (const doc of documents()) {
    for (const { line, target } of linksOf(readFileSync(path.join(ROOT, doc), 'utf8'))) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto:
      checked++;
      const [file, anchor] = target.split('#') as [string, string | undefined];
      const resolved = file === '' ? doc : path.normalize(path.join(path.dirname(doc), decodeURIComponent(file)));
      const where = `${doc}:${line}: ${target}`;
      if (!existsSync(path.join(ROOT, resolved))) {
        broken.push(`${where} (no file ${resolved})`);
        continue;
      }
      if (anchor === undefined || anchor === '') continue;
      if (!resolved.endsWith('.md') || statSync(path.join(ROOT, resolved)).isDirectory()) {
        broken.push(`${where} (an anchor into a file that is not markdown)`);
      } else if (!anchors(resolved).has(anchor)) {
        broken.push(`${where} (no heading #${anchor} in ${resolved})`);
      }
    }
  }
  assert.ok(checked > 20, `expected the documents to hold links, found ${checked}`);
  assert.deepEqual(broken, []);
});
