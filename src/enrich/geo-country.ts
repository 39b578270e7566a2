import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Reader, type CountryResponse } from 'maxmind';
import { isNonPublicAddress } from './ip-address.ts';

/**
 * IP → country from an .mmdb file, read into memory once (one synchronous read at startup, no network, no file
 * watching). Addresses are not cached (that would keep visitors' IPs in memory, and the tree walk is cheap); the
 * decoded records at the tree's leaves are.
 */

export const UNKNOWN_COUNTRY = 'Unknown';

/** the database shipped as an npm dependency (ip-location-db geo-whois-asn-country: NRO data, CC BY 4.0) */
export const DEFAULT_GEO_DB_MODULE = '@ip-location-db/geo-whois-asn-country-mmdb/geo-whois-asn-country.mmdb';

const ISO_ALPHA2 = /^[A-Z]{2}$/;

/**
 * Decoded mmdb records kept by data-section offset: a country database has ~250 distinct records, so this holds all
 * of them (it halves a lookup, ~1.2 → ~0.5 µs), and bounds memory for a city database.
 */
export const GEO_RECORD_CACHE_SIZE = 1000;

/**
 * The decoder's cache: a Map emptied when full. Not an LRU: with a country database it never fills, and a hit must
 * cost less than the decoding it saves (an LRU's delete-and-reinsert per hit ate the gain).
 */
class RecordCache {
  readonly #records = new Map<string | number, unknown>();
  get(offset: string | number): unknown {
    return this.#records.get(offset);
  }
  set(offset: string | number, record: unknown): void {
    if (this.#records.size >= GEO_RECORD_CACHE_SIZE) this.#records.clear();
    this.#records.set(offset, record);
  }
}

export type CountryLookup = (ip: string) => string;

/** Path of the shipped database, or undefined when the package is not installed. */
export function defaultGeoDbPath(): string | undefined {
  try {
    return createRequire(import.meta.url).resolve(DEFAULT_GEO_DB_MODULE);
  } catch {
    return undefined;
  }
}

/**
 * A country lookup over `path`, or over the shipped database when `path` is undefined. An explicitly configured file
 * that cannot be read or parsed throws (a misconfiguration should stop startup); a missing shipped database yields a
 * lookup that always answers 'Unknown' (CONTRACT: Unknown when no database is configured).
 */
export function openCountryLookup(path: string | undefined): CountryLookup {
  const file = path ?? defaultGeoDbPath();
  if (file === undefined) return () => UNKNOWN_COUNTRY;
  // CountryResponse is only the nominal type; records are read defensively in countryOf
  let reader: Reader<CountryResponse>;
  try {
    reader = new Reader(readFileSync(file), { cache: new RecordCache() });
  } catch (cause) {
    throw new Error(`cannot open the IP-to-country database ${file}: ${cause instanceof Error ? cause.message : String(cause)}`, {
      cause,
    });
  }
  return (ip) => {
    // Private ranges first: the database is not trusted to leave them empty (the shipped one maps parts of
    // 192.168.0.0/16 to a country), and it saves the lookup for the many internal callers.
    if (isNonPublicAddress(ip)) return UNKNOWN_COUNTRY;
    return countryOf(reader.get(ip));
  };
}

/**
 * The record shapes we understand: ip-location-db writes `{ country_code }`; MaxMind GeoLite2/GeoIP2 Country and
 * DB-IP Lite write `{ country: { iso_code } }`, with `registered_country` as the fallback (anycast, satellite).
 */
function countryOf(record: unknown): string {
  const code =
    field(record, 'country_code') ??
    field(field(record, 'country'), 'iso_code') ??
    field(field(record, 'registered_country'), 'iso_code');
  if (typeof code !== 'string') return UNKNOWN_COUNTRY;
  const upper = code.toUpperCase();
  return ISO_ALPHA2.test(upper) ? upper : UNKNOWN_COUNTRY;
}

function field(value: unknown, key: string): unknown {
  return typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[key] : undefined;
}
