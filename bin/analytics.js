#!/usr/bin/env node
// The `analytics` command. It runs the compiled CLI when dist/ is current (bin/build.mjs), else the source with tsx's
// loader registered in this process (no child), so a signal sent to this PID reaches the service itself.
import { distIsFresh } from './dist.mjs';

if (distIsFresh()) {
  await import('../dist/cli/main.js');
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import('../src/cli/main.ts');
}
