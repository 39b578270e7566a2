import { create, fromBinary } from '@bufbuild/protobuf';
import { status as grpcStatus } from '@grpc/grpc-js';
import type { Server, ServerUnaryCall, ServerWritableStream, sendUnaryData } from '@grpc/grpc-js';
import {
  Health,
  HealthCheckRequestSchema,
  HealthCheckResponseSchema,
  HealthCheckResponse_ServingStatus as ServingStatus,
  HealthListResponseSchema,
} from '../gen/grpc/health/v1/health_pb.ts';
import type { HealthCheckResponse, HealthListResponse } from '../gen/grpc/health/v1/health_pb.ts';
import { serverDefinition } from './service-definition.ts';

/**
 * grpc.health.v1.Health from our generated descriptors (a health library would parse health.proto with a second
 * schema loader at every start). Check answers a known name's status and NOT_FOUND for any other; Watch sends the
 * current status at once (SERVICE_UNKNOWN for an unknown name) and then each change; List answers every name's.
 *
 * At shutdown every Watch call gets NOT_SERVING and is then ended. A Watch never ends by itself, so without this one
 * watching client (a load balancer, a probe) would hold tryShutdown open until the grace period runs out and calls
 * are cancelled.
 */

type WatchCall = ServerWritableStream<Buffer, HealthCheckResponse>;

export interface HealthHandle {
  /** NOT_SERVING for every name, then ends open Watch calls (after that update is written). */
  stopServing(): void;
}

const NOT_A_REQUEST = `request is not a valid ${HealthCheckRequestSchema.typeName} message`;

/** The name a request asks about, or undefined for bytes that are not a HealthCheckRequest. */
function askedName(bytes: Uint8Array): string | undefined {
  try {
    return fromBinary(HealthCheckRequestSchema, bytes).service;
  } catch {
    return undefined;
  }
}

function answer(status: ServingStatus): HealthCheckResponse {
  return create(HealthCheckResponseSchema, { status });
}

export function addHealthService(server: Pick<Server, 'addService'>, names: readonly string[]): HealthHandle {
  const statuses = new Map<string, ServingStatus>(names.map((name) => [name, ServingStatus.SERVING]));
  /** Open Watch calls and the name each watches. */
  const watches = new Map<WatchCall, string>();
  let stopped = false;

  const setStatus = (name: string, status: ServingStatus) => {
    if (statuses.get(name) === status) return;
    statuses.set(name, status);
    for (const [call, watched] of watches) if (watched === name) call.write(answer(status));
  };

  server.addService(serverDefinition(Health), {
    check(call: ServerUnaryCall<Buffer, HealthCheckResponse>, callback: sendUnaryData<HealthCheckResponse>) {
      const name = askedName(call.request);
      if (name === undefined) return callback({ code: grpcStatus.INVALID_ARGUMENT, details: NOT_A_REQUEST });
      const status = statuses.get(name);
      if (status === undefined) callback({ code: grpcStatus.NOT_FOUND, details: `Health status unknown for service ${name}` });
      else callback(null, answer(status));
    },
    list(_call: ServerUnaryCall<Buffer, HealthListResponse>, callback: sendUnaryData<HealthListResponse>) {
      callback(null, create(HealthListResponseSchema, { statuses: Object.fromEntries([...statuses].map(([name, status]) => [name, answer(status)])) }));
    },
    watch(call: WatchCall) {
      const name = askedName(call.request);
      if (name === undefined) {
        call.emit('error', { code: grpcStatus.INVALID_ARGUMENT, details: NOT_A_REQUEST });
        return;
      }
      call.write(answer(statuses.get(name) ?? ServingStatus.SERVICE_UNKNOWN));
      // A Watch that arrives while the server stops has had its last update.
      if (stopped) {
        call.end();
        return;
      }
      watches.set(call, name);
      call.on('cancelled', () => watches.delete(call));
    },
  });

  return {
    stopServing() {
      stopped = true;
      for (const name of names) setStatus(name, ServingStatus.NOT_SERVING);
      for (const call of watches.keys()) call.end();
      watches.clear();
    },
  };
}
