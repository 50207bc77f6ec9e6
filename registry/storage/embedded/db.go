package embedded

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	"k8s.io/klog/v2"
)

// DataFileName is the name of the single data file the backend keeps in its
// directory.
const DataFileName = "kruntimes.db"

// formatVersion identifies the on-disk layout; Open refuses files written with
// another layout instead of misreading them.
const formatVersion = "kruntimes-embedded/v1"

// Bucket layout. Every write is one revision and touches exactly one key:
//
//	meta:   "format" -> formatVersion, "rev" -> last committed revision,
//	        "compact" -> last compacted revision
//	kv:     key -> current record (modRev, expiry, value)
//	log:    rev -> event (type, prevRev, key, value); replayed by watchers
//	keyrev: key + 0x00 + rev -> empty; per-key history index for reads at a
//	        past revision and for compaction
var (
	bucketMeta   = []byte("meta")
	bucketKV     = []byte("kv")
	bucketLog    = []byte("log")
	bucketKeyRev = []byte("keyrev")

	metaFormat  = []byte("format")
	metaRev     = []byte("rev")
	metaCompact = []byte("compact")
)

// Options tune a Backend. The zero value is usable: every field has a
// default suitable for a laptop and for a production server.
type Options struct {
	// OpenTimeout bounds how long Open waits for the file lock held by
	// another process before failing. Default 1s.
	OpenTimeout time.Duration
	// CompactionInterval is how often history is compacted. Each run compacts
	// to the revision that was current one interval earlier, so watchers can
	// resume from any revision at most one interval old (at least). Default
	// 5m; negative disables background compaction.
	CompactionInterval time.Duration
	// MaxHistoryRevisions additionally caps the history kept: a compaction run
	// never leaves more than this many revisions behind the current one.
	// Default 100000; negative disables the cap.
	MaxHistoryRevisions int64
	// ProgressNotifyInterval is how often a watch opened with
	// ListOptions.ProgressNotify (the watch cache's) receives a bookmark
	// carrying the current revision when it is idle. Default 5s.
	ProgressNotifyInterval time.Duration
	// MaxBatchSize caps how many writes share one transaction and fsync.
	// Default 256.
	MaxBatchSize int
	// DisableWatchCache makes StorageDecorator return the bare store instead
	// of wrapping it in the apiserver's watch cache. The cache is on by
	// default: with many field-selected watches and lists it costs a small
	// fraction of the CPU (see docs/storage.md for the measurement).
	DisableWatchCache bool
	// NoSync skips fsync. Only for tests and benchmarks: an acknowledged write
	// may be lost on power failure.
	NoSync bool
	// OnHalt is told, once, that the backend stopped accepting writes (a
	// failed commit reached the file). Default: exit the process, as etcd
	// does, so that it is restarted and reads the file again.
	OnHalt func(error)
}

func (o *Options) setDefaults() {
	if o.OpenTimeout == 0 {
		o.OpenTimeout = time.Second
	}
	if o.CompactionInterval == 0 {
		o.CompactionInterval = 5 * time.Minute
	}
	if o.MaxHistoryRevisions == 0 {
		o.MaxHistoryRevisions = 100000
	}
	if o.ProgressNotifyInterval <= 0 {
		o.ProgressNotifyInterval = 5 * time.Second
	}
	if o.OnHalt == nil {
		o.OnHalt = exitOnHalt
	}
	if o.MaxBatchSize <= 0 {
		o.MaxBatchSize = 256
	}
}

