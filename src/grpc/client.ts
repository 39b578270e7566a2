import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import type { DescMessage, MessageInitShape, MessageShape } from '@bufbuild/protobuf';
import { Client, Metadata, credentials as grpcCredentials } from '@grpc/grpc-js';
import type { ChannelCredentials, ChannelOptions, ClientDuplexStream, ServiceError } from '@grpc/grpc-js';
import { AnalyticsService } from '../gen/analytics/v1/analytics_pb.ts';
import type {
  CreateProjectResponse,
  GetMetricsResponse,
  GetRealtimeResponse,
  IngestResponse,
  IngestStreamRequestSchema,
  IngestStreamResponse,
  ListProjectsResponse,
} from '../gen/analytics/v1/analytics_pb.ts';
import { methodPath } from './service-definition.ts';

/**
 * A small typed client over grpc-js and the generated descriptors, for tests, benches and in-repo tools. External
 * backends can use it as a model, or any gRPC stack with proto/analytics/v1/analytics.proto.
 */

export interface AnalyticsClientOptions {
  /** API key sent as `authorization: Bearer <key>` unless a call names another; omit to call without one */
  key?: string | undefined;
  credentials?: ChannelCredentials;
  channelOptions?: ChannelOptions;
}

export interface CallOptions {
  /** overrides the client's key for this call; null sends no authorization */
  key?: string | null;
  /** milliseconds until the call is cancelled with DEADLINE_EXCEEDED */
  timeoutMs?: number;
}

type Method = (typeof AnalyticsService.method)[keyof typeof AnalyticsService.method];
type UnaryName = Exclude<keyof typeof AnalyticsService.method, 'ingestStream'>;
type StreamRequestInit = MessageInitShape<typeof IngestStreamRequestSchema>;

export class AnalyticsClient {
  readonly #client: Client;
  readonly #key: string | undefined;

  constructor(address: string, options: AnalyticsClientOptions = {}) {
    this.#client = new Client(address, options.credentials ?? grpcCredentials.createInsecure(), options.channelOptions);
    this.#key = options.key;
  }

  ingest(request: MessageInitShape<typeof AnalyticsService.method.ingest.input>, opts?: CallOptions): Promise<IngestResponse> {
    return this.#unary(AnalyticsService.method.ingest, request, opts);
  }

  getMetrics(
    request: MessageInitShape<typeof AnalyticsService.method.getMetrics.input> = {},
    opts?: CallOptions,
  ): Promise<GetMetricsResponse> {
    return this.#unary(AnalyticsService.method.getMetrics, request, opts);
  }

  getRealtime(
    request: MessageInitShape<typeof AnalyticsService.method.getRealtime.input> = {},
    opts?: CallOptions,
  ): Promise<GetRealtimeResponse> {
    return this.#unary(AnalyticsService.method.getRealtime, request, opts);
  }

  listProjects(opts?: CallOptions, page: MessageInitShape<typeof AnalyticsService.method.listProjects.input> = {}): Promise<ListProjectsResponse> {
    return this.#unary(AnalyticsService.method.listProjects, page, opts);
  }

  /** Any unary method by its local name (`updateProject`, `listKeys`, `revokeKey`, ...). */
  call<N extends UnaryName>(
    name: N,
    request: MessageInitShape<(typeof AnalyticsService.method)[N]['input']>,
    opts?: CallOptions,
  ): Promise<MessageShape<(typeof AnalyticsService.method)[N]['output']>> {
    return this.#unary(AnalyticsService.method[name], request as never, opts) as never;
  }

  createProject(
    request: MessageInitShape<typeof AnalyticsService.method.createProject.input>,
    opts?: CallOptions,
  ): Promise<CreateProjectResponse> {
    return this.#unary(AnalyticsService.method.createProject, request, opts);
  }

  /** A bidirectional stream: write one batch per message, read one acknowledgement per batch, in order. */
  ingestStream(opts?: CallOptions): ClientDuplexStream<StreamRequestInit, IngestStreamResponse> {
    const method = AnalyticsService.method.ingestStream;
    return this.#client.makeBidiStreamRequest(
      methodPath(method),
      (init: StreamRequestInit) => Buffer.from(toBinary(method.input, create(method.input, init))),
      (bytes: Buffer) => fromBinary(method.output, bytes),
      this.#metadata(opts),
      this.#callOptions(opts),
    );
  }

  close(): void {
    this.#client.close();
  }

  #metadata(opts: CallOptions | undefined): Metadata {
    const metadata = new Metadata();
    const key = opts?.key === undefined ? this.#key : opts.key;
    if (key !== null && key !== undefined) metadata.set('authorization', `Bearer ${key}`);
    return metadata;
  }

  #callOptions(opts: CallOptions | undefined): { deadline?: Date } {
    return opts?.timeoutMs === undefined ? {} : { deadline: new Date(Date.now() + opts.timeoutMs) };
  }

  #unary<M extends Method>(
    method: M,
    request: MessageInitShape<M['input']>,
    opts: CallOptions | undefined,
  ): Promise<MessageShape<M['output']>> {
    const input: DescMessage = method.input;
    const output: DescMessage = method.output;
    return new Promise((resolve, reject) => {
      this.#client.makeUnaryRequest(
        methodPath(method),
        (init: MessageInitShape<M['input']>) => Buffer.from(toBinary(input, create(input, init))),
        (bytes: Buffer) => fromBinary(output, bytes) as MessageShape<M['output']>,
        request,
        this.#metadata(opts),
        this.#callOptions(opts),
        (err: ServiceError | null, value?: MessageShape<M['output']>) => {
          if (err) reject(err);
          else if (value === undefined) reject(new Error(`${method.name} returned no message`));
          else resolve(value);
        },
      );
    });
  }
}
