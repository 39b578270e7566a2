import { createHmac, randomBytes } from 'node:crypto';
import { DAY_MS, dayOf, isValidDate, utcMidnight } from '../core/dates.ts';
import type { DailySalt, SaltStore } from './types.ts';

/**
 * Daily salts and the anonymous session ids keyed by them.
 *
 * One random salt per UTC day. A visitor without a sessionId gets HMAC-SHA-256(salt of today, project ‖ IP ‖ UA):
 * the same visitor on the same day maps to the same id, and once the salt is deleted nobody (us included) can link
 * an id back to an IP or across days, because the salt was never derived from anything. The IP and UA are inputs
 * of one hash and are not kept.
 */

/** 256-bit keys: the full strength of HMAC-SHA-256 */
export const SALT_BYTES = 32;
/** CONTRACT Privacy: a salt is discarded 48 hours after its day began (so today's and yesterday's exist) */
export const SALT_RETENTION_MS = 48 * 60 * 60 * 1000;
/** 128 bits: distinct visitors of a project-day never collide in practice (birthday bound ~2^64), 22 chars in the log */
export const SESSION_ID_BYTES = 16;

const KEY_FORMAT = new RegExp(`^[0-9a-f]{${SALT_BYTES * 2}}$`);

const utcDay = (ms: number): string => dayOf(ms, 'UTC');

export class DailySalts {
  readonly #store: SaltStore;
  readonly #salts = new Map<string, Buffer>();
  /** bumped on every change of the set; the store holds version #saved */
  #version = 0;
  #saved = 0;
  /** saves run one after another, so an older set never overwrites a newer one */
  #chain: Promise<void> = Promise.resolve();
  // the current day, so the per-request path is one comparison and one HMAC
  #dayStart = Number.NaN;
  #dayEnd = Number.NaN;
  #dayKey: Buffer | undefined;

  readonly #ahead: boolean;

  /** `ahead`: rotations also create tomorrow's salt (cluster: the shared store settles it long before midnight) */
  constructor(store: SaltStore, opts: { ahead?: boolean } = {}) {
    this.#store = store;
    this.#ahead = opts.ahead === true;
  }

  /** Read the persisted salts; malformed entries are dropped (and the store is rewritten at the next rotation). */
  async load(): Promise<void> {
    const stored = await this.#store.load();
    for (const { day, key } of stored) {
      if (isValidDate(day) && KEY_FORMAT.test(key)) {
        this.#salts.set(day, Buffer.from(key, 'hex'));
      } else {
        this.#version++;
      }
    }
    this.#forgetCurrentDay();
  }

  /** Ensure today's salt, delete expired ones, persist when anything changed. */
  async rotate(now: number): Promise<void> {
    this.#ensure(utcDay(now));
    if (this.#ahead) this.#ensure(utcDay(now + DAY_MS));
    this.#prune(now);
    await this.#persist();
  }

  sessionId(projectId: string, ip: string, userAgent: string, now: number): string {
    const key = now >= this.#dayStart && now < this.#dayEnd && this.#dayKey !== undefined ? this.#dayKey : this.#enterDay(now);
    // length prefixes keep the fields apart: ("ab","c") and ("a","bc") must not hash alike
    return createHmac('sha256', key)
      .update(`${projectId.length}:${projectId}${ip.length}:${ip}${userAgent}`)
      .digest()
      .toString('base64url', 0, SESSION_ID_BYTES);
  }

  /** the stored form of the current set, oldest day first */
  snapshot(): DailySalt[] {
    return [...this.#salts.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([day, key]) => ({ day, key: key.toString('hex') }));
  }

  /**
   * First request of a new UTC day (or after a rotation). Done synchronously so no request waits for I/O; the new
   * salt is persisted in the background, and a failed save is repeated by the next rotate(), which saves the whole set.
   */
  #enterDay(now: number): Buffer {
    const day = utcDay(now);
    const key = this.#ensure(day);
    this.#prune(now);
    this.#dayStart = utcMidnight(day);
    this.#dayEnd = this.#dayStart + DAY_MS;
    this.#dayKey = key;
    if (this.#version !== this.#saved) this.#persist().catch(() => undefined);
    return key;
  }

  #ensure(day: string): Buffer {
    let key = this.#salts.get(day);
    if (key === undefined) {
      key = randomBytes(SALT_BYTES);
      this.#salts.set(day, key);
      this.#version++;
    }
    return key;
  }

  #prune(now: number): void {
    for (const day of [...this.#salts.keys()]) {
      if (utcMidnight(day) + SALT_RETENTION_MS <= now) {
        this.#salts.get(day)?.fill(0); // best effort: the discarded key does not linger in this process's memory
        this.#salts.delete(day);
        this.#version++;
      }
    }
    if (this.#dayKey !== undefined && !this.#salts.has(utcDay(this.#dayStart))) this.#forgetCurrentDay();
  }

  #forgetCurrentDay(): void {
    this.#dayStart = Number.NaN;
    this.#dayEnd = Number.NaN;
    this.#dayKey = undefined;
  }

  #persist(): Promise<void> {
    const run = this.#chain.then(() => this.#flush());
    this.#chain = run.catch(() => undefined);
    return run;
  }

  async #flush(): Promise<void> {
    if (this.#version === this.#saved) return;
    const version = this.#version;
    const held = await this.#store.save(this.snapshot());
    this.#saved = version;
    // A shared store keeps the first salt written for a day: take the winner's, so every node derives the same ids.
    if (held) {
      for (const { day, key } of held) {
        const mine = this.#salts.get(day);
        if (mine !== undefined && mine.toString('hex') !== key && KEY_FORMAT.test(key)) this.#salts.set(day, Buffer.from(key, 'hex'));
      }
      this.#forgetCurrentDay();
    }
  }
}
