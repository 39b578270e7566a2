import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { filterArg } from '../src/cli/commands/query.ts';
import { createProject, startTestService, type CreatedProject, type TestService } from './helpers.ts';

/** `analytics query` and `analytics goals` as real processes against a real service. */

const BIN = fileURLToPath(new URL('../bin/analytics.js', import.meta.url));

let svc: TestService;
let p: CreatedProject;
before(async () => {
  svc = await startTestService();
  p = await createProject(svc.url, svc.adminKey);
});
after(() => svc.destroy());

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function cli(args: string[], key = p.keys.secret): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      { env: { PATH: process.env.PATH ?? '', ANALYTICS_URL: svc.url, ANALYTICS_KEY: key }, timeout: 60_000 },
      (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr }),
    );
  });
}

describe('--filter op:dimension:value', () => {
  test('splits the operator, the dimension (two segments for prop:) and the values (| separates several)', () => {
    assert.deepEqual(filterArg('is:country:DE'), [['is', 'country', ['DE']]]);
    assert.deepEqual(filterArg('contains:page:/blog:2026'), [['contains', 'page', ['/blog:2026']]]);
    assert.deepEqual(filterArg('isNot:prop:plan:free|trial'), [['isNot', 'prop:plan', ['free', 'trial']]]);
    assert.deepEqual(filterArg('is:goal:Signed up', [['is', 'device', ['mobile']]]), [['is', 'device', ['mobile']], ['is', 'goal', ['Signed up']]]);
    assert.throws(() => filterArg('country'));
    assert.throws(() => filterArg('is:country'));
  });
});

describe('analytics goals and query', () => {
  test('goals create, a repeated name refused (exit 1), list, delete', async () => {
    const made = await cli(['goals', 'create', p.project.id, '--name', 'Signed up', '--event', 'signup', '--json']);
    assert.equal(made.code, 0, made.stderr);
    const goal = JSON.parse(made.stdout).goal;
    assert.equal(goal.event, 'signup');
    const again = await cli(['goals', 'create', p.project.id, '--name', 'Signed up', '--page', '/x']);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /409 conflict/);
    const both = await cli(['goals', 'create', p.project.id, '--name', 'B', '--page', '/x', '--event', 'x']);
    assert.equal(both.code, 2, both.stderr);
    const list = await cli(['goals', 'list', p.project.id]);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /Signed up\s+event signup/);
    const deleted = await cli(['goals', 'delete', p.project.id, goal.id]);
    assert.equal(deleted.code, 0, deleted.stderr);
    const gone = await cli(['goals', 'delete', p.project.id, goal.id]);
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, /404 not_found/);
  });

  test('query: a refused question exits 1 naming the culprit; a bad --filter is a usage error (exit 2)', async () => {
    const bad = await cli(['query', '--project', p.project.id, '--metrics', 'visitors,sessions']);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /400 invalid_request: .*"sessions"/);
    const usage = await cli(['query', '--metrics', 'visitors', '--filter', 'country']);
    assert.equal(usage.code, 2, usage.stderr);
    const pk = await cli(['query', '--metrics', 'visitors'], p.keys.publishable);
    assert.equal(pk.code, 1);
    assert.match(pk.stderr, /403 forbidden/);
  });
});
