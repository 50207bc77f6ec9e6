// The part of tar-fs (no types of its own) the SDK uses: pack, whose
// stream (a streamx Readable) is async-iterable.
declare module 'tar-fs' {
  export interface PackOptions {
    umask?: number;
    sort?: boolean;
    dereference?: boolean;
    strict?: boolean;
  }
  export function pack(cwd: string, opts?: PackOptions): AsyncIterable<Uint8Array>;
  const tarFs: { pack: typeof pack };
  export default tarFs;
}
