import { create } from '@bufbuild/protobuf';
import { status } from '@grpc/grpc-js';
import type { ServerDuplexStream, StatusObject } from '@grpc/grpc-js';
import { IngestStreamRequestSchema, IngestStreamResponseSchema } from '../gen/analytics/v1/analytics_pb.ts';
import type { IngestStreamResponse } from '../gen/analytics/v1/analytics_pb.ts';
import type { AnalyticsEngine, EngineError, RateInfo } from '../engine/types.ts';
import { requestMeta } from './request-meta.ts';
import { decode, eventsToPlain } from './request-to-plain.ts';
import type { OperatorMetrics } from '../engine/operator-metrics.ts';
import { rateMetadata, toStatus } from './status.ts';

/**
 * IngestStream: each request message is one batch, handled like a unary Ingest, strictly one at a time and in
 * order. The acknowledgement of batch n is written before batch n+1 is even read, so "acknowledged" and "stored"
 * are the same set: a failure ends the call after the last acknowledged batch and stores nothing later.
 *
 * Backpressure: the call is paused while a batch is in the engine and while its acknowledgement waits in a full
 * write buffer (a client that does not read its acks). While paused, grpc-js stops reading the HTTP/2 stream, so
 * at most the Readable's read-ahead (16 messages of ≤ 1 MiB, kept as wire bytes) waits in server memory and flow
 * control holds the rest in the client. A window of several batches in the engine at once was not taken: a later
 * batch could be stored after an earlier one failed, and the client could no longer tell what is stored.
 */

export interface StreamDrain {
  /** Ends the call with UNAVAILABLE after the batch in progress (if any) is acknowledged. */
  stop(): void;
}

const SHUTTING_DOWN: StatusObject = {
  code: status.UNAVAILABLE,
  details: 'the service is shutting down; resend unacknowledged batches on a new call',
  metadata: rateMetadata(undefined),
};

export function ingestStreamHandler(
  engine: AnalyticsEngine,
  open: Set<StreamDrain>,
  onFault: (err: unknown) => void,
  ops?: OperatorMetrics,
): (call: ServerDuplexStream<Buffer, IngestStreamResponse>) => void {
  return (call) => {
    const meta = requestMeta(call);
    let sequence = 0n;
    let busy = false;
    let stopping = false;
    let done = false;
    let inputEnded = false;
    let lastRate: RateInfo | undefined;

    const finish = (failure?: StatusObject): void => {
      if (done) return;
      done = true;
      // One request per call: ok, or the engine code the call ended with (shutdown: unavailable).
      ops?.request('grpc', 'IngestStream', failure === undefined ? 'ok' : (failure.metadata?.get('error-code')[0] as string | undefined) ?? 'unavailable');
      open.delete(drain);
      call.pause();
      if (failure === undefined) call.end(rateMetadata(lastRate));
      // grpc-js turns an 'error' emitted on the call into the final status, sent after the acks already written.
      else call.emit('error', failure);
    };
    const drain: StreamDrain = {
      stop() {
        stopping = true;
        if (!busy) finish(SHUTTING_DOWN);
      },
    };
    open.add(drain);

    // As for unary calls: the ingest gate (key, rate limit, scope) answers before a batch it cannot use.
    const refuse = (error: EngineError): void => {
      const refused = engine.refuse(meta, 'ingest', error);
      finish(toStatus(refused.error, refused.rate));
    };

    const next = (): void => {
      busy = false;
      if (done) return;
      if (stopping) finish(SHUTTING_DOWN);
      else if (inputEnded) finish();
      else call.resume();
    };

    const handle = async (bytes: Buffer): Promise<void> => {
      const request = decode(IngestStreamRequestSchema, bytes);
      if (!request.ok) return refuse(request.error);
      const events = eventsToPlain(request.value.events);
      if (!events.ok) return refuse(events.error);
      const outcome = await engine.ingest(meta, events.value);
      // Cancelled meanwhile: the batch may be stored without an ack; the client resends it, and its event_ids
      // make that a no-op. Nothing more to write.
      if (done) return;
      if (!outcome.ok) return finish(toStatus(outcome.error, outcome.rate));
      lastRate = outcome.rate;
      sequence += 1n;
      const ack = create(IngestStreamResponseSchema, {
        sequence,
        batchId: request.value.batchId,
        accepted: outcome.value.accepted,
        ts: BigInt(outcome.value.ts),
      });
      if (call.write(ack)) next();
      else call.once('drain', next);
    };

    call.on('data', (bytes: Buffer) => {
      call.pause();
      if (done) return; // ended (refused, shutting down) while a message was already on its way out of the buffer
      busy = true;
      handle(bytes).catch((err: unknown) => {
        onFault(err);
        finish({ code: status.INTERNAL, details: 'internal error', metadata: rateMetadata(undefined) });
      });
    });
    // A paused Readable still emits 'end' right after handing out its last message, so the last batch may be in
    // the engine now; its next() finishes the call after writing the ack.
    call.on('end', () => {
      inputEnded = true;
      if (!busy) finish();
    });
    call.on('cancelled', () => {
      done = true;
      open.delete(drain);
    });
  };
}
