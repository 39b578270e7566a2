import type { Server, ServerWritableStream } from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';

/**
 * grpc.health.v1.Health from grpc-health-check, with one addition: at shutdown every Watch call gets NOT_SERVING
 * and is then ended. A Watch never ends by itself, so without this one watching client (a load balancer, a probe)
 * would hold tryShutdown open until the grace period runs out and calls are cancelled.
 */

type WatchCall = ServerWritableStream<object, object>;

export interface HealthHandle {
  /** NOT_SERVING for every name, then ends open Watch calls (after that update is written). */
  stopServing(): void;
}

export function addHealthService(server: Pick<Server, 'addService'>, names: readonly string[]): HealthHandle {
  const health = new HealthImplementation(Object.fromEntries(names.map((name) => [name, 'SERVING' as const])));
  const watches = new Set<WatchCall>();
  health.addToServer({
    addService(service, implementation) {
      const watch = implementation.watch as ((call: WatchCall) => void) | undefined;
      server.addService(service, {
        ...implementation,
        ...(watch === undefined
          ? {}
          : {
              watch: (call: WatchCall) => {
                watches.add(call);
                call.on('cancelled', () => watches.delete(call));
                watch(call);
              },
            }),
      });
    },
  });
  return {
    stopServing() {
      for (const name of names) health.setStatus(name, 'NOT_SERVING');
      for (const call of watches) call.end();
      watches.clear();
    },
  };
}
