package embedded

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"
)

const (
	// writeProbeSize is how much room a probe must find before the backend
	// reports ready again after a failed commit: more than a full group
	// commit of Runs takes. A smaller probe could fit in pages bbolt
	// already owns while the next real commit still fails.
	writeProbeSize = 1 << 20
	// writeProbeInterval bounds how often a failing readiness check probes.
	writeProbeInterval = time.Second
	writeProbeFileName = ".write-probe"
)

// writeHealth remembers whether the data file can be written: the error
// of the last commit, cleared by the next commit or probe that succeeds.
type writeHealth struct {
	mu  sync.Mutex
	err error
	// failures counts failed commits, so that a probe clears only the
	// failure it was started for.
	failures  uint64
	lastProbe time.Time
}

func (h *writeHealth) set(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err
	if err != nil {
		h.failures++
	}
}

// CheckWritable reports the last failed commit, or nil if the last commit
// succeeded. Not being ready takes the server out of its Service, so no
// write arrives to show that the disk has room again; while failing, the
// check probes itself by writing and fsyncing a file of writeProbeSize
// bytes beside the data file, at most once per writeProbeInterval.
func (b *Backend) CheckWritable() error {
	if err := b.halted(); err != nil {
		return err
	}
	h := &b.writeHealth
	h.mu.Lock()
	err, failures := h.err, h.failures
	probe := err != nil && time.Since(h.lastProbe) >= writeProbeInterval
	if probe {
		h.lastProbe = time.Now()
	}
	h.mu.Unlock()
	if err == nil {
		return nil
	}
	// Not under mu: commits must not wait for a probe.
	if probe && probeWrite(filepath.Dir(b.path)) == nil {
		h.mu.Lock()
		if h.failures == failures {
			h.err = nil
		}
		err = h.err
		h.mu.Unlock()
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("writes to %s fail (free disk space or fix the file's permissions; ready again once a write succeeds): %w", b.path, err)
}

// probeWrite writes and fsyncs writeProbeSize bytes in dir, then removes
// them.
func probeWrite(dir string) (err error) {
	path := filepath.Join(dir, writeProbeFileName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, f.Close(), os.Remove(path))
	}()
	if _, err := f.Write(make([]byte, writeProbeSize)); err != nil {
		return err
	}
	return f.Sync()
}

// WritableChecker returns a readyz check named "embedded-storage-writable"
// that fails while the data file cannot be written (see CheckWritable). It
// belongs in readyz only: restarting the server frees no disk space.
func (b *Backend) WritableChecker() healthz.HealthChecker {
	return healthz.NamedCheck("embedded-storage-writable", func(*http.Request) error { return b.CheckWritable() })
}

// syncDir fsyncs a directory, so that a file just created in it survives a
// power failure (the file's own fsync does not persist its directory entry).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// recordFileSize sets the data file size metric.
func (b *Backend) recordFileSize() {
	if info, err := os.Stat(b.path); err == nil {
		dataFileSize.Set(float64(info.Size()))
	}
}
