/**
 * What lmdb-js does when a commit fails (a full disk, a failing device), and how the log store keeps it to one report.
 * lmdb-js rejects more promises than the one a caller awaits: the real cause on a second promise, and the puts it
 * makes on its own inside our transactions. Unheard, any of those ends the process as an unhandled rejection. Per
 * write, `commitFailure` takes the cause over; what no caller can reach is contained process-wide, once, by
 * `containLmdbRejections` (LogStore.open calls it).
 */

/**
 * lmdb-js rejects a failed commit's writes with 'Commit failed' and hangs the real cause on `error.commitError`, a
 * second promise rejected a moment later. Nobody else awaits that one, so a full disk would end the process with an
 * unhandled rejection. This takes it over and returns the error with the cause in its message.
 */
export function commitFailure(err: unknown): Error {
  const e = err instanceof Error ? err : new Error(String(err));
  const cause = (e as Error & { commitError?: Promise<unknown> }).commitError;
  if (cause && typeof cause.then === 'function') {
    cause.then(
      () => {},
      (why: unknown) => {
        e.message = `${e.message}: ${why instanceof Error ? why.message : String(why)}`;
      },
    );
  }
  return e;
}

/**
 * lmdb-js also writes on its own inside our transactions (msgpackr's shared structures, through a put whose promise
 * nobody holds), so a failed commit leaves rejections we cannot reach. Our own writes report the failure through the
 * promises we await, so these are noise; anything else still ends the process as Node would. The handler is
 * process-wide because those promises belong to no caller: it is installed once, by the first store opened.
 */
let lmdbRejectionsContained = false;
export function containLmdbRejections(): void {
  if (lmdbRejectionsContained) return;
  lmdbRejectionsContained = true;
  // lmdb-js prints a failed commit's error itself (a stack per failure, `Input/output error` on a full disk) and
  // rejects the commit's promise with it too: the caller's one line is the report.
  const printError = console.error.bind(console);
  console.error = (...args: unknown[]) => {
    if (args.length === 1 && args[0] instanceof Error && /[\\/]lmdb[\\/]write\.js/.test(args[0].stack ?? '')) return;
    printError(...args);
  };
  process.on('unhandledRejection', (reason) => {
    const stack = reason instanceof Error ? (reason.stack ?? '') : '';
    if (/[\\/]lmdb[\\/]write\.js/.test(stack)) {
      return; // the same failure as the commit we await: its caller logs it once per episode, not once per stray write
    }
    throw reason;
  });
}