// Backend owns the data file shared by every resource of one server. Build one
// storage.Interface per resource with NewStore or RESTOptionsGetter.
type Backend struct {
	path string
	db   *bolt.DB
	opts Options

	writes chan *writeOp
	// stopCh is closed by Close; the commit loop drains and fails pending
	// writes, background loops exit.
	stopCh   chan struct{}
	loops    sync.WaitGroup
	closeMu  sync.RWMutex
	closed   bool
	closeErr error

	// rev is the last revision committed and published to watchers.
	rev atomic.Uint64
	// compactRev is the last compacted revision; reads and watches from
	// older revisions fail with 410.
	compactRev atomic.Uint64
	// compactMu serialises compactions.
	compactMu sync.Mutex

	notify *notifier
	ttl    *expiryQueue

	writeHealth writeHealth
	// haltErr, once set, fails every write: see commitFailed.
	haltErr atomic.Pointer[error]
}

// exitOnHalt ends the process with the error that stopped the storage.
func exitOnHalt(err error) {
	klog.Background().Error(err, "Exiting: the embedded storage cannot accept writes until the server restarts")
	klog.FlushAndExit(klog.ExitFlushTimeout, 1)
}

// Open opens (creating if needed) the data file DataFileName in dir. It fails
// fast when another process holds the file and refuses a file that is corrupt,
// truncated or of another format rather than starting empty.
func Open(dir string, opts Options) (*Backend, error) {
	opts.setDefaults()
	registerStorageMetrics()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating embedded storage directory %q: %w", dir, err)
	}
	path := filepath.Join(dir, DataFileName)
	_, statErr := os.Stat(path)
	existed := statErr == nil

	db, err := openBolt(path, opts)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		path:   path,
		db:     db,
		opts:   opts,
		writes: make(chan *writeOp, opts.MaxBatchSize*4),
		stopCh: make(chan struct{}),
		notify: newNotifier(),
		ttl:    newExpiryQueue(),
	}
	if err := b.initOrCheck(existed); err != nil {
		_ = db.Close()
		return nil, err
	}
	if !existed && !opts.NoSync {
		// The file's own fsyncs do not persist its directory entry.
		if err := syncDir(dir); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	b.recordFileSize()
	b.loops.Add(3)
	go b.commitLoop()
	go b.expiryLoop()
	go b.compactionLoop()
	klog.Background().V(2).Info("Opened embedded storage", "path", path, "revision", b.rev.Load(), "compactedRevision", b.compactRev.Load())
	return b, nil
}

func openBolt(path string, opts Options) (db *bolt.DB, err error) {
	// bbolt panics on some kinds of damage instead of returning an error.
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("data file %s is corrupt (%v); restore it from a backup or move it away to start empty", path, r)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      opts.OpenTimeout,
		NoSync:       opts.NoSync,
		FreelistType: bolt.FreelistMapType,
	})
	switch {
	case errors.Is(err, bolt.ErrTimeout):
		return nil, fmt.Errorf("data file %s is locked by another process (is another kruntimes server running with the same data directory?): %w", path, err)
	case err != nil:
		return nil, fmt.Errorf("opening data file %s: %w; if the file is damaged restore it from a backup or move it away to start empty", path, err)
	}
	return db, nil
}

