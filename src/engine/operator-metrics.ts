import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { SEAL_REASONS, sumOpenStats, type OpenColumnStats } from './open-columns.ts';

/**
 * Operator metrics (Prometheus text format on METRICS_PORT), with prom-client: the de-facto Node client, maintained,
 * no native code, and it brings the process collectors (RSS, event-loop delay, GC, handles) with our prefix.
 * Every series starts with `analytics_`; labels take values from small fixed sets (endpoints, outcomes), never from
 * input, so the number of series is bounded.
 */

/** Ingest answers in ms on a quiet machine, tens of ms under load or with fsync; buckets span 0.5 ms to 5 s. */
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];
/** Snapshots take milliseconds for a small state, seconds for millions of sessions. */
const SNAPSHOT_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export type Face = 'http' | 'grpc';

/** What the engine can report about its state at scrape time. */
export interface StateStats {
  projects: number;
  liveDays: number;
  /** live days whose tables are on the heap (the rest sleep on their snapshot bytes) */
  awakeDays: number;
  sealedDays: number;
  columns: OpenColumnStats;
}

export class OperatorMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'face' | 'endpoint' | 'outcome'>;
  private readonly events: Counter<'face' | 'outcome'>;
  private readonly ingestLatency: Histogram<'face'>;
  private readonly commitLatency: Histogram;
  private readonly snapshotDuration: Histogram;
  private readonly snapshotBytes: Gauge;
  private stats: () => StateStats = () => ({ projects: 0, liveDays: 0, awakeDays: 0, sealedDays: 0, columns: sumOpenStats([]) });

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'analytics_' });
    const registers = [this.registry];
    this.requests = new Counter({
      name: 'analytics_requests_total',
      help: 'Requests answered, by face (http, grpc), endpoint and outcome (ok or the error code)',
      labelNames: ['face', 'endpoint', 'outcome'],
      registers,
    });
    this.events = new Counter({
      name: 'analytics_events_total',
      help: 'Events received on ingest endpoints, by face and outcome (stored, duplicate, bot, or the refusal code)',
      labelNames: ['face', 'outcome'],
      registers,
    });
    this.ingestLatency = new Histogram({
      name: 'analytics_ingest_duration_seconds',
      help: 'Time from receiving an ingest request (HTTP body read, gRPC batch decoded) to its answer',
      labelNames: ['face'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.commitLatency = new Histogram({
      name: 'analytics_log_commit_duration_seconds',
      help: 'Time for an append to the log to be committed (and flushed, in flush durability)',
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.snapshotDuration = new Histogram({
      name: 'analytics_snapshot_duration_seconds',
      help: 'Time to capture, serialize and durably write one snapshot',
      buckets: SNAPSHOT_BUCKETS,
      registers,
    });
    this.snapshotBytes = new Gauge({ name: 'analytics_snapshot_bytes', help: 'Size of the newest snapshot file', registers });
    const self = this;
    new Gauge({
      name: 'analytics_projects',
      help: 'Projects in the catalog',
      registers,
      collect() {
        this.set(self.stats().projects);
      },
    });
    new Gauge({
      name: 'analytics_live_days',
      help: 'Project-days held live in memory (exact sets; events may still arrive for them)',
      registers,
      collect() {
        this.set(self.stats().liveDays);
      },
    });
    new Gauge({
      name: 'analytics_awake_days',
      help: 'Live project-days with their tables on the heap (the others sleep on their encoded bytes until written or read)',
      registers,
      collect() {
        this.set(self.stats().awakeDays);
      },
    });
    new Gauge({
      name: 'analytics_sealed_days',
      help: 'Project-days sealed to storage (0 until days are sealed)',
      registers,
      collect() {
        this.set(self.stats().sealedDays);
      },
    });

    new Gauge({
      name: 'analytics_columns_open_events',
      help: 'Events in open column segments (on the heap until the next flush seals them)',
      registers,
      collect() {
        this.set(self.stats().columns.events);
      },
    });
    new Gauge({
      name: 'analytics_columns_open_bytes',
      help: 'Estimated heap bytes of open column segments (arrays, dictionaries, new ids); a flush seals them at OPEN_BYTES_BOUND',
      registers,
      collect() {
        this.set(self.stats().columns.bytes);
      },
    });
    new Gauge({
      name: 'analytics_columns_open_bytes_largest_project',
      help: 'Estimated heap bytes of the open column segments of the project holding most (a flush seals them at PROJECT_OPEN_BYTES)',
      registers,
      collect() {
        this.set(self.stats().columns.largestProjectBytes);
      },
    });
    let sealsSeen = sumOpenStats([]).seals;
    new Counter({
      name: 'analytics_columns_bound_flushes_total',
      help: 'Flushes of the open column segments caused by a bound before their interval, by bound (events, history, days, bytes, project_bytes)',
      labelNames: ['bound'],
      registers,
      collect() {
        const now = self.stats().columns.seals;
        for (const r of SEAL_REASONS) {
          const d = now[r] - sealsSeen[r];
          this.inc({ bound: r }, d > 0 ? d : 0);
        }
        sealsSeen = now;
      },
    });
  }

  /** The engine registers how to read its state; read at each scrape. */
  observeState(stats: () => StateStats): void {
    this.stats = stats;
  }

  request(face: Face, endpoint: string, outcome: string): void {
    this.requests.inc({ face, endpoint, outcome });
  }

  eventOutcomes(face: Face, counts: Record<string, number>): void {
    for (const [outcome, n] of Object.entries(counts)) if (n > 0) this.events.inc({ face, outcome }, n);
  }

  ingestSeconds(face: Face, seconds: number): void {
    this.ingestLatency.observe({ face }, seconds);
  }

  commitSeconds(seconds: number): void {
    this.commitLatency.observe(seconds);
  }

  /** At start: the newest snapshot already on disk, so the gauge is not 0 until the next one is written. */
  snapshotOnDisk(bytes: number): void {
    this.snapshotBytes.set(bytes);
  }

  snapshot(seconds: number, bytes: number): void {
    this.snapshotDuration.observe(seconds);
    this.snapshotBytes.set(bytes);
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
