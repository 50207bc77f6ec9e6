package sandboxfile

// Handler is the built-in handler of the Python Runtime Server that serves
// a sandbox (runtimes/python's SandboxHandler): only a function Run naming
// it has its workspace's files served.
const Handler = "kruntimes.sandbox"

// ChunkBytes bounds the data of one message on every hop: what a hop holds
// of a file, whatever its size, is a chunk or two and gRPC's window.
const ChunkBytes = 256 << 10

// MaxPathBytes bounds a path, as PATH_MAX does.
const MaxPathBytes = 4096

// ContentType is the type of a file's bytes as runs/files serves and takes
// them: exactly as stored, whatever they hold.
const ContentType = "application/octet-stream"

// TarContentType and TarGzipContentType are the types of a directory's
// archive as runs/files?archive= serves it: a tar archive, plain or
// gzip-compressed.
const (
	TarContentType     = "application/x-tar"
	TarGzipContentType = "application/gzip"
)
