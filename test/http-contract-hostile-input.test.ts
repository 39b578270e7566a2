import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { assertError, ingest, pv, sleep, storedEvents } from './contract-helpers.ts';
import { api, createProject, startTestService, type CreatedProject, type TestService } from './helpers.ts';

/**
 * CONTRACT "POST /analytics" limits and the hostile-input rules: the 1 MiB body cap (declared or streamed), 500
 * events, 32 KiB per encoded event, nesting, prototype keys, lone surrogates, NUL bytes, 1e309, BOM, empty bodies and
 * content types. Every case checks the exact status and code, that nothing was stored, and that nothing is a 5xx.
 */

const MIB = 1024 * 1024;
const EVENT_BYTES = 32 * 1024;

let svc: TestService;
let a: CreatedProject;

before(async () => {
  svc = await startTestService();
  a = await createProject(svc.url, svc.adminKey, { name: 'A', monthly_quota: 0 });
});
after(() => svc.destroy());

const stored = () => storedEvents(svc.url, a.keys.secret);

/** An event whose JSON encoding is exactly `bytes` long (ASCII padding in a page-context field). */
function eventOfBytes(bytes: number, extra: object = {}): Record<string, unknown> {
  const e: Record<string, unknown> = { ...pv('/sized'), ...extra, pad: '' };
  const overhead = Buffer.byteLength(JSON.stringify(e));
  e.pad = 'x'.repeat(bytes - overhead);
  assert.equal(Buffer.byteLength(JSON.stringify(e)), bytes);
  return e;
}

/** A JSON array body of exactly `bytes` bytes, every event well under 32 KiB. */
function bodyOfBytes(bytes: number): string {
  const n = Math.ceil(bytes / 30_000);
  const per = Math.floor((bytes - 2 - (n - 1)) / n); // brackets and commas
  const events = Array.from({ length: n }, (_, i) => eventOfBytes(i === n - 1 ? bytes - 2 - (n - 1) - per * (n - 1) : per));
  const body = JSON.stringify(events);
  assert.equal(Buffer.byteLength(body), bytes);
  return body;
}

interface StreamResult {
  status: number;
  body: string;
  /** bytes written when the response arrived */
  writtenAtResponse: number;
  finishedWriting: boolean;
}

