import type { ErasedRecord } from '../core/types.ts';
import type { Goal } from '../core/query/types.ts';

/**
 * The stored records of the domain, the same in both modes: a project, a key (stored by its hash), a day's salt, and
 * the marker a reader sees in place of an erased event. Each storage side (`lmdb/`, `nats/`) stores these as they are.
 */

export interface ProjectRecord {
  id: string;
  name: string;
  ownerId: string;
  allowedOrigins: string[];
  allowedReferrers: string[];
  timezone: string;
  monthlyQuota: number;
  createdAt: number;
  /** per-project token-bucket overrides (requests/s and burst); absent = service defaults */
  rate?: { perKey?: number; burstPerKey?: number; perIp?: number; burstPerIp?: number };
  /** eventParams keys counted per value (PATCH or create) */
  trackedProps?: string[];
  /** the project's goals (POST /projects/{id}/goals), kept with the project so both catalogs store them and a delete erases them */
  goals?: Goal[];
  /** the site's host name (lower case), unique in the service: Plausible's Events API names a site by it (POST /api/event) */
  domain?: string;
}

export type KeyKind = 'admin' | 'secret' | 'publishable' | 'read';

export interface KeyRecord {
  kind: KeyKind;
  /** absent for admin keys */
  projectId?: string;
  ownerId: string;
  createdAt: number;
  /** public id of the key (`key_...`); keys stored before ids existed get one derived from their hash */
  id?: string;
  /** `sk_…abcd`: the prefix and last four characters, to tell keys apart in a list */
  hint?: string;
  /** ms since epoch after which the key answers 401; absent = never */
  expiresAt?: number;
}

/** A log entry whose event was erased (its project was deleted): it keeps the sequence, not the data. */
export const ERASED: ErasedRecord = { t: 'x' };

export interface Salt {
  day: string;
  key: string;
}
