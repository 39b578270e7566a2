/**
 * One progress line on stderr: rewritten in place on a terminal, one line per step elsewhere (CI logs), so the table
 * on stdout stays clean either way.
 */
export class Progress {
  private readonly tty = process.stderr.isTTY === true;
  private readonly started = Date.now();
  private step = 0;

  constructor(private readonly totalSteps: number) {}

  show(what: string): void {
    const secs = ((Date.now() - this.started) / 1000).toFixed(0).padStart(4);
    const line = `[${secs}s ${String(Math.min(this.step, this.totalSteps)).padStart(2)}/${this.totalSteps}] ${what}`;
    if (this.tty) process.stderr.write(`\r\x1b[K${line.slice(0, (process.stderr.columns ?? 120) - 1)}`);
    else process.stderr.write(`${line}\n`);
  }

  /** Marks one step done and shows what comes next. */
  next(what: string): void {
    this.step++;
    this.show(what);
  }

  done(): void {
    if (this.tty) process.stderr.write('\r\x1b[K');
  }
}
