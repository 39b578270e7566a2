import { jetstreamManager, DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager, type StreamConfig } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import { Objm } from '@nats-io/obj';
import type { NatsConnection } from '@nats-io/transport-node';
import { fnv1a32 } from '../../core/hash.ts';

/**
 * The JetStream resources of cluster mode (CLUSTER.md §2), created if absent by whichever node starts first and
 * opened by the others. Names are versioned and are never deleted and re-created: nats-server 2.9.10 can leave a
 * replica permanently stale after a same-name re-create and a crash. A change of shape is a new `_v2` resource.
 * `tag` gives every name a suffix, so each test (or a second deployment on one cluster) has its own resources.
 */

export interface ResourceNames {
  /** `ANALYTICS_EVENTS_v1` */
  stream: string;
  /** `analytics.v1.events` (a partition's subject is `<prefix>.<p>`) */
  eventSubjectPrefix: string;
  /** `analytics.v1.read` (forwarded reads for partition n: `<prefix>.<n>`, core NATS) */
  readSubjectPrefix: string;
  /** `analytics_catalog_v1`: projects, key hashes, salts, cluster.config */
  catalog: string;
  /** `analytics_owners_v1`: members, partition leases, ready marks */
  owners: string;
  /** `analytics_usage_v1`: folded counts per project and month (quota) */
  usage: string;
  /** `analytics_snapshots_v1` (object store) */
  snapshots: string;
  /** `analytics_sealed_v1`: sealed day segments and month rollups (sealed.ts) */
  sealed: string;
}

const TAG = /^[A-Za-z0-9_-]{1,32}$/;

export function resourceNames(tag?: string): ResourceNames {
  if (tag !== undefined && !TAG.test(tag)) throw new Error(`resource tag must match ${TAG}: ${tag}`);
  const t = tag === undefined ? '' : `_${tag}`;
  return {
    stream: `ANALYTICS_EVENTS_v1${t}`,
    eventSubjectPrefix: `analytics.v1${t}.events`,
    readSubjectPrefix: `analytics.v1${t}.read`,
    catalog: `analytics_catalog_v1${t}`,
    owners: `analytics_owners_v1${t}`,
    usage: `analytics_usage_v1${t}`,
    snapshots: `analytics_snapshots_v1${t}`,
    sealed: `analytics_sealed_v1${t}`,
  };
}

export function eventSubject(names: ResourceNames, partition: number): string {
  return `${names.eventSubjectPrefix}.${partition}`;
}

/** The partition of a project's events: fnv1a32(projectId) mod P (P fixed at cluster creation). */
export function partitionOf(projectId: string, partitions: number): number {
  return fnv1a32(projectId) % partitions;
}

/** Partitions of a new cluster: 16 spread over up to 16 owners and replay 4 at a time (§5) in ~1/16 of the time. */
export const DEFAULT_PARTITIONS = 16;
/** A partition number is a subject token and a 2-digit snapshot prefix (`p<nn>`). */
export const MAX_PARTITIONS = 100;
/** Three replicas: a quorum of two survives the loss of any one server. */
export const DEFAULT_REPLICAS = 3;
/**
 * Stream size cap when the operator gives none: fits the 20 GB `max_file_store` of deploy/nats/*.conf with room for
 * the buckets and snapshots. `discard: new` makes a full stream refuse writes (503) instead of dropping history.
 */
export const DEFAULT_MAX_STREAM_BYTES = 8 * 1024 ** 3;
/** JetStream's msg-id window for transport retries: above the 30 s publish deadline, below a costly id map. */
export const DUPLICATE_WINDOW_NS = 120e9;
/** One message is one ingest batch: a 1 MiB body, enriched, is at most ~2.1 MiB (servers: max_payload 4MB). */
export const MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
/** Catalog, owners, usage and sealed rows keep only the current value of a key (history is the log's job). */
const KV_HISTORY = 1;
const NS_PER_DAY = 86_400e9;

/** The catalog key holding the cluster's fixed shape. */
export const CLUSTER_CONFIG_KEY = 'cluster.config';

export interface ClusterConfig {
  partitions: number;
}

export interface ResourceOptions {
  /** suffix of every name (tests: a unique one each) */
  tag?: string;
  /** partitions when this start creates the cluster (later starts read `cluster.config`) */
  partitions?: number;
  /** stream `max_bytes` (ANALYTICS_MAX_STREAM_BYTES) */
  maxStreamBytes?: number;
  /** stream `max_age` in days (ANALYTICS_RETENTION_DAYS); absent: kept until max_bytes refuses writes */
  retentionDays?: number;
  /** 3 unless a single-server development cluster */
  replicas?: number;
}

export interface ClusterResources {
  names: ResourceNames;
  /** P, as stored in `cluster.config` (the first start decided it) */
  partitions: number;
  catalog: KV;
  owners: KV;
  usage: KV;
  sealed: KV;
}

function isAlreadyInUse(err: unknown): boolean {
  return err instanceof Error && /already in use/i.test(err.message);
}

/**
 * A JetStream cluster still forming (servers just started, a meta-leader election) answers creates with "no suitable
 * peers for placement" (without a reason such as insufficient storage), "temporarily unavailable" or a timeout:
 * asked again until RESOURCE_CREATE_DEADLINE_MS.
 */