/** POSTs a chunked body (no Content-Length) of `total` bytes, `chunk` bytes every `everyMs`, stopping at the response. */
function streamBody(opts: { total: number; chunk: number; everyMs: number; headers?: Record<string, string>; fill?: (size: number, offset: number) => string }): Promise<StreamResult> {
  const url = new URL('/analytics', svc.url);
  return new Promise((resolve, reject) => {
    let written = 0;
    let responded = false;
    let finished = false;
    const req = httpRequest(url, {
      method: 'POST',
      agent: false,
      headers: { authorization: `Bearer ${a.keys.secret}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked', ...opts.headers },
    });
    req.on('response', (res) => {
      responded = true;
      const at = written;
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8'), writtenAtResponse: at, finishedWriting: finished }));
    });
    req.on('error', (err) => {
      if (!responded) reject(err); // after the answer, a reset of our unfinished upload is expected
    });
    void (async () => {
      while (!responded && written < opts.total) {
        const size = Math.min(opts.chunk, opts.total - written);
        const piece = opts.fill ? opts.fill(size, written) : ' '.repeat(size);
        written += size;
        if (!req.write(piece)) await new Promise<void>((r) => req.once('drain', () => r()));
        if (opts.everyMs > 0) await sleep(opts.everyMs);
      }
      if (!responded) {
        finished = true;
        req.end();
      }
    })().catch(reject);
  });
}

describe('the 1 MiB body cap', () => {
  test('a chunked body is refused with 413 while it is still streaming, and the service stays healthy', async () => {
    const before = await stored();
    const total = 8 * MIB;
    const r = await streamBody({ total, chunk: 16 * 1024, everyMs: 2 });
    assert.equal(r.status, 413, r.body);
    assert.equal(JSON.parse(r.body).error.code, 'payload_too_large');
    assert.equal(r.finishedWriting, false, 'the answer came before the upload ended');
    assert.ok(r.writtenAtResponse < 3 * MIB, `answered after ${r.writtenAtResponse} bytes`);
    assert.equal((await api(svc.url, '/health')).status, 200);
    assert.equal(await stored(), before);
  });

  test('a declared Content-Length over 1 MiB is refused with 413 before any of the body is sent', async () => {
    const url = new URL('/analytics', svc.url);
    const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest(url, {
        method: 'POST',
        agent: false,
        headers: { authorization: `Bearer ${a.keys.secret}`, 'content-type': 'application/json', 'content-length': String(64 * MIB) },
      });
      req.on('response', (r) => {
        const chunks: Buffer[] = [];
        r.on('data', (c: Buffer) => chunks.push(c));
        r.on('end', () => resolve({ status: r.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      });
      req.on('error', () => {
        /* the server closes after answering; our upload never started */
      });
      setTimeout(() => reject(new Error('no answer without a body')), 5000).unref();
      req.flushHeaders();
    });
    assert.equal(res.status, 413);
    assert.equal(JSON.parse(res.body).error.code, 'payload_too_large');
    assert.equal((await api(svc.url, '/health')).status, 200);
  });

  test('a body of exactly 1 MiB is accepted, with or without Content-Length; one byte more is refused with 413', async () => {
    const before = await stored();
    const body = bodyOfBytes(MIB);
    const n = (JSON.parse(body) as unknown[]).length;
    const declared = await ingest(svc.url, a.keys.secret, undefined, { raw: body });
    assert.equal(declared.status, 200, JSON.stringify(declared.body));
    const chunked = await streamBody({ total: MIB, chunk: 64 * 1024, everyMs: 0, fill: (size, offset) => body.slice(offset, offset + size) });
    assert.equal(chunked.status, 200, chunked.body);
    assert.equal(await stored(), before + 2 * n);
    assertError(await ingest(svc.url, a.keys.secret, undefined, { raw: `${body} ` }), 413, 'payload_too_large');
    const over = await streamBody({ total: MIB + 1, chunk: 64 * 1024, everyMs: 0, fill: (size, offset) => `${body} `.slice(offset, offset + size) });
    assert.equal(over.status, 413);
    assert.equal(await stored(), before + 2 * n);
  });
});

describe('batch and event sizes', () => {
  test('a batch of exactly 500 events is accepted and counted 500 times', async () => {
    const before = await stored();
    const r = await ingest(svc.url, a.keys.secret, Array.from({ length: 500 }, (_, i) => pv(`/b${i}`)));
    assert.equal(r.status, 200);
    assert.equal(r.body.accepted, 500);
    assert.equal(await stored(), before + 500);
  });

  test('an event of exactly 32 KiB encoded is accepted', async () => {
    const before = await stored();
    assert.equal((await ingest(svc.url, a.keys.secret, eventOfBytes(EVENT_BYTES))).status, 200);
    assert.equal(await stored(), before + 1);
  });

  const oversized: Array<{ name: string; batch: () => unknown[]; index: number }> = [
    { name: 'one byte over 32 KiB', batch: () => [eventOfBytes(EVENT_BYTES + 1)], index: 0 },
    { name: 'over 32 KiB at index 2 of a batch of valid events', batch: () => [pv('/1'), pv('/2'), eventOfBytes(40_000), pv('/3')], index: 2 },
    { name: 'under 32 K characters but over 32 KiB in UTF-8', batch: () => [pv('/', { pad: 'é'.repeat(17_000) })], index: 0 },
  ];
  for (const o of oversized) {
    test(`refuses an event ${o.name} with 400 invalid_event naming its index, and stores none of the batch`, async () => {
      const before = await stored();
      const r = await ingest(svc.url, a.keys.secret, o.batch());
      assertError(r, 400, 'invalid_event');
      assert.deepEqual(r.body.error.details.map((d: { index: number }) => d.index), [o.index]);
      assert.equal(await stored(), before);
    });
  }

  const bounds: Array<{ field: string; ok: object; bad: object; path: string }> = [
    { field: 'event name', ok: { event: 'e'.repeat(64) }, bad: { event: 'e'.repeat(65) }, path: 'event' },
    { field: 'url', ok: { url: `/${'u'.repeat(2047)}` }, bad: { url: `/${'u'.repeat(2048)}` }, path: 'url' },
    { field: 'sessionId', ok: { sessionId: 's'.repeat(128) }, bad: { sessionId: 's'.repeat(129) }, path: 'sessionId' },
    { field: 'userId', ok: { userId: 'u'.repeat(128) }, bad: { userId: 'u'.repeat(129) }, path: 'userId' },
    { field: 'device', ok: { device: 'd'.repeat(32) }, bad: { device: 'd'.repeat(33) }, path: 'device' },
    { field: 'country', ok: { country: 'c'.repeat(64) }, bad: { country: 'c'.repeat(65) }, path: 'country' },
    { field: 'referrer name', ok: { referrer: 'r'.repeat(100) }, bad: { referrer: 'r'.repeat(101) }, path: 'referrer' },
    {
      field: 'eventParams key count',
      ok: { eventParams: Object.fromEntries(Array.from({ length: 25 }, (_, i) => [`k${i}`, i])) },
      bad: { eventParams: Object.fromEntries(Array.from({ length: 26 }, (_, i) => [`k${i}`, i])) },
      path: 'eventParams',
    },
    { field: 'eventParams key length', ok: { eventParams: { ['k'.repeat(40)]: 1 } }, bad: { eventParams: { ['k'.repeat(41)]: 1 } }, path: `eventParams.${'k'.repeat(41)}` },
    { field: 'eventParams string value', ok: { eventParams: { v: 'v'.repeat(500) } }, bad: { eventParams: { v: 'v'.repeat(501) } }, path: 'eventParams.v' },
    { field: 'eventParams value type', ok: { eventParams: { a: 'x', b: 1, c: true, d: null } }, bad: { eventParams: { o: { nested: 1 } } }, path: 'eventParams.o' },
    { field: 'items count', ok: { items: Array.from({ length: 200 }, () => ({ item_id: 'i' })) }, bad: { items: Array.from({ length: 201 }, () => ({ item_id: 'i' })) }, path: 'items' },
    { field: 'item quantity', ok: { items: [{ item_id: 'i', price: 1.5, quantity: 2 }] }, bad: { items: [{ item_id: 'i', quantity: 1.5 }] }, path: 'items.0.quantity' },
  ];
  for (const b of bounds) {
    test(`accepts the largest ${b.field} and refuses one past it with 400 invalid_event at "${b.path}"`, async () => {
      const before = await stored();
      assert.equal((await ingest(svc.url, a.keys.secret, pv('/bound', b.ok))).status, 200);
      const r = await ingest(svc.url, a.keys.secret, pv('/bound', b.bad));
      assertError(r, 400, 'invalid_event');
      assert.ok(r.body.error.details.some((d: { path: string }) => d.path === b.path), JSON.stringify(r.body.error.details));
      assert.equal(await stored(), before + 1);
    });
  }
});

describe('hostile bodies', () => {
  const nested = (levels: number) => {
    let v = '1';
    for (let i = 0; i < levels; i++) v = `{"n":${v}}`;
    return v;
  };
  const cases: Array<{ name: string; raw: string; headers?: Record<string, string>; status: number; code: string }> = [
    { name: 'a whitespace-only body', raw: ' \r\n\t ', status: 400, code: 'invalid_json' },
    { name: 'a body of "null"', raw: 'null', status: 400, code: 'invalid_event' },
    { name: 'a body that is a number', raw: '42', status: 400, code: 'invalid_event' },
    { name: 'a body that is a string', raw: '"page_view"', status: 400, code: 'invalid_event' },
    { name: 'a batch of numbers', raw: '[1,2]', status: 400, code: 'invalid_event' },
    { name: 'an empty object', raw: '{}', status: 400, code: 'invalid_event' },
    { name: 'an empty {events} batch', raw: '{"events":[]}', status: 400, code: 'invalid_request' },
    { name: '{events} that is an object', raw: '{"events":{"event":"x"}}', status: 400, code: 'invalid_request' },
    { name: 'trailing garbage after the JSON', raw: '{"event":"x"} trailing', status: 400, code: 'invalid_json' },
    { name: 'two JSON values', raw: '{"event":"x"}{"event":"y"}', status: 400, code: 'invalid_json' },
    { name: 'single-quoted JSON', raw: "{'event':'x'}", status: 400, code: 'invalid_json' },
    { name: 'a raw (unescaped) NUL byte inside a string', raw: '{"event":"a\u0000b"}', status: 400, code: 'invalid_json' },
    { name: 'two byte-order marks', raw: '\ufeff\ufeff{"event":"x"}', status: 400, code: 'invalid_json' },
    { name: 'an event name with an escaped NUL', raw: '{"event":"a\\u0000b"}', status: 400, code: 'invalid_event' },
    { name: 'an event name with a newline', raw: '{"event":"a\\nb"}', status: 400, code: 'invalid_event' },
    { name: 'an event name with DEL', raw: '{"event":"a\\u007fb"}', status: 400, code: 'invalid_event' },
    { name: 'an event name with a C1 control (U+0085)', raw: '{"event":"a\\u0085b"}', status: 400, code: 'invalid_event' },
    { name: 'an event name that is a number', raw: '{"event":1}', status: 400, code: 'invalid_event' },
    { name: 'an empty event name', raw: '{"event":""}', status: 400, code: 'invalid_event' },
    { name: '1e309 in eventParams', raw: '{"event":"x","eventParams":{"n":1e309}}', status: 400, code: 'invalid_event' },
    { name: '-1e309 in eventParams', raw: '{"event":"x","eventParams":{"n":-1e309}}', status: 400, code: 'invalid_event' },
    { name: '1e309 as an item price', raw: '{"event":"purchase","items":[{"item_id":"a","price":1e309}]}', status: 400, code: 'invalid_event' },
    { name: 'a url with a javascript: scheme', raw: '{"event":"page_view","url":"javascript:alert(1)"}', status: 400, code: 'invalid_event' },
    { name: 'a top-level __proto__ key', raw: '{"event":"x","__proto__":{"polluted":true}}', status: 400, code: 'invalid_request' },
    { name: 'a top-level constructor key', raw: '{"event":"x","constructor":{"prototype":{"polluted":true}}}', status: 400, code: 'invalid_request' },
    { name: 'a top-level prototype key', raw: '{"event":"x","prototype":1}', status: 400, code: 'invalid_request' },
    { name: 'a __proto__ key in eventParams', raw: '{"event":"x","eventParams":{"__proto__":"p"}}', status: 400, code: 'invalid_request' },
    { name: 'a constructor key in eventParams', raw: '{"event":"x","eventParams":{"constructor":"c"}}', status: 400, code: 'invalid_request' },
    { name: 'a prototype key in a line item', raw: '{"event":"purchase","items":[{"item_id":"a","prototype":1}]}', status: 400, code: 'invalid_request' },
    { name: 'a __proto__ key nested in page context', raw: '{"event":"x","ctx":{"a":{"b":{"__proto__":{"polluted":true}}}}}', status: 400, code: 'invalid_request' },
    { name: 'a __proto__ key in the {events} wrapper', raw: '{"events":[{"event":"x"}],"__proto__":{"polluted":true}}', status: 400, code: 'invalid_request' },
    { name: 'a __proto__ key in the third event of a batch', raw: '[{"event":"x"},{"event":"y"},{"event":"z","__proto__":{}}]', status: 400, code: 'invalid_request' },
    { name: 'nesting 9 levels deep', raw: `{"event":"x","deep":${nested(8)}}`, status: 400, code: 'invalid_request' },
    { name: 'nesting 9 levels deep in a batch', raw: `[{"event":"x","deep":${nested(7)}}]`, status: 400, code: 'invalid_request' },
    { name: 'nesting 100,000 levels deep', raw: `{"event":"x","deep":${'['.repeat(100_000)}${']'.repeat(100_000)}}`, status: 400, code: 'invalid_request' },
    { name: 'an unterminated 500,000-level nesting', raw: '['.repeat(500_000), status: 400, code: 'invalid_json' },
  ];
  for (const c of cases) {
    test(`refuses ${c.name} with ${c.status} ${c.code}, without a 5xx and without storing anything`, async () => {
      const before = await stored();
      const r = await ingest(svc.url, a.keys.secret, undefined, { raw: c.raw, headers: c.headers ?? {} });
      assertError(r, c.status, c.code);
      assert.equal(await stored(), before);
      assert.equal(({} as Record<string, unknown>).polluted, undefined, 'Object.prototype untouched');
    });
  }

  test('accepts nesting of exactly 8 levels (the body is level 1)', async () => {
    const before = await stored();
    assert.equal((await ingest(svc.url, a.keys.secret, undefined, { raw: `{"event":"x","deep":${nested(7)}}` })).status, 200);
    assert.equal(await stored(), before + 1);
  });

  test('accepts prototype-like names where they are values or harmless keys', async () => {
    const before = await stored();
    const r = await ingest(svc.url, a.keys.secret, undefined, {
      raw: '{"event":"constructor","eventParams":{"hasOwnProperty":"x","toString":1,"valueOf":null},"note":"__proto__"}',
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(await stored(), before + 1);
    const m = await api(svc.url, '/metrics', { key: a.keys.secret });
    assert.equal(m.body.events.constructor, 1);
  });

  test('an event named "__proto__" is counted and shown in the events breakdown', async () => {
    const p = await createProject(svc.url, svc.adminKey, {});
    assert.equal((await ingest(svc.url, p.keys.secret, { event: '__proto__' })).status, 200);
    const m = await api(svc.url, '/metrics', { key: p.keys.secret });
    assert.equal(Object.hasOwn(m.body.events, '__proto__') ? m.body.events.__proto__ : undefined, 1);
  });

  test('NUL bytes in a parameter value or in page context are accepted and stored', async () => {
    const before = await stored();
    const r = await ingest(svc.url, a.keys.secret, undefined, { raw: '{"event":"nul_param","eventParams":{"v":"a\\u0000b"},"ctx":"\\u0000"}' });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(await stored(), before + 1);
  });

  test('a leading BOM is skipped for application/json as for text/plain', async () => {
    const before = await stored();
    assert.equal((await ingest(svc.url, a.keys.secret, undefined, { raw: `\ufeff${JSON.stringify(pv('/bom'))}` })).status, 200);
    assert.equal(await stored(), before + 1);
  });

  test('bytes that are not UTF-8 become U+FFFD and the event is accepted', async () => {
    const p = await createProject(svc.url, svc.adminKey, {});
    const body = Buffer.concat([Buffer.from('{"event":"bad'), Buffer.from([0xff, 0xc3, 0x28]), Buffer.from('"}')]);
    const res = await fetch(`${svc.url}/analytics`, { method: 'POST', headers: { authorization: `Bearer ${p.keys.secret}`, 'content-type': 'application/json' }, body });
    assert.equal(res.status, 200, await res.text());
    const m = await api(svc.url, '/metrics', { key: p.keys.secret });
    assert.deepEqual(Object.keys(m.body.events), ['bad\ufffd\ufffd(']);
  });
});

describe('content types', () => {
  const refused: Array<{ name: string; type: string | undefined }> = [
    { name: 'no Content-Type', type: undefined },
    { name: 'multipart/form-data', type: 'multipart/form-data; boundary=x' },
    { name: 'text/html', type: 'text/html' },
    { name: 'application/xml', type: 'application/xml' },
    { name: 'application/json-seq', type: 'application/json-seq' },
    { name: 'application/octet-stream', type: 'application/octet-stream' },
    { name: 'a garbage type', type: ';;;' },
  ];
  for (const r of refused) {
    test(`refuses a valid JSON event sent with ${r.name} with 415 unsupported_media_type`, async () => {
      const before = await stored();
      const headers: Record<string, string> = { authorization: `Bearer ${a.keys.secret}` };
      if (r.type !== undefined) headers['content-type'] = r.type;
      // fetch would add text/plain to a string body; a Uint8Array body keeps the request without a type
      const res = await fetch(`${svc.url}/analytics`, { method: 'POST', headers, body: new TextEncoder().encode(JSON.stringify(pv('/ct'))) });
      const body = (await res.json()) as { error: { code: string } };
      assert.equal(res.status, 415);
      assert.equal(body.error.code, 'unsupported_media_type');
      assert.equal(await stored(), before);
    });
  }

  const accepted = ['application/json', 'application/json; charset=utf-8', 'Application/JSON;charset=UTF-8', 'text/plain', 'text/plain;charset=UTF-8', 'TEXT/PLAIN'];
  for (const type of accepted) {
    test(`accepts a JSON event sent as ${type}`, async () => {
      const before = await stored();
      const r = await ingest(svc.url, a.keys.secret, undefined, { raw: JSON.stringify(pv('/ct')), headers: { 'content-type': type } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(await stored(), before + 1);
    });
  }

  test('refuses text/plain that is not JSON with 400 invalid_json', async () => {
    assertError(await ingest(svc.url, a.keys.secret, undefined, { raw: 'event=x', headers: { 'content-type': 'text/plain' } }), 400, 'invalid_json');
  });
});

describe('lone surrogates are made well-formed before storage', () => {
  test('a lone surrogate reads back as U+FFFD, live and after a restart replays the log', async () => {
    let s = await startTestService();
    try {
      const p = await createProject(s.url, s.adminKey, {});
      const raw =
        '[{"event":"click\\ud800","url":"/p\\udc00?q=1","sessionId":"s\\ud800x","country":"X\\udbff","device":"Phone\\udfff",' +
        '"referrer":"news\\ud83d","eventParams":{"v":"\\ud800","k\\udc00":1}},' +
        '{"event":"page_view","url":"https://a.example/\\ud800","sessionId":"s2"}]';
      const r = await ingest(s.url, p.keys.secret, undefined, { raw });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const read = async () => (await api(s.url, '/metrics', { key: p.keys.secret })).body;
      const live = await read();
      assert.deepEqual(live.events, { 'click\ufffd': 1, page_view: 1 });
      assert.deepEqual(live.countries['X\ufffd'], 1);
      assert.deepEqual(live.devices['phone\ufffd'], 1);
      assert.deepEqual(live.trafficSources['news\ufffd'], 1);
      assert.deepEqual(live.pages, { '/%EF%BF%BD': 1 });
      const click = live.recentEvents.find((e: { event: string }) => e.event === 'click\ufffd');
      assert.deepEqual([click.url, click.sessionId], ['/p\ufffd?q=1', 's\ufffdx']);
      for (const text of JSON.stringify(live).match(/\\u[dD][89a-fA-F][0-9a-fA-F]{2}/g) ?? []) assert.fail(`a surrogate escape reached the response: ${text}`);

      s = await s.restart();
      assert.deepEqual(await read(), live);
    } finally {
      await s.destroy();
    }
  });
});

describe('after all of the above', () => {
  test('the service is healthy and answers normally', async () => {
    const h = await api(svc.url, '/health');
    assert.equal(h.status, 200);
    assert.equal(h.body.status, 'ok');
    assert.equal((await ingest(svc.url, a.keys.secret, pv('/still-fine'))).status, 200);
  });
});