// initOrCheck creates the buckets of a new file, or checks an existing one:
// bbolt's page consistency check plus our own meta bucket, so a truncated or
// foreign file is refused instead of silently served as empty.
func (b *Backend) initOrCheck(existed bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("data file %s is corrupt (%v); restore it from a backup or move it away to start empty", b.path, r)
		}
	}()
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("data file %s is corrupt: %s; restore it from a backup or move it away to start empty", b.path, fmt.Sprintf(format, args...))
	}
	if existed {
		info, err := os.Stat(b.path)
		if err != nil {
			return fmt.Errorf("checking data file %s: %w", b.path, err)
		}
		err = b.db.View(func(tx *bolt.Tx) error {
			if info.Size() < tx.Size() {
				return corrupt("file is %d bytes but its pages need %d (truncated?)", info.Size(), tx.Size())
			}
			// Drain every error: Check's goroutine reads tx until it is done.
			var checkErr error
			for cerr := range tx.Check() {
				if checkErr == nil {
					checkErr = cerr
				}
			}
			if checkErr != nil {
				return corrupt("%v", checkErr)
			}
			meta := tx.Bucket(bucketMeta)
			if meta == nil {
				if k, _ := tx.Cursor().First(); k == nil {
					// bbolt initialised the file but we crashed before
					// creating our buckets: nothing was ever stored.
					return nil
				}
				return corrupt("no %q bucket (not a kruntimes data file?)", bucketMeta)
			}
			if f := meta.Get(metaFormat); !bytes.Equal(f, []byte(formatVersion)) {
				return corrupt("format %q, want %q", f, formatVersion)
			}
			for _, name := range [][]byte{bucketKV, bucketLog, bucketKeyRev} {
				if tx.Bucket(name) == nil {
					return corrupt("no %q bucket", name)
				}
			}
			rev, ok := decodeUint(meta.Get(metaRev))
			if !ok || rev == 0 {
				return corrupt("invalid revision record")
			}
			compact, ok := decodeUint(meta.Get(metaCompact))
			if !ok || compact > rev {
				return corrupt("invalid compaction record")
			}
			// The newest history entry is the committed revision, unless a
			// compaction at the committed revision removed the entries of
			// the deletions (and superseded writes) just before it. A new
			// file has revision 1 and no history.
			last := uint64(1)
			if k, _ := tx.Bucket(bucketLog).Cursor().Last(); k != nil {
				last = binary.BigEndian.Uint64(k)
			}
			if last > rev || (last < rev && compact < rev) {
				return corrupt("last history revision %d does not match committed revision %d (compacted up to %d)", last, rev, compact)
			}
			b.rev.Store(rev)
			b.compactRev.Store(compact)
			return b.loadExpiries(tx)
		})
		if err != nil {
			return err
		}
		if b.rev.Load() != 0 {
			return nil
		}
	}
	return b.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketMeta) != nil {
			return corrupt("meta bucket exists but is incomplete")
		}
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		for _, name := range [][]byte{bucketKV, bucketLog, bucketKeyRev} {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		// Revisions start at 1 like etcd's, so a stored object never has
		// resourceVersion 0 (which means "any" in the API).
		if err := meta.Put(metaFormat, []byte(formatVersion)); err != nil {
			return err
		}
		if err := meta.Put(metaRev, encodeUint(1)); err != nil {
			return err
		}
		if err := meta.Put(metaCompact, encodeUint(0)); err != nil {
			return err
		}
		// The log always ends at the committed revision; revision 1 is an
		// empty marker the consistency check relies on.
		if err := tx.Bucket(bucketLog).Put(encodeUint(1), encodeLogEntry(logEntry{typ: entryMarker})); err != nil {
			return err
		}
		b.rev.Store(1)
		return nil
	})
}

// Close stops background work, fails writes still queued, and closes the
// file. Stores built from the Backend must not be used afterwards.
func (b *Backend) Close() error {
	b.closeMu.Lock()
	if b.closed {
		b.closeMu.Unlock()
		return b.closeErr
	}
	b.closed = true
	close(b.stopCh)
	b.closeMu.Unlock()
	b.loops.Wait()
	b.notify.close()
	b.closeErr = b.db.Close()
	return b.closeErr
}

// Path returns the data file's path.
func (b *Backend) Path() string { return b.path }

// CurrentRevision returns the last committed revision.
func (b *Backend) CurrentRevision() uint64 { return b.rev.Load() }

// CompactedRevision returns the last compacted revision.
func (b *Backend) CompactedRevision() uint64 { return b.compactRev.Load() }

// Check implements a health check: the file is open and readable.
func (b *Backend) Check() error {
	b.closeMu.RLock()
	defer b.closeMu.RUnlock()
	if b.closed {
		return fmt.Errorf("embedded storage %s is closed", b.path)
	}
	return b.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketMeta) == nil {
			return fmt.Errorf("embedded storage %s has no meta bucket", b.path)
		}
		return nil
	})
}