function isForming(err: unknown): boolean {
  const m = err instanceof Error ? err.message : String(err);
  return (/no suitable peers for placement$/i.test(m.trim()) || /temporarily unavailable|timeout|jetstream is not enabled/i.test(m)) && !/insufficient/i.test(m);
}

/** How long resource creation waits for a forming JetStream cluster: servers started together elect within seconds. */
const RESOURCE_CREATE_DEADLINE_MS = 30_000;
/** Pause between creation attempts while the cluster forms. */
const RESOURCE_CREATE_RETRY_MS = 500;

async function whileForming<T>(fn: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + RESOURCE_CREATE_DEADLINE_MS;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (!isForming(err) || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, RESOURCE_CREATE_RETRY_MS));
    }
  }
}

function isNotFound(err: unknown): boolean {
  return err instanceof Error && (err.name === 'StreamNotFoundError' || /not found/i.test(err.message));
}

export function streamConfig(names: ResourceNames, opts: ResourceOptions = {}): Partial<StreamConfig> & { name: string } {
  const cfg: Partial<StreamConfig> & { name: string } = {
    name: names.stream,
    subjects: [`${names.eventSubjectPrefix}.*`],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    num_replicas: opts.replicas ?? DEFAULT_REPLICAS,
    duplicate_window: DUPLICATE_WINDOW_NS,
    max_msg_size: MAX_MESSAGE_BYTES,
    discard: DiscardPolicy.New,
    max_bytes: opts.maxStreamBytes ?? DEFAULT_MAX_STREAM_BYTES,
  };
  if (opts.retentionDays !== undefined) cfg.max_age = opts.retentionDays * NS_PER_DAY;
  return cfg;
}

/** Creates the event stream unless it exists (an existing one is used as it is: settings are changed by operators). */
function ensureStream(jsm: JetStreamManager, cfg: Partial<StreamConfig> & { name: string }): Promise<void> {
  return whileForming(() => ensureStreamOnce(jsm, cfg));
}

async function ensureStreamOnce(jsm: JetStreamManager, cfg: Partial<StreamConfig> & { name: string }): Promise<void> {
  try {
    await jsm.streams.info(cfg.name);
    return;
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  try {
    await jsm.streams.add(cfg);
  } catch (err) {
    // another node created it meanwhile (maybe with other limits): use theirs
    if (!isAlreadyInUse(err)) throw err;
    await jsm.streams.info(cfg.name);
  }
}

function ensureKv(kvm: Kvm, name: string, replicas: number): Promise<KV> {
  return whileForming(async () => {
    try {
      return await kvm.create(name, { replicas, history: KV_HISTORY, storage: StorageType.File });
    } catch (err) {
      if (!isAlreadyInUse(err)) throw err;
      return kvm.open(name);
    }
  });
}

/**
 * Creates what is absent (stream, the four KV buckets, the snapshot object store) and reads `cluster.config`,
 * writing it first if this is the cluster's first start (kv.create: one winner; the others read the winner's P).
 */
export async function ensureResources(nc: NatsConnection, opts: ResourceOptions = {}): Promise<ClusterResources> {
  const names = resourceNames(opts.tag);
  const replicas = opts.replicas ?? DEFAULT_REPLICAS;
  const wanted = opts.partitions ?? DEFAULT_PARTITIONS;
  if (!Number.isInteger(wanted) || wanted < 1 || wanted > MAX_PARTITIONS) throw new Error(`partitions must be an integer from 1 to ${MAX_PARTITIONS}: ${wanted}`);
  const kvm = new Kvm(nc);
  // each create is a Raft group election (R3 stream ~0.2–0.5 s, KV ~0.5–0.8 s): all at once
  const [, catalog, owners, usage, sealed] = await Promise.all([
    ensureEventStream(nc, opts),
    ensureKv(kvm, names.catalog, replicas),
    ensureKv(kvm, names.owners, replicas),
    ensureKv(kvm, names.usage, replicas),
    ensureKv(kvm, names.sealed, replicas),
    whileForming(() =>
      new Objm(nc).create(names.snapshots, { replicas, storage: StorageType.File }).catch((err: unknown) => {
        if (!isAlreadyInUse(err)) throw err;
      }),
    ),
  ]);
  const partitions = await clusterPartitions(catalog, wanted);
  return { names, partitions, catalog, owners, usage, sealed };
}

/** Only the event stream (tools and tests of the log alone); ensureResources creates it with the rest. */
export async function ensureEventStream(nc: NatsConnection, opts: ResourceOptions = {}): Promise<ResourceNames> {
  const names = resourceNames(opts.tag);
  await ensureStream(await jetstreamManager(nc), streamConfig(names, opts));
  return names;
}

/** P from `cluster.config`, stored as `wanted` if no node did so before. */
async function clusterPartitions(catalog: KV, wanted: number): Promise<number> {
  try {
    await catalog.create(CLUSTER_CONFIG_KEY, JSON.stringify({ partitions: wanted } satisfies ClusterConfig));
    return wanted;
  } catch (err) {
    const e = await catalog.get(CLUSTER_CONFIG_KEY);
    if (!e || e.operation !== 'PUT') throw err;
    const stored = e.json<ClusterConfig>();
    if (!Number.isInteger(stored.partitions) || stored.partitions < 1 || stored.partitions > MAX_PARTITIONS) {
      throw new Error(`${CLUSTER_CONFIG_KEY} holds an invalid partition count: ${JSON.stringify(stored)}`);
    }
    return stored.partitions;
  }
}
