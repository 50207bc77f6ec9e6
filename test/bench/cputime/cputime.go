package cputime

import (
	"os"
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

// Now takes a Sample.
func Now() Sample {
	return Sample{
		self:        rusage(syscall.RUSAGE_SELF),
		waited:      rusage(syscall.RUSAGE_CHILDREN),
		descendants: descendantCPU(os.Getpid()),
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
	end := Now()
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

// descendantCPU is the user+system CPU of every descendant of pid, by PID,
// from /proc; the kernel counts it in ticks of 10 ms, so a benchmark
// should run long enough for that not to matter.
func descendantCPU(pid int) map[int]time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	cpu := map[int]time.Duration{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, used, ok := readStat(p)
		if !ok {
			continue
		}
		parent[p], cpu[p] = ppid, used
	}
	out := map[int]time.Duration{}
	for p, used := range cpu {
		for a := parent[p]; a > 1; a = parent[a] {
			if a == pid {
				out[p] = used
				break
			}
		}
	}
	return out
}

// readStat reads a process's parent and user+system CPU from
// /proc/<pid>/stat.
func readStat(pid int) (ppid int, cpu time.Duration, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// The fields after the command name, which may hold spaces and sits in
	// parentheses: state, ppid, …, utime (the 12th), stime.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, 0, false
	}
	fields := strings.Fields(s[i+2:])
	if len(fields) < 13 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(fields[1])
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	// USER_HZ is 100 on Linux.
	return ppid, time.Duration(utime+stime) * 10 * time.Millisecond, true
}
