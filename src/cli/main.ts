import { Command, CommanderError } from 'commander';
import { commands } from './commands/index.ts';
import { CliError } from './errors.ts';
import { EXIT_FAILED, EXIT_USAGE } from './exit-codes.ts';

/**
 * `analytics <command>`: a face like HTTP and gRPC. Each command lives in `commands/<name>.ts` and registers itself
 * on the program; this file only wires them and maps a usage error to exit code 2.
 */
export function buildProgram(): Command {
  const program = new Command('analytics')
    .description('Cookie-free, privacy-first web analytics: serve, manage projects and keys, export, check.')
    .showHelpAfterError()
    .exitOverride();
  for (const register of commands) register(program);
  return program;
}

// `analytics export ... | head`: the reader went away; stop quietly, as Unix tools do.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

async function run(argv: string[]): Promise<void> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version end here with code 0; every other commander error is a usage error.
      process.exit(err.exitCode === 0 ? 0 : EXIT_USAGE);
    }
    if (err instanceof CliError) {
      // A refused request, a failed check or bad input: the message, no stack.
      process.stderr.write(`analytics: ${err.message}\n`);
      process.exit(EXIT_FAILED);
    }
    throw err;
  }
}

await run(process.argv);
