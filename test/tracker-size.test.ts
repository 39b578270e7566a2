import assert from 'node:assert/strict';
import { test } from 'node:test';
import { gunzipSync } from 'node:zlib';
import { buildTracker } from '../src/tracker/build.ts';

/** The spec promises a script under 2 KB; we hold ourselves to half of that, gzipped as browsers fetch it. */
const MAX_TRACKER_GZIP_BYTES = 1024;

test('the tracking script is at most 1,024 bytes gzipped', async () => {
  const { gzipBytes } = await buildTracker();
  assert.ok(gzipBytes <= MAX_TRACKER_GZIP_BYTES, `tracker is ${gzipBytes} bytes gzipped, limit ${MAX_TRACKER_GZIP_BYTES}`);
});

test('the tracking script is one self-contained ES2019 IIFE with no imports', async () => {
  const { code } = await buildTracker();
  assert.doesNotMatch(code, /\bimport\s*[({"'*]|\brequire\(/);
  assert.doesNotThrow(() => new Function(code), 'the built script parses as a classic script');
});

test('the build is cached and its hash is a short sha256 of the code', async () => {
  const first = await buildTracker();
  const second = await buildTracker();
  assert.equal(second, first);
  assert.match(first.hash, /^[0-9a-f]{16}$/);
});

test('the tracking script never touches cookies', async () => {
  const { code } = await buildTracker();
  assert.doesNotMatch(code, /cookie/i);
});

test('the gzipped copy unpacks to the code', async () => {
  const { code, gzip, gzipBytes } = await buildTracker();
  assert.equal(gzip.length, gzipBytes);
  assert.equal(gunzipSync(gzip).toString(), code);
});
