import type { Catalog } from '../seams.ts';
import type { KeyRecord, ProjectRecord } from '../records.ts';
import type { LogStore } from './log-store.ts';

/**
 * The single-node Catalog: projects and key hashes in the LMDB environment, over LogStore's own methods (one
 * transaction each, as before). Changes only ever come from this process, so listeners hear them after the write.
 */
export class LmdbCatalog implements Catalog {
  private readonly listeners = new Set<(what: { kind: 'project' | 'key'; id: string }) => void>();

  constructor(private readonly store: LogStore) {}

  project(id: string): ProjectRecord | undefined {
    return this.store.getProject(id);
  }

  projects(): ProjectRecord[] {
    return this.store.listProjects();
  }

  key(hash: string): KeyRecord | undefined {
    return this.store.getKey(hash);
  }

  keys(projectId: string): Array<[string, KeyRecord]> {
    return this.store.listKeys(projectId);
  }

  async putProject(project: ProjectRecord, keyHashes: Array<[string, KeyRecord]>): Promise<void> {
    if (keyHashes.length === 0) await this.store.updateProject(project);
    else await this.store.putProject(project, keyHashes);
    this.emit('project', project.id);
  }

  async putKey(hash: string, record: KeyRecord): Promise<void> {
    await this.store.putKey(hash, record);
    this.emit('key', hash);
  }

  async deleteKey(hash: string): Promise<void> {
    await this.store.deleteKey(hash);
    this.emit('key', hash);
  }

  /** Deletes the project and its keys in one transaction and remembers it for erasure (see LogStore.deleteProject). */
  async deleteProject(projectId: string): Promise<void> {
    await this.store.deleteProject(projectId);
    this.emit('project', projectId);
  }

  async refreshKey(hash: string): Promise<KeyRecord | undefined> {
    return this.store.getKey(hash);
  }

  onChange(fn: (what: { kind: 'project' | 'key'; id: string }) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  private emit(kind: 'project' | 'key', id: string): void {
    for (const fn of this.listeners) fn({ kind, id });
  }
}
