import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Validator } from '@seriousme/openapi-schema-validator';
import { conformanceProblem } from './openapi-conformance.ts';
import { api, startTestService, type TestService } from './helpers.ts';

let svc: TestService;
before(async () => {
  svc = await startTestService();
});
after(() => svc.destroy());

test('GET /openapi.json answers a valid OpenAPI 3.1 document without a key', async () => {
  const res = await fetch(`${svc.url}/openapi.json`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  const doc = (await res.json()) as Record<string, any>;
  assert.equal(doc.openapi, '3.1.0');
  const result = await new Validator().validate(doc);
  assert.equal(result.valid, true, JSON.stringify(result.errors, null, 1));
});

test('the document describes every endpoint, the bearer scheme and every error code', async () => {
  const doc = (await api(svc.url, '/openapi.json')).body;
  for (const [path, methods] of Object.entries({
    '/analytics': ['post'],
    '/metrics': ['get'],
    '/projects': ['get', 'post'],
    '/projects/{id}': ['patch', 'delete'],
    '/projects/{id}/keys': ['get', 'post'],
    '/projects/{id}/keys/{keyId}': ['patch', 'delete'],
    '/health': ['get'],
    '/script.js': ['get'],
  })) {
    for (const m of methods) assert.ok(doc.paths[path]?.[m], `${m} ${path} is described`);
  }
  assert.deepEqual(doc.components.securitySchemes.bearer, { ...doc.components.securitySchemes.bearer, type: 'http', scheme: 'bearer' });
  const codes = doc.components.schemas.Error.properties.error.properties.code.enum;
  for (const c of ['invalid_json', 'invalid_event', 'invalid_request', 'unauthorized', 'forbidden', 'not_found', 'method_not_allowed', 'conflict', 'payload_too_large', 'unsupported_media_type', 'rate_limited', 'quota_exceeded', 'internal', 'unavailable']) {
    assert.ok(codes.includes(c), c);
  }
  // generated from the request schemas the service validates with: the event's limits are there
  assert.equal(doc.components.schemas.Event.properties.event.maxLength, 64);
  assert.equal(doc.components.schemas.UpdateProject.additionalProperties, false);
  assert.ok(doc.paths['/projects'].post.requestBody.content['application/json'].example);
});

test('the conformance check used by the HTTP suites catches an answer that does not match', () => {
  assert.equal(conformanceProblem('GET', '/health', 200, 'application/json', { status: 'ok', version: '1', uptimeSeconds: 1 }), undefined);
  assert.match(conformanceProblem('GET', '/health', 200, 'application/json', { status: 'fine' }) ?? '', /does not match/);
  assert.match(conformanceProblem('DELETE', '/projects/p_1', 418, 'application/json', {}) ?? '', /does not list/);
  assert.match(conformanceProblem('GET', '/projects/p_1/keys', 200, 'application/json', { keys: [{ id: 'k', type: 'admin' }] }) ?? '', /does not match/);
});
