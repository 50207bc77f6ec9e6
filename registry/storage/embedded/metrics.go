package embedded

import (
	"sync"

	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics of the commit path and the history window; no labels, so their
// cardinality is fixed.
var (
	commitDuration = compbasemetrics.NewHistogram(&compbasemetrics.HistogramOpts{
		Name:           "kruntimes_storage_commit_duration_seconds",
		Help:           "Time to write and fsync one group commit of the embedded storage.",
		Buckets:        compbasemetrics.ExponentialBuckets(0.0005, 2, 14),
		StabilityLevel: compbasemetrics.ALPHA,
	})
	commitWrites = compbasemetrics.NewHistogram(&compbasemetrics.HistogramOpts{
		Name:           "kruntimes_storage_commit_writes",
		Help:           "Writes sharing one group commit (and one fsync) of the embedded storage.",
		Buckets:        compbasemetrics.ExponentialBuckets(1, 2, 9),
		StabilityLevel: compbasemetrics.ALPHA,
	})
	commitFailures = compbasemetrics.NewCounter(&compbasemetrics.CounterOpts{
		Name:           "kruntimes_storage_commit_failures_total",
		Help:           "Group commits of the embedded storage that failed (disk full, I/O errors); their writes were reported as errors.",
		StabilityLevel: compbasemetrics.ALPHA,
	})
	commitHalts = compbasemetrics.NewCounter(&compbasemetrics.CounterOpts{
		Name:           "kruntimes_storage_halts_total",
		Help:           "Times the embedded storage stopped accepting writes because a failed commit reached the data file; the server must be restarted.",
		StabilityLevel: compbasemetrics.ALPHA,
	})
	historyRevisions = compbasemetrics.NewGauge(&compbasemetrics.GaugeOpts{
		Name:           "kruntimes_storage_history_revisions",
		Help:           "Revisions between the compacted and the current revision of the embedded storage: how far back watches can resume.",
		StabilityLevel: compbasemetrics.ALPHA,
	})
	dataFileSize = compbasemetrics.NewGauge(&compbasemetrics.GaugeOpts{
		Name:           "kruntimes_storage_data_file_size_bytes",
		Help:           "Size of the embedded storage's data file; it grows and is not shrunk by compaction, which frees pages inside it for reuse.",
		StabilityLevel: compbasemetrics.ALPHA,
	})

	registerMetrics sync.Once
)

func registerStorageMetrics() {
	registerMetrics.Do(func() {
		legacyregistry.MustRegister(commitDuration, commitWrites, commitFailures, commitHalts, historyRevisions, dataFileSize)
	})
}

func (b *Backend) recordHistory() {
	historyRevisions.Set(float64(b.rev.Load() - b.compactRev.Load()))
}
