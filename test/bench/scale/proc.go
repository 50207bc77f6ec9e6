package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procMemory is a process's memory as the kernel counts it.
type procMemory struct {
	// RSS is resident memory; Anon the part that is the process's own
	// (heap, stacks), File the part that is mapped files (bbolt's mmap)
	// and could be reclaimed; HWM the peak RSS.
	RSS, Anon, File, HWM int64
}

// readProcMemory reads /proc/<pid>/status.
func readProcMemory(pid int) (procMemory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procMemory{}, err
	}
	defer f.Close()
	var m procMemory
	fields := map[string]*int64{"VmRSS:": &m.RSS, "RssAnon:": &m.Anon, "RssFile:": &m.File, "VmHWM:": &m.HWM}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Fields(sc.Text())
		if len(parts) >= 2 {
			if p, ok := fields[parts[0]]; ok {
				kb, _ := strconv.ParseInt(parts[1], 10, 64)
				*p = kb << 10
			}
		}
	}
	return m, sc.Err()
}

// cpuTime is the user+system CPU a process used so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which may hold spaces, in parentheses.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	// USER_HZ is 100 on Linux.
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// heapFromPprof reads HeapInuse from a Go heap profile in text form
// (/debug/pprof/heap?debug=1); with gc=1 the server collects first, so it
// is close to the live heap.
func heapFromPprof(ctx context.Context, client *http.Client, url string) (int64, error) {
	body, err := httpGet(ctx, client, url+"/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return 0, err
	}
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapInuse = "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no HeapInuse in the heap profile at %s", url)
}

// httpGet returns the body of a successful GET of url.
func httpGet(ctx context.Context, client *http.Client, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp.Body, nil
}

// unixClient talks HTTP over the unix socket at path (a debug socket).
func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
}

// promValue reads one unlabelled sample from a Prometheus text exposition.
func promValue(ctx context.Context, client *http.Client, url, name string) (float64, error) {
	body, err := httpGet(ctx, client, url)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no %s at %s", name, url)
}

// dirSize is the size of the files under dir.
func dirSize(dir string) int64 {
	var total int64
	_ = filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			total += info.Size()
		}
		return nil
	})
	return total
}

// saveHeapProfile writes the server's heap profile, after a GC, to path.
func saveHeapProfile(ctx context.Context, client *http.Client, url, path string) error {
	body, err := httpGet(ctx, client, url+"/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	defer body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
