import type { KV } from '@nats-io/kv';
import type { Salt } from '../records.ts';
import type { SharedSalts } from '../seams.ts';

/**
 * Daily salts shared by every node (CLUSTER.md §8), in the catalog bucket as `salt.<YYYY-MM-DD>`: the first node to
 * `kv.create` a day's salt wins and every other node reads the winner's, so all nodes derive the same anonymous
 * session ids. Removing a day purges its key (the salt's bytes leave the bucket; the file store may keep deleted
 * bytes until it compacts).
 */

const SALT = 'salt.';
const DAY = /^\d{4}-\d{2}-\d{2}$/;

function saltKey(day: string): string {
  if (!DAY.test(day)) throw new Error(`a salt's day is YYYY-MM-DD: ${day}`);
  return SALT + day;
}

export class KvSalts implements SharedSalts {
  constructor(readonly kv: KV) {}

  /** Every stored salt, oldest day first. */
  async load(): Promise<Salt[]> {
    const days: string[] = [];
    for await (const k of await this.kv.keys(`${SALT}*`)) days.push(k.slice(SALT.length));
    const out: Salt[] = [];
    for (const day of days.sort()) {
      const e = await this.kv.get(SALT + day);
      if (e && e.operation === 'PUT') out.push({ day, key: e.string() });
    }
    return out;
  }

  async createOrGet(salt: Salt): Promise<Salt> {
    const k = saltKey(salt.day);
    try {
      await this.kv.create(k, salt.key);
      return salt;
    } catch (err) {
      // another node's salt is there (or, rarely, one was purged meanwhile: then its marker blocks create, so write ours)
      const e = await this.kv.get(k);
      if (e && e.operation === 'PUT') return { day: salt.day, key: e.string() };
      if (!e) throw err;
      await this.kv.update(k, salt.key, e.revision).catch(() => {});
      const again = await this.kv.get(k);
      if (again && again.operation === 'PUT') return { day: salt.day, key: again.string() };
      throw err;
    }
  }

  async remove(day: string): Promise<void> {
    await this.kv.delete(saltKey(day)); // not purge: see NO_PURGE in kv-mirror.ts
  }
}
