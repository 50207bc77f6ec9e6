package cputime

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Sample is the CPU used up to a moment: by this process, by the
// descendants it waited for, and by each descendant then alive.
type Sample struct {
	self, waited time.Duration
	descendants  map[int]time.Duration
}

// Now takes a Sample. This process's own CPU is read after /proc, so that
// reading /proc is not counted in what Report measures.
func Now() Sample {
	descendants := descendantCPU(os.Getpid())
	return Sample{
		self:        rusage(syscall.RUSAGE_SELF),
		waited:      rusage(syscall.RUSAGE_CHILDREN),
		descendants: descendants,
	}
}

func rusage(who int) time.Duration {
	var ru syscall.Rusage
	// Getrusage of this process cannot fail.
	_ = syscall.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Report adds the CPU used since start, per operation of b, as
// cpu-µs/op (this process) and child-cpu-µs/op (its descendants: those
// alive at the end, and those it waited for in between, as the kernel
// counts them). Call it after b.Loop returned false, when b.N is the
// number of operations measured.
func Report(b *testing.B, start Sample) {
	// Its own CPU first, for the same reason as in Now.
	end := Sample{self: rusage(syscall.RUSAGE_SELF), waited: rusage(syscall.RUSAGE_CHILDREN)}
	end.descendants = descendantCPU(os.Getpid())
	children := end.waited - start.waited
	for pid, cpu := range end.descendants {
		children += cpu - start.descendants[pid]
	}
	// What those that ended had used before start is in waited as well.
	for pid, cpu := range start.descendants {
		if _, alive := end.descendants[pid]; !alive {
			children -= cpu
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64((end.self-start.self).Microseconds())/n, "cpu-µs/op")
	b.ReportMetric(float64(children.Microseconds())/n, "child-cpu-µs/op")
}

// descendantCPU is the user+system CPU of every descendant of pid, by PID.
func descendantCPU(pid int) map[int]time.Duration {
	out := map[int]time.Duration{}
	for p, st := range descendants(pid) {
		out[p] = st.cpu
	}
	return out
}

// ByCommand is the user+system CPU each descendant of pid used so far,
// summed by command name (runtimed, python3, …): for a benchmark that
// drives processes it did not start, such as a local cluster's.
func ByCommand(pid int) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, st := range descendants(pid) {
		out[st.command] += st.cpu
	}
	return out
}

// PerOp formats the CPU each command used between two ByCommand samples,
// per operation: "kube-apiserver 3.012 ms, runtimed 1.250 ms".
func PerOp(before, after map[string]time.Duration, ops int) string {
	var parts []string
	for _, command := range slices.Sorted(maps.Keys(after)) {
		if used := after[command] - before[command]; used > 0 {
			parts = append(parts, fmt.Sprintf("%s %.3f ms", command, float64(used.Microseconds())/1e3/float64(ops)))
		}
	}
	return strings.Join(parts, ", ")
}

// ClusterPID is the local cluster's process whose descendants are its
// components: the one holding the lock of its state directory; 0 when no
// cluster holds it.
func ClusterPID(stateDir string) int {
	lock, _ := os.ReadFile(filepath.Join(stateDir, "lock"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(lock)))
	return pid
}

// procStat is what the benchmarks read of a process.
type procStat struct {
	command string
	ppid    int
	cpu     time.Duration
}

// descendants reads /proc for the descendants of pid; the kernel counts
// CPU in ticks of 10 ms, so a benchmark should run long enough for that
// not to matter.
func descendants(pid int) map[int]procStat {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	all := map[int]procStat{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(p); ok {
			all[p] = st
		}
	}
	out := map[int]procStat{}
	for p, st := range all {
		for a := st.ppid; a > 1; a = all[a].ppid {
			if a == pid {
				out[p] = st
				break
			}
		}
	}
	return out
}

// readStat reads a process's command, parent and user+system CPU from
// /proc/<pid>/stat.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// "pid (command) state ppid …": the command may hold spaces, so the
	// fields are counted after its closing parenthesis; utime is the
	// 12th of them, stime the 13th.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+2 > len(s) {
		return procStat{}, false
	}
	fields := strings.Fields(s[end+2:])
	if len(fields) < 13 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(fields[1])
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	// USER_HZ is 100 on Linux.
	return procStat{command: s[open+1 : end], ppid: ppid, cpu: time.Duration(utime+stime) * 10 * time.Millisecond}, true
}
