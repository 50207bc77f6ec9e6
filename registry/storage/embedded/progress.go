package embedded

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
)

// progressEndpoint names the embedded storage to the feature checker.
const progressEndpoint = "kruntimes-embedded-storage"

// progressSupport answers the watch cache's feature check for
// RequestWatchProgress. The cache serves consistent reads and watch-list
// (sendInitialEvents=true) requests only when a process-wide checker has
// seen a storage that answers progress requests, and that checker learns it
// only by asking etcd for its version. The store answers progress requests
// (RequestWatchProgress + bookmarks, covered by the conformance suite), so
// it reports a version of etcd that has the fix the checker looks for.
type progressSupport struct{}

func (progressSupport) Endpoints() []string { return []string{progressEndpoint} }

func (progressSupport) Status(context.Context, string) (*clientv3.StatusResponse, error) {
	return &clientv3.StatusResponse{Version: "3.6.0"}, nil
}

var declareProgressSupportOnce sync.Once

// declareProgressSupport registers progressSupport with the checker and
// waits until the checker reports it (its check runs in a goroutine), so the
// first request after Open already takes the cache path.
func declareProgressSupport() {
	declareProgressSupportOnce.Do(func() {
		etcdfeature.DefaultFeatureSupportChecker.CheckClient(context.Background(), progressSupport{}, storage.RequestWatchProgress)
		_ = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return etcdfeature.DefaultFeatureSupportChecker.Supports(storage.RequestWatchProgress), nil
		})
	})
}
