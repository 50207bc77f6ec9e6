package memlimit

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Values of the limit besides a quantity.
const (
	// Auto takes Ratio of the container's memory limit, when it has one.
	Auto = "auto"
	// Off leaves the Go runtime without a limit.
	Off = "off"
)

// Ratio of the container's limit given to the Go runtime under Auto; the
// rest is for what the runtime does not count (thread stacks, cgo, the
// page cache of mapped files charged to the container).
const Ratio = 0.9

// Paths of the memory limit, cgroup v2 first, as the container sees them.
var cgroupLimitFiles = []string{
	"/sys/fs/cgroup/memory.max",
	"/sys/fs/cgroup/memory/memory.limit_in_bytes",
}

// noLimit is where cgroup v1 reports "unlimited" (a page-rounded MaxInt64).
const noLimit = int64(1) << 60

// Validate checks value: Auto, Off or a quantity such as 900Mi.
func Validate(value string) error {
	_, err := parse(value)
	return err
}

// Apply sets the Go runtime's soft memory limit from value, unless the
// GOMEMLIMIT environment variable already did. It returns the limit in
// effect (0 for none) and where it came from.
func Apply(value string) (int64, string, error) {
	if env := os.Getenv("GOMEMLIMIT"); env != "" {
		return currentLimit(), "GOMEMLIMIT", nil
	}
	limit, err := parse(value)
	if err != nil {
		return 0, "", err
	}
	source := "flag"
	if value == Auto {
		container, ok := ContainerLimit()
		if !ok {
			return 0, "no container memory limit", nil
		}
		limit, source = int64(float64(container)*Ratio), fmt.Sprintf("%.0f%% of the container's %d bytes", Ratio*100, container)
	}
	if limit <= 0 {
		return 0, "off", nil
	}
	debug.SetMemoryLimit(limit)
	return limit, source, nil
}

// parse returns the limit value states: -1 for Auto, 0 for Off.
func parse(value string) (int64, error) {
	switch value {
	case Auto:
		return -1, nil
	case Off, "":
		return 0, nil
	}
	q, err := resource.ParseQuantity(value)
	if err != nil || q.Sign() <= 0 {
		return 0, fmt.Errorf("want %q, %q or a positive quantity such as 900Mi, got %q", Auto, Off, value)
	}
	return q.Value(), nil
}

// ContainerLimit reads this process's cgroup memory limit.
func ContainerLimit() (int64, bool) {
	for _, path := range cgroupLimitFiles {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= noLimit {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

func currentLimit() int64 {
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		return l
	}
	return 0
}
