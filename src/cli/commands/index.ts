import type { Command } from 'commander';
import { registerMcp } from './mcp.ts';
import { registerServe } from './serve.ts';

/** Every command of `analytics`; each file registers one command (or one group) on the program. */
export const commands: Array<(program: Command) => void> = [registerServe, registerMcp];
