package options

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"kruntimes.io/kruntimes/apiserver"
	logstore "kruntimes.io/kruntimes/registry/runlog"
)

// LogOptions bound the task logs the server keeps (docs/storage.md, "Kept
// logs").
type LogOptions struct {
	// MaxBytesPerNamespace bounds the kept-log bytes of one namespace.
	MaxBytesPerNamespace int64
	// MaxRecordBytes bounds one attempt's record on etcd3, below etcd's
	// --max-request-bytes.
	MaxRecordBytes int64
	// SweepInterval is how often orphaned log records are deleted and each
	// namespace's bytes counted again.
	SweepInterval time.Duration
}

// NewLogOptions returns the defaults: 256 MiB a namespace, records of at
// most 1 MiB on etcd3 (whose default --max-request-bytes is 1.5 MiB), a
// sweep an hour.
func NewLogOptions() *LogOptions {
	return &LogOptions{MaxBytesPerNamespace: 256 << 20, MaxRecordBytes: 1 << 20, SweepInterval: time.Hour}
}

// AddFlags registers the kept-log flags.
func (o *LogOptions) AddFlags(fs *pflag.FlagSet) {
	fs.Int64Var(&o.MaxBytesPerNamespace, "max-log-bytes-per-namespace", o.MaxBytesPerNamespace,
		"Bytes of task logs kept for the Runs of one namespace (each write counts 32 bytes more); 0: no limit. A log handed over when the namespace is at its limit is kept cut to what fits, its first and last bytes around a marker line that says so; logs already kept are never dropped for it.")
	fs.Int64Var(&o.MaxRecordBytes, "max-log-record-bytes", o.MaxRecordBytes,
		"With --storage-backend=etcd3: bytes of one attempt's kept log at most, below etcd's --max-request-bytes (1.5 MiB by default); a larger log is kept cut, its first and last bytes around a marker line. 0: no bound. The embedded backend takes logs of any size.")
	fs.DurationVar(&o.SweepInterval, "log-sweep-interval", o.SweepInterval,
		"How often log records whose Run is gone are deleted and each namespace's kept-log bytes counted again; the first sweep runs at start.")
}

// Validate checks the flags.
func (o *LogOptions) Validate() []error {
	var errs []error
	if o.MaxBytesPerNamespace < 0 {
		errs = append(errs, fmt.Errorf("--max-log-bytes-per-namespace must not be negative (0 is no limit), got %d", o.MaxBytesPerNamespace))
	}
	if o.MaxRecordBytes < 0 {
		errs = append(errs, fmt.Errorf("--max-log-record-bytes must not be negative (0 is no bound), got %d", o.MaxRecordBytes))
	}
	if o.SweepInterval <= 0 {
		errs = append(errs, fmt.Errorf("--log-sweep-interval must be positive, got %s", o.SweepInterval))
	}
	return errs
}

// Config is the server's kept-log configuration on backend.
func (o *LogOptions) Config(backend string) apiserver.LogConfig {
	limits := logstore.Limits{NamespaceBytes: o.MaxBytesPerNamespace}
	if backend == BackendEtcd3 {
		limits.RecordBytes = o.MaxRecordBytes
	}
	return apiserver.LogConfig{Limits: limits, SweepInterval: o.SweepInterval}
}
