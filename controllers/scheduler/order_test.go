package scheduler

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
)

// orderSeed replays the shuffle of a failed TestOldestOrdersByCreationThenArrival.
var orderSeed = flag.Uint64("order-seed", 0, "seed of the shuffle in TestOldestOrdersByCreationThenArrival; 0 draws one, which the test logs")

// TestOldestOrdersByCreationThenArrival checks the order a Runtime's line
// wakes its parked Runs in, which is the order its free slots are given
// in: creationTimestamp (whole seconds) first, then the order the
// scheduler saw the Runs arrive, then UID.
func TestOldestOrdersByCreationThenArrival(t *testing.T) {
	s := &Scheduler{arrivals: newArrivals()}
	var want []*v1alpha1.Run
	for i := range 30 {
		run := &v1alpha1.Run{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("r%d", i),
			// Three Runs per second, seen in creation order.
			CreationTimestamp: metav1.NewTime(testNow.Add(time.Duration(i/3) * time.Second)),
			UID:               types.UID(fmt.Sprintf("uid-%02d", 29-i)), // UID order is not age order
		}}
		s.arrivals.see(run.UID)
		want = append(want, run)
	}
	// A Run the scheduler never saw arrive (seq 0) sorts by UID among its
	// second's Runs; give it a second of its own.
	unseen := &v1alpha1.Run{ObjectMeta: metav1.ObjectMeta{Name: "unseen", UID: "uid-x",
		CreationTimestamp: metav1.NewTime(testNow.Add(-time.Second))}}
	want = append([]*v1alpha1.Run{unseen}, want...)

	seed := *orderSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("shuffle seed %d; replay it with -args -order-seed=%d", seed, seed)
	shuffle := rand.New(rand.NewPCG(seed, seed))
	shuffled := append([]*v1alpha1.Run(nil), want...)
	shuffle.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for _, n := range []int{1, 3, 8, 9, len(want), len(want) + 5} {
		ls := newLines(func(_, runtime string) string { return runtime })
		for _, run := range shuffled {
			ls.try(lineEntry{key: run.Name, line: "ns/bash", created: run.CreationTimestamp.Time,
				seq: s.arrivals.of(run.UID), uid: run.UID}, "ns", "bash")
			ls.park(run.Name)
		}
		got := ls.wake("ns/bash", n, "")
		assert.Equal(t, names(want[:min(n, len(want))]), got, "n=%d", n)
	}

	s.arrivals.forget(want[1].UID)
	assert.Zero(t, s.arrivals.of(want[1].UID))
}

func names(runs []*v1alpha1.Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.Name
	}
	return out
}