// view runs fn in a read transaction, refusing when the backend is closed
// (bbolt would block or fail obscurely).
func (b *Backend) view(fn func(tx *bolt.Tx) error) error {
	b.closeMu.RLock()
	defer b.closeMu.RUnlock()
	if b.closed {
		return errBackendClosed(b.path)
	}
	return b.db.View(fn)
}

func errBackendClosed(path string) error {
	return fmt.Errorf("embedded storage %s is closed", path)
}

// kvRecord is the current state of a key.
type kvRecord struct {
	modRev uint64
	// expiry is a unix time in nanoseconds after which the key is deleted;
	// 0 means never.
	expiry int64
	value  []byte
}

func encodeKV(r kvRecord) []byte {
	buf := make([]byte, 16+len(r.value))
	binary.BigEndian.PutUint64(buf, r.modRev)
	binary.BigEndian.PutUint64(buf[8:], uint64(r.expiry))
	copy(buf[16:], r.value)
	return buf
}

// decodeKV parses a record. The value aliases the bbolt page, so it is only
// valid inside the transaction unless copied.
func decodeKV(buf []byte) (kvRecord, error) {
	if len(buf) < 16 {
		return kvRecord{}, fmt.Errorf("kv record of %d bytes is too short", len(buf))
	}
	return kvRecord{
		modRev: binary.BigEndian.Uint64(buf),
		expiry: int64(binary.BigEndian.Uint64(buf[8:])),
		value:  buf[16:],
	}, nil
}

type entryType byte

const (
	entryPut    entryType = 1
	entryDelete entryType = 2
	// entryMarker keeps the revision sequence dense for revisions that change
	// no key (the initial revision).
	entryMarker entryType = 3
)

// logEntry is one revision of history.
type logEntry struct {
	typ     entryType
	prevRev uint64
	key     []byte
	value   []byte
}

func encodeLogEntry(e logEntry) []byte {
	buf := make([]byte, 1+8+4+len(e.key)+len(e.value))
	buf[0] = byte(e.typ)
	binary.BigEndian.PutUint64(buf[1:], e.prevRev)
	binary.BigEndian.PutUint32(buf[9:], uint32(len(e.key)))
	copy(buf[13:], e.key)
	copy(buf[13+len(e.key):], e.value)
	return buf
}

func decodeLogEntry(buf []byte) (logEntry, error) {
	if len(buf) < 13 {
		return logEntry{}, fmt.Errorf("history record of %d bytes is too short", len(buf))
	}
	n := int(binary.BigEndian.Uint32(buf[9:]))
	if len(buf) < 13+n {
		return logEntry{}, fmt.Errorf("history record key length %d exceeds record", n)
	}
	return logEntry{
		typ:     entryType(buf[0]),
		prevRev: binary.BigEndian.Uint64(buf[1:]),
		key:     buf[13 : 13+n],
		value:   buf[13+n:],
	}, nil
}

func encodeUint(v uint64) []byte {
	buf := make([]byte, 8)
	binary.BigEndian.PutUint64(buf, v)
	return buf
}

func decodeUint(buf []byte) (uint64, bool) {
	if len(buf) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(buf), true
}

// keyRevKey builds the keyrev index key. Kubernetes keys never contain 0x00,
// so ordering by this key orders by (key, rev).
func keyRevKey(key []byte, rev uint64) []byte {
	buf := make([]byte, len(key)+1+8)
	copy(buf, key)
	buf[len(key)] = 0
	binary.BigEndian.PutUint64(buf[len(key)+1:], rev)
	return buf
}

func splitKeyRev(k []byte) (key []byte, rev uint64, ok bool) {
	if len(k) < 9 || k[len(k)-9] != 0 {
		return nil, 0, false
	}
	return k[:len(k)-9], binary.BigEndian.Uint64(k[len(k)-8:]), true
}
