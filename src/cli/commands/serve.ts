import type { Command } from 'commander';

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('serve HTTP and gRPC on the embedded LMDB store (what `npm start` does); configured by environment variables')
    .action(async () => {
      await import('../../main.ts');
    });
}
