/**
 * Privacy-preserving enrichment, called by the engine before the log append: traffic source, device, bot flag,
 * country and anonymous session ids. The client IP and the raw User-Agent go in and never come out: what leaves this
 * module is a country code, a device class, browser/OS names, a source name and a salted hash.
 */
export type { ClientFacts, DailySalt, Enricher, EnricherOptions, Enrichment, SaltStore } from './types.ts';
export { createEnricher } from './enricher.ts';
export { classifySource, DIRECT, type TrafficSource } from './traffic-source.ts';
export { clientIp } from './client-ip.ts';
export { UNKNOWN_COUNTRY } from './geo-country.ts';
