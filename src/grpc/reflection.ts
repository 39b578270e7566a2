import { toBinary } from '@bufbuild/protobuf';
import type { DescFile } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import type { Server, ServiceDefinition, UntypedServiceImplementation } from '@grpc/grpc-js';
import type { ReflectionService } from '@grpc/reflection';
import { createRequire } from 'node:module';

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
 * Everything reflection describes: the given files (ours and grpc.health.v1) and their imports, so `grpcurl list`
 * shows every service the server answers.
 */
export function reflectionPackage(roots: readonly DescFile[]): PackageDefinition {
  const byName = new Map<string, DescFile>();
  for (const root of roots) withDependencies(root, byName);
  const files = [...byName.values()];
  const fileDescriptorProtos = files.map((f) => Buffer.from(toBinary(FileDescriptorProtoSchema, f.proto)));
  // Reflection indexes symbols from the files, not from the entries, and decodes every entry's files again: one
  // entry carrying them all describes the same and costs one decode instead of one per message (~250 ms at start).
  const first = files.find((f) => f.messages.length > 0)?.messages[0];
  const definition: PackageDefinition = {};
  if (first) definition[first.typeName] = { format: 'Protocol Buffer 3 DescriptorProto', type: {}, fileDescriptorProtos };
  return definition;
}

/** The reflection versions @grpc/reflection serves, by package (grpcurl asks v1, older tools v1alpha). */
const REFLECTION_PACKAGES = ['grpc.reflection.v1', 'grpc.reflection.v1alpha'] as const;

/**
 * Serves reflection without loading it at start: @grpc/reflection parses its own .proto files with proto-loader when
 * it is added to a server (~70 ms of every start, for a service a person asks with grpcurl now and then). The two
 * methods are declared here with the paths the protocol fixes; the package is loaded (synchronously, it is CommonJS)
 * and its definitions and handlers are taken over at the first reflection call.
 */
export function addLazyReflection(server: Pick<Server, 'addService'>, definition: () => PackageDefinition): void {
  let loaded: Map<string, { method: ServiceDefinition[string]; handler: UntypedServiceImplementation[string] }> | undefined;
  const load = () => {
    if (loaded) return loaded;
    const { ReflectionService: Reflection } = createRequire(import.meta.url)('@grpc/reflection') as typeof import('@grpc/reflection');
    const found = new Map<string, { method: ServiceDefinition[string]; handler: UntypedServiceImplementation[string] }>();
    new Reflection(definition()).addToServer({
      addService(service: ServiceDefinition, implementation: UntypedServiceImplementation) {
        for (const [name, method] of Object.entries(service)) found.set(method.path, { method, handler: implementation[name]! });
      },
    } as unknown as Server);
    loaded = found;
    return found;
  };
  for (const pkg of REFLECTION_PACKAGES) {
    const path = `/${pkg}.ServerReflection/ServerReflectionInfo`;
    const real = () => {
      const m = load().get(path);
      if (!m) throw new Error(`@grpc/reflection no longer serves ${path}`);
      return m;
    };
    const method = {
      path,
      requestStream: true,
      responseStream: true,
      originalName: 'serverReflectionInfo',
      requestSerialize: (value: unknown) => real().method.requestSerialize(value),
      requestDeserialize: (bytes: Buffer) => real().method.requestDeserialize(bytes),
      responseSerialize: (value: unknown) => real().method.responseSerialize(value),
      responseDeserialize: (bytes: Buffer) => real().method.responseDeserialize(bytes),
    };
    server.addService({ ServerReflectionInfo: method } as ServiceDefinition, {
      ServerReflectionInfo: ((call: unknown, callback: unknown) => (real().handler as (c: unknown, cb: unknown) => void)(call, callback)) as UntypedServiceImplementation[string],
    });
  }
}
