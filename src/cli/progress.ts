import { Presets, SingleBar } from 'cli-progress';

/**
 * Progress of long work, on stderr so stdout stays clean for data: a bar (cli-progress) on a terminal, plain lines
 * ("rebuild: 40% (400000/1000000)") when stderr is not a TTY (logs, CI), at most one per PLAIN_STEP_PERCENT.
 */

/** Plain mode prints a line per 10 %: enough to see it move, few enough for a log. */
const PLAIN_STEP_PERCENT = 10;

export interface Progress {
  update(done: number): void;
  stop(): void;
}

export function progress(label: string, total: number, quiet = false): Progress {
  if (quiet || total <= 0) return { update() {}, stop() {} };
  if (process.stderr.isTTY) {
    const bar = new SingleBar({ format: `${label} [{bar}] {percentage}% {value}/{total} eta {eta_formatted}`, stream: process.stderr, hideCursor: true }, Presets.shades_classic);
    bar.start(total, 0);
    return { update: (done) => bar.update(Math.min(done, total)), stop: () => bar.stop() };
  }
  let lastStep = -1;
  return {
    update(done) {
      const pct = Math.floor((Math.min(done, total) / total) * 100);
      const step = Math.floor(pct / PLAIN_STEP_PERCENT);
      if (step > lastStep) {
        lastStep = step;
        process.stderr.write(`${label}: ${pct}% (${done}/${total})\n`);
      }
    },
    stop() {
      if (lastStep < 100 / PLAIN_STEP_PERCENT) process.stderr.write(`${label}: 100% (${total}/${total})\n`);
    },
  };
}
