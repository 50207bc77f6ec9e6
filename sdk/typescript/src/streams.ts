/**
 * The local ends of streamed transfers: what an upload reads (bytes, a
 * string, a Node Readable, a web ReadableStream, any AsyncIterable of
 * bytes), a local file written whole or not at all, and a local directory
 * as a tar archive made as it is read. Nothing here holds more than a
 * chunk of what it moves.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import tarFs from 'tar-fs';

/** What an upload sends: bytes, a string (as UTF-8), a Node Readable, a
 * web ReadableStream or any AsyncIterable of Uint8Array chunks. */
export type ByteSource = string | Uint8Array | AsyncIterable<Uint8Array> | ReadableStream<Uint8Array>;

/** The largest piece of a Uint8Array source written at once. */
const SLICE_BYTES = 256 << 10;

/** `src` as an AsyncIterable of byte chunks, read only as it is consumed. */
export function byteChunks(src: ByteSource): AsyncIterable<Uint8Array> {
  if (typeof src === 'string') return slices(Buffer.from(src, 'utf8'));
  if (src instanceof Uint8Array) return slices(src);
  if (src !== null && typeof src === 'object') {
    if (Symbol.asyncIterator in src) return src as AsyncIterable<Uint8Array>;
    if (typeof (src as ReadableStream<Uint8Array>).getReader === 'function') return readerChunks(src as ReadableStream<Uint8Array>);
  }
  throw new TypeError(
    `an upload takes a Uint8Array, a string, a Node Readable, a ReadableStream or an AsyncIterable of Uint8Array, not ${Object.prototype.toString.call(src)}`,
  );
}

async function* slices(bytes: Uint8Array): AsyncGenerator<Uint8Array> {
  for (let at = 0; at < bytes.byteLength; at += SLICE_BYTES) yield bytes.subarray(at, at + SLICE_BYTES);
}

/** A web ReadableStream that is not async-iterable (older runtimes). */
async function* readerChunks(stream: ReadableStream<Uint8Array>): AsyncGenerator<Uint8Array> {
  const reader = stream.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      yield value;
    }
  } finally {
    // Stopped early: the stream is not read further.
    await reader.cancel().catch(() => undefined);
    reader.releaseLock();
  }
}

/** Writes `chunks` to the local file `target`, whole or not at all: into a
 * temporary file beside it, synced and renamed over it once every chunk
 * arrived; on any error the temporary file is removed and `target` left
 * as it was. Resolves with the bytes written. */
export async function writeFileAtomically(target: string, chunks: AsyncIterable<Uint8Array>): Promise<number> {
  const tmp = path.join(path.dirname(target), `.${path.basename(target)}.kruntimes-download-${randomBytes(4).toString('hex')}`);
  const file = await fs.promises.open(tmp, 'wx', 0o666);
  let size = 0;
  try {
    try {
      for await (const chunk of chunks) {
        for (let at = 0; at < chunk.byteLength; ) {
          const { bytesWritten } = await file.write(chunk, at, chunk.byteLength - at);
          at += bytesWritten;
        }
        size += chunk.byteLength;
      }
      await file.sync();
    } finally {
      await file.close();
    }
    await fs.promises.rename(tmp, target);
  } catch (e) {
    await fs.promises.rm(tmp, { force: true });
    throw e;
  }
  return size;
}

/**
 * The contents of the local directory `dir` as a tar archive (ustar, with
 * PAX headers for long or non-ASCII names), made as it is read: entries
 * named relative to `dir` ("." itself first), in name order per directory,
 * modes as they are (no umask applied). Symbolic links are stored as
 * links, never followed; a FIFO, device or unreadable file fails the
 * stream with its error. tar-fs (a dependency of @kubernetes/client-node
 * already) writes it.
 */
export function tarDirectory(dir: string): AsyncIterable<Uint8Array> {
  return tarFs.pack(dir, { umask: 0, sort: true, dereference: false });
}
