// The part of tar-fs (no types of its own) the SDK uses: pack, whose
// stream (a streamx Readable) is async-iterable, and extract, a Writable.
declare module 'tar-fs' {
  export interface PackOptions {
    umask?: number;
    sort?: boolean;
    dereference?: boolean;
    strict?: boolean;
  }
  export function pack(cwd: string, opts?: PackOptions): AsyncIterable<Uint8Array>;
  export interface TarHeader {
    name: string;
    type: string;
    size?: number;
  }
  export interface ExtractOptions {
    chown?: boolean;
    ignore?: (name: string, header?: TarHeader) => boolean;
  }
  export function extract(cwd: string, opts?: ExtractOptions): NodeJS.WritableStream;
  const tarFs: { pack: typeof pack; extract: typeof extract };
  export default tarFs;
}
