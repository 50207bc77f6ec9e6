package logfanout

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var upstreamStreams = metrics.NewGauge(&metrics.GaugeOpts{
	Namespace: "kruntimes", Subsystem: "run_log",
	Name:           "upstream_streams",
	Help:           "FollowLog streams this server holds open to runtimeds for follows of running tasks and Ready functions: one per followed attempt, plus one per follower catching up on its own.",
	StabilityLevel: metrics.ALPHA,
})

var registerMetricsOnce sync.Once

func registerMetrics() {
	registerMetricsOnce.Do(func() { legacyregistry.MustRegister(upstreamStreams) })
}
