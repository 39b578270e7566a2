import { open, type Database, type RootDatabase } from 'lmdb';
import { SealedStore } from './sealed-store.ts';

/** 1 TiB of address space: LMDB maps lazily, so this costs nothing until used and never needs a resize. */
const MAP_SIZE = 2 ** 40;
/** Tables of the copy: the sealed store's and the mirror's own, with room to spare. */
const MAX_DBS = 4;
/** The mirror's meta entry: the last revision of the bucket applied to this copy. */
const META_APPLIED = 'applied';

/**
 * A cluster node's local copy of the sealed rows (`nats/sealed.ts` mirrors the shared bucket into it): the
 * single-node SealedStore in an LMDB file of its own, and the last bucket revision applied, queued with the rows in
 * the same transactions so a restart resumes the watch there.
 */
export class SealedCopy {
  private constructor(
    private readonly root: RootDatabase,
    private readonly meta: Database<number, string>,
    /** the rows, read as on one node */
    readonly store: SealedStore,
  ) {}

  /** Opens (or creates) the copy in `file`; its folder must exist. */
  static open(file: string): SealedCopy {
    const root = open({ path: file, noSubdir: true, maxDbs: MAX_DBS, mapSize: MAP_SIZE });
    return new SealedCopy(root, root.openDB<number, string>({ name: 'mirror' }), new SealedStore(root));
  }

  /** The last bucket revision applied (0: none yet). */
  appliedRevision(): number {
    return this.meta.get(META_APPLIED) ?? 0;
  }

  /** Records `revision` as applied: a queued write, committed with the rows applied in the same turn. */
  markApplied(revision: number): void {
    void this.meta.put(META_APPLIED, revision);
  }

  close(): Promise<void> {
    return this.root.close();
  }
}
