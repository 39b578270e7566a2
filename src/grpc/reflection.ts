import { toBinary } from '@bufbuild/protobuf';
import type { DescFile } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import type { ReflectionService } from '@grpc/reflection';
import { service as healthService } from 'grpc-health-check';

/**
 * @grpc/reflection reads the `fileDescriptorProtos` of a proto-loader package definition. The generated code
 * already embeds those descriptors, so we hand them over directly instead of parsing proto/ again at runtime
 * (which would need the .proto files next to the running code and a second loader).
 */
type PackageDefinition = ConstructorParameters<typeof ReflectionService>[0];

function withDependencies(file: DescFile, into: Map<string, DescFile>): Map<string, DescFile> {
  if (!into.has(file.name)) {
    into.set(file.name, file);
    for (const dependency of file.dependencies) withDependencies(dependency, into);
  }
  return into;
}

/**
 * Everything reflection describes: our file and its imports, plus grpc.health.v1 (grpc-health-check builds its
 * definition with proto-loader, whose message definitions carry the descriptors), so `grpcurl list` shows both.
 */
export function reflectionPackage(file: DescFile): PackageDefinition {
  const files = [...withDependencies(file, new Map()).values()];
  const fileDescriptorProtos = files.map((f) => Buffer.from(toBinary(FileDescriptorProtoSchema, f.proto)));
  // Reflection indexes symbols from the files, not from the entries, and decodes every entry's files again: one
  // entry carrying them all describes the same and costs one decode instead of one per message (~250 ms at start).
  const first = file.messages[0];
  const definition: PackageDefinition = {};
  if (first) definition[first.typeName] = { format: 'Protocol Buffer 3 DescriptorProto', type: {}, fileDescriptorProtos };
  const healthRequest = healthService.Check?.requestType;
  if (healthRequest !== undefined) definition['grpc.health.v1.HealthCheckRequest'] = healthRequest;
  return definition;
}
