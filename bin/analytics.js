#!/usr/bin/env node
// The `analytics` command. One process: tsx's loader is registered in this process (no child), so a signal sent to
// this PID reaches the service itself.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');
