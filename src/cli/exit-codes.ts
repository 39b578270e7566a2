/** The CLI's exit codes (documented in docs/cli.md). */
export const EXIT_OK = 0;
/** a refused request, a failed check, or bad input; the message is on stderr */
export const EXIT_FAILED = 1;
/** a usage error: unknown command or option, missing argument */
export const EXIT_USAGE = 2;
