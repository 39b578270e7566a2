import { toBinary } from '@bufbuild/protobuf';
import type { DescMethod, DescService, Message } from '@bufbuild/protobuf';
import type { MethodDefinition, ServiceDefinition } from '@grpc/grpc-js';

/**
 * grpc-js service definitions built from the protobuf-es descriptors, so the wire format is exactly what
 * `buf generate` produced from proto/ and there is no second schema loader at runtime.
 */

/** The HTTP/2 path of a method: `/analytics.v1.AnalyticsService/Ingest`. */
export function methodPath(method: DescMethod): string {
  return `/${method.parent.typeName}/${method.name}`;
}

function passBytes(bytes: Buffer): Buffer {
  return bytes;
}

/**
 * The server side. Requests stay bytes until the handler decodes them: a stream's read-ahead buffer then holds
 * compact wire bytes rather than decoded batches, and garbage becomes INVALID_ARGUMENT in the handler instead of
 * the INTERNAL status grpc-js sends when a deserializer throws.
 */
export function serverDefinition(service: DescService): ServiceDefinition {
  const definition: Record<string, MethodDefinition<Buffer, Message>> = {};
  for (const method of service.methods) {
    const output = method.output;
    definition[method.localName] = {
      path: methodPath(method),
      originalName: method.name,
      requestStream: method.methodKind === 'client_streaming' || method.methodKind === 'bidi_streaming',
      responseStream: method.methodKind === 'server_streaming' || method.methodKind === 'bidi_streaming',
      requestSerialize: passBytes,
      requestDeserialize: passBytes,
      responseSerialize: (message: Message) => Buffer.from(toBinary(output, message)),
      responseDeserialize: () => {
        throw new Error('the server never deserializes its own responses');
      },
    };
  }
  return definition;
}
