import { create } from '@bufbuild/protobuf';
import type { DescMessage, Message, MessageShape } from '@bufbuild/protobuf';
import { Server, ServerCredentials, status } from '@grpc/grpc-js';
import type { ServerUnaryCall, sendUnaryData } from '@grpc/grpc-js';
import { createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import {
  AnalyticsService,
  CreateGoalRequestSchema,
  CreateKeyRequestSchema,
  DeleteGoalRequestSchema,
  DeleteGoalResponseSchema,
  ListGoalsRequestSchema,
  QueryFunnelRequestSchema,
  QueryRequestSchema,
  CreateProjectRequestSchema,
  DeleteProjectRequestSchema,
  DeleteProjectResponseSchema,
  GetMetricsRequestSchema,
  GetRealtimeRequestSchema,
  ListKeysRequestSchema,
  RevokeKeyRequestSchema,
  RevokeKeyResponseSchema,
  UpdateKeyRequestSchema,
  UpdateKeyResponseSchema,
  UpdateProjectRequestSchema,
  IngestRequestSchema,
  IngestResponseSchema,
  ListProjectsRequestSchema,
  file_analytics_v1_analytics,
} from '../gen/analytics/v1/analytics_pb.ts';
import { file_grpc_health_v1_health } from '../gen/grpc/health/v1/health_pb.ts';
import { MAX_BODY_BYTES } from '../core/limits.ts';
import type { OperatorMetrics } from '../engine/operator-metrics.ts';
import type { AnalyticsEngine, Outcome, RequestMeta } from '../engine/types.ts';
import { CONNECTION_LIMITS, ConnectionGuard } from '../net/connection-guard.ts';
import { addHealthService } from './health-service.ts';
import { ingestStreamHandler } from './ingest-stream.ts';
import type { StreamDrain } from './ingest-stream.ts';
import { createdGoalMessage, funnelBody, funnelMessage, goalBody, goalsMessage, queryBody, queryMessage } from './questions.ts';
import { addLazyReflection, reflectionPackage } from './reflection.ts';
import { requestMeta } from './request-meta.ts';
import { createKeyBody, createProjectBody, decode, eventsToPlain, metricsQuery, realtimeQuery, updateProjectBody } from './request-to-plain.ts';
import {
  createdKeyMessage,
  createdProjectMessage,
  keysMessage,
  metricsMessage,
  projectsMessage,
  realtimeMessage,
  updatedProjectMessage,
} from './response-messages.ts';
import { serverDefinition } from './service-definition.ts';
import { rateMetadata, toStatus } from './status.ts';

/**
 * The gRPC face: AnalyticsService over the same engine as HTTP, plus grpc.health.v1.Health and server reflection
 * on the same port. Handlers decode, convert to the plain objects HTTP would send, call the engine, and map the
 * Outcome with the one mapping in status.ts.
 */

/** CONTRACT: a request message is capped like an HTTP body (grpc-js answers RESOURCE_EXHAUSTED above it). */
const MAX_RECEIVE_MESSAGE_BYTES = MAX_BODY_BYTES;
/**
 * Calls open at once per connection (grpc-js sets no limit). A paused stream holds at most its 16-message read-ahead,
 * so input buffered for one connection is bounded (≤ 128 × 16 MiB in theory; a stream flooding 600 batches of
 * 0.9 MiB measured < 100 MiB of server heap), and 128 is far more concurrency than a backend's pipeline needs.
 */
const MAX_CONCURRENT_STREAMS = 128;
/** close() without a grace period: enough for in-flight batches to commit (one LMDB commit is milliseconds). */
const DEFAULT_GRACE_MS = 5_000;
/** The HTTP/2 client preface ('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'): a client sends it before anything else. */
const HTTP2_PREFACE_BYTES = 24;

export interface GrpcServerOptions {
  host: string;
  port: number;
  quiet?: boolean;
  /** operator metrics (METRICS_PORT set); absent = none recorded */
  ops?: OperatorMetrics | undefined;
  /** connection caps and the handshake deadline (tests use small ones); absent = CONNECTION_LIMITS */
  maxConnections?: number;
  maxConnectionsPerIp?: number;
  handshakeMs?: number;
}

export interface RunningGrpc {
  port: number;
  guard: ConnectionGuard;
  close(graceMs?: number): Promise<void>;
}

type UnaryHandler = (call: ServerUnaryCall<Buffer, Message>, callback: sendUnaryData<Message>) => void;

/** Which engine gate a request passes before a wire error is reported (as HTTP does for a body it cannot parse). */
type Gate = 'ingest' | 'manage' | 'read';

function unary<I extends DescMessage, O extends Message>(
  engine: AnalyticsEngine,
  input: I,
  gate: Gate,
  run: (request: MessageShape<I>, meta: RequestMeta) => Outcome<O> | Promise<Outcome<O>>,
  onFault: (err: unknown) => void,
  ops?: OperatorMetrics,
): UnaryHandler {
  // The method name, e.g. "analytics.v1.AnalyticsService.Ingest" → "Ingest".
  const endpoint = input.typeName.replace(/^.*\./, '').replace(/Request$/, '');
  return (call, callback) => {
    Promise.resolve()
      .then(() => {
        const meta = requestMeta(call);
        const request = decode(input, call.request);
        // A bad key or an exhausted rate limit wins over bad bytes, and the refusal carries RateLimit trailers.
        return request.ok ? run(request.value, meta) : engine.refuse(meta, gate, request.error);
      })
      .then(
        (outcome) => {
          ops?.request('grpc', endpoint, outcome.ok ? 'ok' : outcome.error.code);
          if (outcome.ok) callback(null, outcome.value, rateMetadata(outcome.rate));
          else callback(toStatus(outcome.error, outcome.rate));
        },
        (err: unknown) => {
          ops?.request('grpc', endpoint, 'internal');
          onFault(err);
          callback({ code: status.INTERNAL, details: 'internal error' });
        },
      );
  };
}

function withValue<T, O>(outcome: Outcome<T>, toMessage: (value: T) => O): Outcome<O> {
  return outcome.ok ? { ok: true, value: toMessage(outcome.value), ...(outcome.rate ? { rate: outcome.rate } : {}) } : outcome;
}

function listenAddress(host: string, port: number): string {
  return `${host.includes(':') && !host.startsWith('[') ? `[${host}]` : host}:${port}`;
}

export async function startGrpcServer(engine: AnalyticsEngine, opts: GrpcServerOptions): Promise<RunningGrpc> {
  // Faults are logged even when quiet: they are bugs, and the caller only ever sees "internal error".
  const onFault = (err: unknown): void => console.error('grpc handler fault:', err);
  const streams = new Set<StreamDrain>();

  const server = new Server({
    'grpc.max_receive_message_length': MAX_RECEIVE_MESSAGE_BYTES,
    'grpc.max_concurrent_streams': MAX_CONCURRENT_STREAMS,
  });
  server.addService(serverDefinition(AnalyticsService), {
    ingest: unary(
      engine,
      IngestRequestSchema,
      'ingest',
      async (req, meta) => {
        const events = eventsToPlain(req.events);
        if (!events.ok) return engine.refuse(meta, 'ingest', events.error);
        const ack = await engine.ingest(meta, events.value);
        return withValue(ack, (a) => create(IngestResponseSchema, { accepted: a.accepted, ts: BigInt(a.ts) }));
      },
      onFault,
      opts.ops,
    ),
    ingestStream: ingestStreamHandler(engine, streams, onFault, opts.ops),
    // Metrics has no gate of its own for wire errors; 'manage' admits the same keys (admin, sk_) as a metrics read.
    getMetrics: unary(
      engine,
      GetMetricsRequestSchema,
      'manage',
      async (req, meta) => withValue(await engine.metrics(meta, metricsQuery(req)), metricsMessage),
      onFault,
      opts.ops,
    ),
    getRealtime: unary(
      engine,
      GetRealtimeRequestSchema,
      'manage',
      async (req, meta) => withValue(await engine.realtime(meta, realtimeQuery(req)), realtimeMessage),
      onFault,
    ),
    listProjects: unary(
      engine,
      ListProjectsRequestSchema,
      'manage',
      (req, meta) =>
        withValue(engine.listProjects(meta, { limit: req.limit === 0 ? undefined : req.limit, cursor: req.cursor === '' ? undefined : req.cursor }), projectsMessage),
      onFault,
      opts.ops,
    ),
    createProject: unary(
      engine,
      CreateProjectRequestSchema,
      'manage',
      async (req, meta) => withValue(await engine.createProject(meta, createProjectBody(req)), createdProjectMessage),
      onFault,
      opts.ops,
    ),
    updateProject: unary(
      engine,
      UpdateProjectRequestSchema,
      'manage',
      async (req, meta) => withValue(await engine.updateProject(meta, req.projectId, updateProjectBody(req)), updatedProjectMessage),
      onFault,
      opts.ops,
    ),
    deleteProject: unary(
      engine,
      DeleteProjectRequestSchema,
      'manage',
      async (req, meta) => withValue(await engine.deleteProject(meta, req.projectId), () => create(DeleteProjectResponseSchema)),
      onFault,
      opts.ops,
    ),
    listKeys: unary(engine, ListKeysRequestSchema, 'manage', (req, meta) => withValue(engine.listKeys(meta, req.projectId), keysMessage), onFault, opts.ops),
    createKey: unary(
      engine,
      CreateKeyRequestSchema,
      'manage',
      async (req, meta) => withValue(await engine.createKey(meta, req.projectId, createKeyBody(req)), createdKeyMessage),
      onFault,
      opts.ops,
    ),
    updateKey: unary(
      engine,
      UpdateKeyRequestSchema,
      'manage',
      async (req, meta) =>
        withValue(await engine.updateKey(meta, req.projectId, req.keyId, { expires_at: req.expiresAt }), (k) =>
          create(UpdateKeyResponseSchema, { key: { id: k.id, type: k.type, hint: k.hint, createdAt: k.created_at, expiresAt: k.expires_at ?? '' } }),
        ),
      onFault,
      opts.ops,
    ),
    revokeKey: unary(
      engine,
      RevokeKeyRequestSchema,
      'manage',
      async (req, meta) => withValue(await engine.revokeKey(meta, req.projectId, req.keyId), () => create(RevokeKeyResponseSchema)),
      onFault,
      opts.ops,
    ),
    query: unary(engine, QueryRequestSchema, 'read', async (req, meta) => withValue(await engine.query(meta, queryBody(req)), queryMessage), onFault, opts.ops),
    queryFunnel: unary(
      engine,
      QueryFunnelRequestSchema,
      'read',
      async (req, meta) => withValue(await engine.funnel(meta, funnelBody(req)), funnelMessage),
      onFault,
      opts.ops,
    ),
    listGoals: unary(engine, ListGoalsRequestSchema, 'read', async (req, meta) => withValue(await engine.listGoals(meta, req.projectId), goalsMessage), onFault, opts.ops),
    createGoal: unary(
      engine,
      CreateGoalRequestSchema,
      'manage',
      async (req, meta) => withValue(await engine.createGoal(meta, req.projectId, goalBody(req)), createdGoalMessage),
      onFault,
      opts.ops,
    ),
    deleteGoal: unary(
      engine,
      DeleteGoalRequestSchema,
      'manage',
      async (req, meta) => withValue(await engine.deleteGoal(meta, req.projectId, req.goalId), () => create(DeleteGoalResponseSchema)),
      onFault,
      opts.ops,
    ),
  });

  // '' is the whole server, as health-checking clients ask by default.
  const health = addHealthService(server, ['', AnalyticsService.typeName]);
  addLazyReflection(server, () => reflectionPackage([file_analytics_v1_analytics, file_grpc_health_v1_health]));

  // grpc-js hides its sockets and has no handshake deadline, so the face owns the TCP listener: each connection passes
  // the guard (caps, and the HTTP/2 preface within the deadline) before it is handed to grpc-js.
  const injector = server.createConnectionInjector(ServerCredentials.createInsecure());
  const guard = new ConnectionGuard(
    {
      maxOpen: opts.maxConnections ?? CONNECTION_LIMITS.maxOpen,
      maxPerIp: opts.maxConnectionsPerIp ?? CONNECTION_LIMITS.maxPerIp,
      handshakeMs: opts.handshakeMs ?? CONNECTION_LIMITS.handshakeMs,
    },
    // HTTP/2 has no answer before the preface: a refused client sees the connection closed (gRPC UNAVAILABLE)
    (socket) => socket.destroy(),
  );
  // A connection is handed over once its first bytes hold the preface; until then it is a plain socket the guard can
  // close (once grpc-js owns it, destroying the net.Socket no longer closes the fd). Node's HTTP/2 session reads
  // what was put back with unshift() first.
  const injected = new WeakSet<Socket>();
  const prefaced = (socket: Socket) => injected.has(socket);
  const listener = createNetServer((socket) => {
    if (!guard.admit(socket, prefaced)) return;
    const head: Buffer[] = [];
    let bytes = 0;
    const onData = (chunk: Buffer) => {
      head.push(chunk);
      bytes += chunk.length;
      if (bytes < HTTP2_PREFACE_BYTES) return;
      socket.off('data', onData);
      socket.pause();
      socket.unshift(head.length === 1 ? head[0]! : Buffer.concat(head, bytes));
      injected.add(socket);
      // grpc-js owns it from here and the guard can no longer close it: never a candidate to make room
      guard.note(socket, 'busy');
      injector.injectConnection(socket);
    };
    socket.on('data', onData);
    socket.on('error', () => {}); // a reset before the handshake is the client's business
  });
  const port = await new Promise<number>((resolve, reject) => {
    listener.once('error', reject);
    listener.listen(opts.port, opts.host, () => {
      listener.off('error', reject);
      resolve((listener.address() as AddressInfo).port);
    });
  });
  if (opts.quiet !== true) console.log(`gRPC listening on ${listenAddress(opts.host, port)}`);

  let closing: Promise<void> | undefined;
  return {
    port,
    guard,
    close(graceMs = DEFAULT_GRACE_MS) {
      closing ??= new Promise<void>((resolve) => {
        listener.close();
        health.stopServing();
        // Connections that never completed the preface have no call to finish.
        guard.destroyAll(prefaced);
        // Streams stay open until their client ends them; ask each to stop after its current batch's ack.
        for (const stream of [...streams]) stream.stop();
        const done = () => {
          clearTimeout(force);
          injector.destroy();
          guard.destroyAll();
          resolve();
        };
        const force = setTimeout(() => {
          server.forceShutdown();
          done();
        }, graceMs);
        server.tryShutdown(done);
      });
      return closing;
    },
  };
}
