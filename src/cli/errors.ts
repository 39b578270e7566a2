/** A refused request, a failed check or bad input: the message goes to stderr and the exit code is 1. */
export class CliError extends Error {}
