import type { Command } from 'commander';
import { registerBackup } from './backup.ts';
import { registerExport } from './export.ts';
import { registerImport } from './import.ts';
import { registerKeys } from './keys.ts';
import { registerCheck, registerRebuild } from './maintenance.ts';
import { registerMcp } from './mcp.ts';
import { registerProjects } from './projects.ts';
import { registerQuery } from './query.ts';
import { registerRepair } from './repair.ts';
import { registerServe } from './serve.ts';

/** Every command of `analytics`; each file registers one command (or one group) on the program. */
export const commands: Array<(program: Command) => void> = [
  registerServe,
  registerProjects,
  registerKeys,
  registerQuery,
  registerExport,
  registerImport,
  registerRebuild,
  registerCheck,
  registerBackup,
  registerRepair,
  registerMcp,
];
