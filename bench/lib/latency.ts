import * as hdr from 'hdr-histogram-js';

/** Latency percentiles in milliseconds, from an HDR histogram recorded in microseconds. */
export interface LatencySummary {
  count: number;
  p50: number;
  p90: number;
  p95: number;
  p99: number;
  max: number;
  mean: number;
}

/** 1 µs to 120 s at 3 significant digits: every latency this bench can see, at 0.1 % resolution. */
export function newHistogram(): hdr.Histogram {
  return hdr.build({ bitBucketSize: 32, lowestDiscernibleValue: 1, highestTrackableValue: 120_000_000, numberOfSignificantValueDigits: 3 });
}

export function summarize(h: hdr.Histogram): LatencySummary {
  const ms = (us: number) => Math.round(us) / 1000;
  return {
    count: h.totalCount,
    p50: ms(h.getValueAtPercentile(50)),
    p90: ms(h.getValueAtPercentile(90)),
    p95: ms(h.getValueAtPercentile(95)),
    p99: ms(h.getValueAtPercentile(99)),
    max: ms(h.maxValue),
    mean: ms(h.mean),
  };
}

/** Median of numbers (the middle round; the mean of the two middle ones for an even count). */
export function median(xs: number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** The round whose `key` is the median (for reporting one round's latency next to the median throughput). */
export function medianBy<T>(rounds: T[], key: (r: T) => number): T {
  const sorted = [...rounds].sort((a, b) => key(a) - key(b));
  return sorted[(sorted.length - 1) >> 1]!;
}
