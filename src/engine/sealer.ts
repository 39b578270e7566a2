import { rollupMonth, sealDay, type SealedDay, type SealedMonth } from '../core/sealed-day.ts';
import { monthEnd } from '../core/sealed-source.ts';
import { dropSealed, sealAt, takeSealQueue, type AnalyticsState, type SealRequest } from '../core/state.ts';
import { UnsealableDays, unsealableKey, type SealedWrite } from '../store/lmdb/sealed-store.ts';

/**
 * Writes the days the reducer hands over (their window has closed) to the sealed store, with the rollup of every
 * month whose last day is sealable, then drops them from the heap. One write at a time, so a rollup always sees every
 * earlier day of its month on disk; a day is dropped only once its sealed form is flushed, and a snapshot taken
 * meanwhile still holds it live, so a crash at any point loses nothing (re-sealing overwrites the same segment).
 */

/** Where sealed days go: LMDB on one node (SealedStore), the sealed-rows bucket plus its local copy in cluster mode. */
export interface SealedWriter {
  /** every sealed segment of a project's days in [from, to] that this node holds (a month's rollup merges them) */
  readDays(projectId: string, from: string, to: string): SealedDay[];
  /** durable when it resolves: the days may then be dropped from the heap */
  write(w: SealedWrite): Promise<void>;
}

/** Days per transaction: sealing 10,000 projects' day at midnight is many small writes, not one long stall. */
const SEAL_BATCH = 256;

export class Sealer {
  private running: Promise<void> | undefined;

  constructor(
    readonly state: AnalyticsState,
    private readonly store: SealedWriter,
    private readonly log: (line: string) => void,
  ) {}

  /** Starts writing queued days, if any and not already at it. */
  kick(): void {
    if (this.running || this.state.sealQueue.length === 0) return;
    this.running = this.run()
      .catch((err: unknown) => this.log(`sealing failed (the days stay live and are retried): ${err instanceof Error ? err.message : String(err)}`))
      .finally(() => {
        this.running = undefined;
      });
  }

  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  private async run(): Promise<void> {
    while (this.state.sealQueue.length > 0) {
      const queue = takeSealQueue(this.state);
      for (let i = 0; i < queue.length; i += SEAL_BATCH) {
        let batch = queue.slice(i, i + SEAL_BATCH);
        try {
          try {
            await this.sealBatch(batch);
          } catch (err) {
            if (!(err instanceof UnsealableDays)) throw err;
            // Kept live for good (still flagged as handed over, so never queued again); the rest is written.
            this.log(`ALERT ${err.message}: kept live (${[...err.days].map((k) => k.replaceAll('\u0000', ' ')).join(', ')})`);
            batch = batch.filter((r) => !err.days.has(unsealableKey(r.projectId, r.day.day, r.day.firstSeq)));
            await this.sealBatch(batch);
          }
        } catch (err) {
          // Not written: hand every day back so the next check queues it again.
          for (const r of queue.slice(i)) r.day.sealing = false;
          this.state.nextSealCheck = 0;
          throw err;
        }
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
  }

  private async sealBatch(batch: SealRequest[]): Promise<void> {
    const days = batch.map((r) => ({ projectId: r.projectId, day: sealDay(r.day) }));
    const months: Array<{ projectId: string; month: SealedMonth }> = [];
    const touched = new Map<string, { projectId: string; month: string }>();
    for (const { projectId, day } of days) touched.set(`${projectId}\u0000${day.date.slice(0, 7)}`, { projectId, month: day.date.slice(0, 7) });
    for (const { projectId, month } of touched.values()) {
      const last = monthEnd(month);
      if (sealAt(last) > this.state.maxRt) continue; // the month is not over yet: its rollup comes with its last day
      const segments = new Map<string, SealedDay>();
      for (const d of this.store.readDays(projectId, `${month}-01`, last)) segments.set(`${d.date}\u0000${d.firstSeq}`, d);
      for (const d of days) if (d.projectId === projectId && d.day.date.startsWith(month)) segments.set(`${d.day.date}\u0000${d.day.firstSeq}`, d.day);
      months.push({ projectId, month: rollupMonth(month, [...segments.values()]) });
    }
    await this.store.write({ days, months });
    for (let i = 0; i < batch.length; i++) dropSealed(this.state, batch[i]!.projectId, batch[i]!.day, days[i]!.day.lastSeq);
  }
}
