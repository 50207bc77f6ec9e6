package embedded

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/apis/example"
)

// TestHistoryPagesAreFilled checks that the history log, whose keys only
// grow, packs its pages: bbolt splits pages half full by default, which
// for append-only keys leaves those pages that empty for good. (bbolt also
// keeps two keys on the right of a split, so with values of a few hundred
// bytes 59% is as full as pages get; the default gives 44%.)
func TestHistoryPagesAreFilled(t *testing.T) {
	b := openTestBackend(t, Options{})
	s := podStore(t, b)
	ctx := context.Background()
	// Values of a few hundred bytes, as a Run is.
	labels := map[string]string{"pad": strings.Repeat("x", 400)}
	for i := range 2000 {
		name := fmt.Sprintf("pod-%d", i)
		pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels}}
		require.NoError(t, s.Create(ctx, "/pods/ns/"+name, pod, &example.Pod{}, 0))
	}
	require.NoError(t, b.db.View(func(tx *bolt.Tx) error {
		st := tx.Bucket(bucketLog).Stats()
		fill := float64(st.LeafInuse) / float64(st.LeafAlloc)
		t.Logf("log bucket: %d leaf pages, %.0f%% in use", st.LeafPageN, 100*fill)
		require.Greater(t, fill, 0.55, "history pages are left half empty")
		return nil
	}))
}
