import assert from 'node:assert/strict';
import { status, type ServiceError } from '@grpc/grpc-js';
import { after, before, describe, test } from 'node:test';
import { AnalyticsClient } from '../src/grpc/client.ts';
import { api, createProject, startTestService, type CreatedProject, type TestService } from './helpers.ts';

/** Query, QueryFunnel and the goal calls over real gRPC: the same rules as HTTP, the same engine calls. */

let svc: TestService;
let p: CreatedProject;
let client: AnalyticsClient;
let readKey: string;

before(async () => {
  svc = await startTestService();
  p = await createProject(svc.url, svc.adminKey);
  readKey = (await api(svc.url, `/projects/${p.project.id}/keys`, { key: p.keys.secret, body: { type: 'read' } })).body.key;
  client = new AnalyticsClient(svc.grpcAddress, { key: p.keys.secret });
});
after(async () => {
  client.close();
  await svc.destroy();
});

async function refused(call: Promise<unknown>, code: status, errorCode: string, mentions?: string): Promise<void> {
  await assert.rejects(call, (err: ServiceError) => {
    assert.equal(err.code, code, `${err.code} ${err.details}`);
    assert.equal(err.metadata.get('error-code')[0], errorCode, err.details);
    if (mentions !== undefined) assert.ok(err.details.includes(mentions), err.details);
    assert.ok(err.metadata.get('ratelimit-limit').length > 0 || errorCode === 'unauthorized');
    return true;
  });
}

describe('gRPC Query and QueryFunnel', () => {
  test('who may: no key, pk_, another project; the gate passes for sk_, rk_ and ak_', async () => {
    await refused(client.call('query', { metrics: ['visits'] }, { key: null }), status.UNAUTHENTICATED, 'unauthorized');
    await refused(client.call('query', { metrics: ['visits'] }, { key: p.keys.publishable }), status.PERMISSION_DENIED, 'forbidden');
    await refused(client.call('query', { metrics: ['visits'], projectId: 'p_other' }), status.PERMISSION_DENIED, 'forbidden');
    await refused(client.call('queryFunnel', { steps: [] }, { key: p.keys.publishable }), status.PERMISSION_DENIED, 'forbidden');
    // a range over ten years is refused by the schema after the gate: proof that the gate let the key through
    for (const [key, projectId] of [[p.keys.secret, undefined], [readKey, undefined], [svc.adminKey, p.project.id]] as const) {
      await refused(client.call('query', { metrics: ['visits'], from: '2010-01-01', to: '2026-01-01', projectId }, { key }), status.INVALID_ARGUMENT, 'invalid_request', '3653');
    }
  });

  test('the fields map to the HTTP body: each bad one is INVALID_ARGUMENT naming it', async () => {
    await refused(client.call('query', { metrics: ['visitor'] }), status.INVALID_ARGUMENT, 'invalid_request', 'visitor');
    await refused(client.call('query', { metrics: [] }), status.INVALID_ARGUMENT, 'invalid_request', 'metrics');
    await refused(client.call('query', { metrics: ['visits'], dimensions: ['city'] }), status.INVALID_ARGUMENT, 'invalid_request', 'city');
    await refused(
      client.call('query', { metrics: ['visits'], filters: [{ operator: 'startsWith', dimension: 'page', values: ['/'] }] }),
      status.INVALID_ARGUMENT,
      'invalid_request',
      'startsWith',
    );
    await refused(client.call('query', { metrics: ['visits'], orderBy: [{ name: 'visits', direction: 'up' }] }), status.INVALID_ARGUMENT, 'invalid_request', 'up');
    await refused(client.call('query', { metrics: ['visits'], limit: 0 }), status.INVALID_ARGUMENT, 'invalid_request', 'limit');
    await refused(client.call('query', { metrics: ['conversionRate'] }), status.INVALID_ARGUMENT, 'invalid_request', 'conversionRate');
    await refused(
      client.call('queryFunnel', { steps: [{ step: { case: 'page', value: '/' } }, { step: { case: 'goal', value: 'Nope' } }] }),
      status.INVALID_ARGUMENT,
      'invalid_request',
      'Nope',
    );
    await refused(
      client.call('queryFunnel', { steps: [{ step: { case: 'page', value: '/' } }, {}] }),
      status.INVALID_ARGUMENT,
      'invalid_request',
      'steps[1]',
    );
    await refused(
      client.call('queryFunnel', {
        steps: [{ step: { case: 'page', value: '/' } }, { step: { case: 'event', value: 'x' } }],
        filters: [{ operator: 'is', dimension: 'event', values: ['x'] }],
      }),
      status.INVALID_ARGUMENT,
      'invalid_request',
      'event',
    );
  });
});

describe('gRPC goals', () => {
  test('create, conflict, list, delete, not found; rk_ lists but does not create', async () => {
    const projectId = p.project.id;
    const made = await client.call('createGoal', { projectId, name: 'Signed up', match: { case: 'event', value: 'signup' } });
    assert.equal(made.goal?.name, 'Signed up');
    assert.deepEqual(made.goal?.match, { case: 'event', value: 'signup' });
    await refused(client.call('createGoal', { projectId, name: 'Signed up', match: { case: 'page', value: '/x' } }), status.FAILED_PRECONDITION, 'conflict');
    await refused(client.call('createGoal', { projectId, name: 'No match' }), status.INVALID_ARGUMENT, 'invalid_request');
    await refused(client.call('createGoal', { projectId, name: 'R', match: { case: 'event', value: 'r' } }, { key: readKey }), status.PERMISSION_DENIED, 'forbidden');
    const page = await client.call('createGoal', { projectId, name: 'Docs', match: { case: 'page', value: '/docs/*' } }, { key: svc.adminKey });
    const listed = await client.call('listGoals', { projectId }, { key: readKey });
    assert.deepEqual(listed.goals.map((g) => [g.name, g.match.value]), [['Signed up', 'signup'], ['Docs', '/docs/*']]);
    // the HTTP face sees the same goals
    const http = await api(svc.url, `/projects/${projectId}/goals`, { key: readKey });
    assert.deepEqual(http.body.goals.map((g: { id: string }) => g.id), [made.goal!.id, page.goal!.id]);
    await client.call('deleteGoal', { projectId, goalId: made.goal!.id });
    await refused(client.call('deleteGoal', { projectId, goalId: made.goal!.id }), status.NOT_FOUND, 'not_found');
    assert.equal((await client.call('listGoals', { projectId })).goals.length, 1);
    await refused(client.call('listGoals', { projectId }, { key: p.keys.publishable }), status.PERMISSION_DENIED, 'forbidden');
  });
});
