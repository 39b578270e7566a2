import { DailySalts } from './daily-salts.ts';
import { openCountryLookup, type CountryLookup } from './geo-country.ts';
import { normalizeIp } from './ip-address.ts';
import type { ClientFacts, Enricher, EnricherOptions, Enrichment } from './types.ts';
import { UserAgentClassifier } from './user-agent.ts';

/**
 * The Enricher: per-request classification (UA facts from the LRU, country from the mmdb) and anonymous session
 * ids under the daily salt. Holds no per-visitor state other than the UA cache; writes nothing but salts.
 */

export async function createEnricher(opts: EnricherOptions): Promise<Enricher> {
  // the database first: a bad ANALYTICS_GEO_DB should fail startup before anything is written
  const country = openCountryLookup(opts.geoDbPath);
  const salts = new DailySalts(opts.salts, { ahead: opts.saltsAhead === true });
  await salts.load();
  await salts.rotate(opts.now);
  return buildEnricher(country, salts);
}

/** Synchronous assembly from ready parts (benches and tests build it without a store round trip). */
export function buildEnricher(country: CountryLookup, salts: DailySalts): Enricher {
  const userAgents = new UserAgentClassifier();
  return {
    classify(client: ClientFacts): Enrichment {
      const ua = userAgents.classify(client.userAgent);
      const result: Enrichment = { bot: ua.bot, device: ua.device, country: country(normalizeIp(client.ip)) };
      if (ua.browser !== undefined) result.browser = ua.browser;
      if (ua.os !== undefined) result.os = ua.os;
      return result;
    },
    anonymousSessionId(projectId: string, client: ClientFacts, now: number): string {
      return salts.sessionId(projectId, normalizeIp(client.ip), client.userAgent, now);
    },
    rotateSalts(now: number): Promise<void> {
      return salts.rotate(now);
    },
  };
}
