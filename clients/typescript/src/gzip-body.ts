/**
 * Batches over this many bytes are gzipped: JSON events compress ~5-10x, so a large batch costs a fraction of the
 * upload (and fits a browser's 64 KiB keepalive budget); below it, compressing saves less than it costs.
 */
export const GZIP_THRESHOLD_BYTES = 4096;

export interface EncodedBody {
  body: string | Uint8Array<ArrayBuffer>;
  /** the Content-Encoding to send, when the body is compressed */
  encoding?: 'gzip';
}

/**
 * The request body of a batch: gzipped where the runtime has `CompressionStream` (browsers, Node ≥ 18) and the
 * batch is large enough; otherwise the JSON as is. Compression never fails a delivery: on any error the plain body
 * is sent.
 */
export async function encodeBody(json: string): Promise<EncodedBody> {
  if (json.length < GZIP_THRESHOLD_BYTES || typeof CompressionStream !== 'function') return { body: json };
  try {
    const stream = new Blob([json]).stream().pipeThrough(new CompressionStream('gzip'));
    const body = new Uint8Array(await new Response(stream).arrayBuffer());
    return { body, encoding: 'gzip' };
  } catch {
    return { body: json };
  }
}
