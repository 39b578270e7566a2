import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BenchChild, REPO_ROOT } from './bench/lib/child.ts';
import { fromSnapshot } from './src/core/snapshot.ts';
import { apply } from './src/core/state.ts';
import { Snapshotter } from './src/engine/snapshotter.ts';
import { SnapshotFiles } from './src/store/snapshot-files.ts';
const dir = mkdtempSync(path.join(tmpdir(), 'prof-'));
const c = new BenchChild(path.join(REPO_ROOT, 'bench/growth/growth-worker.ts'));
const [projects, events, days] = process.argv.slice(2).map(Number) as [number, number, number];
await c.call('build', { dir, projects, events, days, lastDay: new Date().toISOString().slice(0, 10) });
await c.stop();
const files = new SnapshotFiles(dir);
const state = fromSnapshot(files.loadNewest(1e12, () => {})!);
const snap = new Snapshotter(state, files, 1e12, console.log);
const p0 = [...state.projects.keys()][0]!;
for (let r = 0; r < 4; r++) {
  apply(state, state.lastSeq + 1, { t: 'e', p: p0, ts: state.maxRt, rt: state.maxRt, day: new Date(state.maxRt).toISOString().slice(0, 10), event: 'x', url: '/', path: '/', referrer: '', source: 'Direct', sessionId: 'zz', user: 's:zz', country: 'DE', device: 'd', params: {} });
  const t = performance.now();
  const p = snap.snapshot();
  const sync = performance.now() - t;
  await p;
  console.log('main-thread ms', sync.toFixed(1), 'total', (performance.now() - t).toFixed(0));
}
await files.close();
rmSync(dir, { recursive: true, force: true });
