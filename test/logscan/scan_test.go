package logscan

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
)

const raceReport = `==================
WARNING: DATA RACE
Write at 0x00c000012345 by goroutine 8:
  kruntimes.io/kruntimes/runtimed/tasks.(*Controller).finish()
      runtimed/tasks/controller.go:210 +0x44

Previous read at 0x00c000012345 by goroutine 7:
  kruntimes.io/kruntimes/runtimed/tasks.(*Controller).sync()
      runtimed/tasks/controller.go:150 +0x3c
==================
`

const panicReport = `panic: runtime error: invalid memory address or nil pointer dereference
[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x4a2b3c]

goroutine 42 [running]:
kruntimes.io/kruntimes/controllers/scheduler.(*Scheduler).bind(0x0)
	controllers/scheduler/bind.go:88 +0x1c
`

// sigquitDump is what a component writes when localcluster's stop sends
// SIGQUIT because it did not exit within the grace period.
const sigquitDump = `SIGQUIT: quit
PC=0x47a1c1 m=0 sigcode=0

goroutine 0 gp=0x1d2c0e0 m=0 mp=0x1d2d3c0 [idle]:
runtime.futex(0x1d2d500, 0x80, 0x0, 0x0, 0x0, 0x0)
	runtime/sys_linux_amd64.s:557 +0x21

goroutine 1 gp=0xc000002380 m=nil [select, 2 minutes]:
main.main()
	cmd/runtimed/main.go:60 +0x1f0
`

func TestScan(t *testing.T) {
	tests := []struct {
		name      string
		log       string
		wantKinds []string
		wantLines []int
		// wantExcerpt must appear in the first report's excerpt.
		wantExcerpt string
	}{
		{
			name:      "a race detector report is found with both accesses",
			log:       "I1130 12:00:00.000000 1 server.go:1] Serving\n" + raceReport + "I1130 12:00:01.000000 1 server.go:2] Still serving\n",
			wantKinds: []string{KindDataRace}, wantLines: []int{3},
			wantExcerpt: "Previous read at 0x00c000012345 by goroutine 7:",
		},
		{
			name:      "two races are two reports",
			log:       raceReport + raceReport,
			wantKinds: []string{KindDataRace, KindDataRace}, wantLines: []int{2, 12},
		},
		{
			name:      "an unrecovered panic with its goroutine trace is found",
			log:       "I1130 12:00:00.000000 1 scheduler.go:1] Binding\n" + panicReport,
			wantKinds: []string{KindPanic}, wantLines: []int{2},
			wantExcerpt: "controllers/scheduler/bind.go:88",
		},
		{
			name:      "other goroutines' log lines between a panic and its trace do not hide it",
			log:       "panic: boom\n\nI1130 12:00:00.000000 7 watch.go:1] Watch closed\nE1130 12:00:00.000000 8 lease.go:1] Renewing\n\ngoroutine 1 [running]:\nmain.main()\n",
			wantKinds: []string{KindPanic}, wantLines: []int{1},
		},
		{
			name:      "a re-panicked recovered panic is found once",
			log:       "panic: send on closed channel [recovered, repanicked]\n\tpanic: send on closed channel\n\ngoroutine 9 gp=0xc000102a80 m=4 mp=0xc000100008 [running]:\nmain.main()\n",
			wantKinds: []string{KindPanic}, wantLines: []int{1},
		},
		{
			name:      "a fatal error with its trace is found",
			log:       "fatal error: concurrent map writes\n\ngoroutine 17 [running]:\nmain.main.func1()\n",
			wantKinds: []string{KindFatalError}, wantLines: []int{1},
		},
		{
			name:      "a fatal error followed by the runtime stack is found",
			log:       "fatal error: out of memory\n\nruntime stack:\nruntime.throw()\n",
			wantKinds: []string{KindFatalError}, wantLines: []int{1},
		},
		{
			name: "the SIGQUIT goroutine dump of a component slow to stop is not a panic",
			log:  "I1130 12:00:00.000000 1 main.go:1] Shutting down\n" + sigquitDump,
		},
		{
			name: "a log message about a panic is not one",
			log: "E1130 12:00:00.000000 1 runtime.go:142] \"Observed a panic\" panic=\"boom\" stacktrace=<\n\tgoroutine 12 [running]:\n\tmain.main()\n >\n" +
				"I1130 12:00:00.000000 1 main.go:1] no panic: the server shut down cleanly\n",
		},
		{
			name: "a line starting with panic: that no trace follows is not the runtime's",
			log:  "panic: this is what the task script echoed\n" + strings.Repeat("I1130 12:00:00.000000 1 x.go:1] busy\n", traceWithin+5) + "goroutine 1 [running]:\n",
		},
		{
			name: "a compiler's fatal error is not a Go crash",
			log:  "x.c:1:10: fatal error: missing.h: No such file or directory\nfatal error: too many errors\ncompilation terminated.\n",
		},
		{
			name:      "a panic cut short by the end of the log still counts once its trace began",
			log:       "panic: boom\n\ngoroutine 1 [running]:",
			wantKinds: []string{KindPanic}, wantLines: []int{1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reports, err := Scan("component.log", strings.NewReader(tc.log))
			require.NoError(t, err)
			var kinds []string
			var lines []int
			for _, r := range reports {
				kinds = append(kinds, r.Kind)
				lines = append(lines, r.Line)
				assert.Equal(t, "component.log", r.Path)
			}
			assert.Equal(t, tc.wantKinds, kinds, "reports: %v", reports)
			assert.Equal(t, tc.wantLines, lines)
			if tc.wantExcerpt != "" {
				require.NotEmpty(t, reports)
				assert.Contains(t, strings.Join(reports[0].Excerpt, "\n"), tc.wantExcerpt)
			}
		})
	}
}

func TestScanDirsReadsEveryLogBelow(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		path := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	write("logs/kube-apiserver.log", "I1130 12:00:00.000000 1 x.go:1] fine\n")
	write("logs/pods/ns_pod_uid/runtimed/0.log", raceReport)
	write("logs/pods/ns_pod_uid/runtimed/1.log", panicReport)
	write("logs/pods/ns_pod_uid/runtimed/notes.txt", panicReport)
	write("controlplane/etcd.log", raceReport)

	reports, err := ScanDirs(filepath.Join(root, "logs"), filepath.Join(root, "controlplane"), filepath.Join(root, "missing"))
	require.NoError(t, err)
	var found []string
	for _, r := range reports {
		rel, err := filepath.Rel(root, r.Path)
		require.NoError(t, err)
		found = append(found, rel+" "+r.Kind)
	}
	assert.ElementsMatch(t, []string{
		"logs/pods/ns_pod_uid/runtimed/0.log DATA RACE",
		"logs/pods/ns_pod_uid/runtimed/1.log panic",
		"controlplane/etcd.log DATA RACE",
	}, found)
}

// TestScanFindsWhatTheRuntimeWrites runs small programs that race, panic,
// crash on a concurrent map write, and are dumped by SIGQUIT, and scans what
// the Go runtime of this toolchain really writes, so a change in the
// runtime's wording cannot silently blind the scan.
func TestScanFindsWhatTheRuntimeWrites(t *testing.T) {
	programs := map[string]string{
		"racy": `package main

import "fmt"

func main() {
	counter := 0
	done := make(chan bool)
	go func() { counter++; done <- true }()
	counter++
	<-done
	fmt.Println(counter)
}
`,
		"panics": `package main

func main() {
	var m map[string]int
	m["boom"] = 1
}
`,
		"mapwrites": `package main

func main() {
	m := map[int]int{}
	for i := 0; i < 4; i++ {
		go func() {
			for j := 0; ; j++ {
				m[j%100] = j
			}
		}()
	}
	select {}
}
`,
		"slowtostop": `package main

import (
	"fmt"
	"time"
)

func main() {
	fmt.Println("listening")
	time.Sleep(time.Hour)
}
`,
	}
	dir := t.TempDir()
	for name, src := range programs {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, name), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name, "main.go"), []byte(src), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/logscan\n\ngo 1.26\n"), 0o644))
	build := func(name string, flags ...string) string {
		out := filepath.Join(dir, "bin", name)
		cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", out, "./"+name)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
		output, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", output)
		return out
	}
	logOf := func(t *testing.T, cmd *exec.Cmd) string {
		path := filepath.Join(t.TempDir(), "component.log")
		f, err := os.Create(path)
		require.NoError(t, err)
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
		_ = cmd.Run() // each exits non-zero, which is the point
		return path
	}
	scan := func(t *testing.T, path string) []string {
		reports, err := ScanFile(path)
		require.NoError(t, err)
		var kinds []string
		for _, r := range reports {
			kinds = append(kinds, r.Kind)
		}
		return kinds
	}

	t.Run("a data race in a -race binary", func(t *testing.T) {
		path := logOf(t, exec.Command(build("racy", "-race")))
		assert.Equal(t, []string{KindDataRace}, scan(t, path), "log:\n%s", readFile(t, path))
	})
	t.Run("an unrecovered panic", func(t *testing.T) {
		path := logOf(t, exec.Command(build("panics")))
		assert.Equal(t, []string{KindPanic}, scan(t, path), "log:\n%s", readFile(t, path))
	})
	t.Run("a fatal error", func(t *testing.T) {
		path := logOf(t, exec.Command(build("mapwrites")))
		assert.Equal(t, []string{KindFatalError}, scan(t, path), "log:\n%s", readFile(t, path))
	})
	t.Run("the SIGQUIT dump of a process slow to stop is not a crash", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "component.log")
		f, err := os.Create(path)
		require.NoError(t, err)
		defer f.Close()
		cmd := exec.Command(build("slowtostop"))
		cmd.Stdout, cmd.Stderr = f, f
		require.NoError(t, cmd.Start())
		// SIGQUIT once it runs main, as localcluster's stop does.
		require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return bytes.Contains(readFile(t, path), []byte("listening")), nil
		}))
		require.NoError(t, cmd.Process.Signal(syscall.SIGQUIT))
		_ = cmd.Wait()
		log := readFile(t, path)
		require.Contains(t, string(log), "SIGQUIT: quit", "the runtime wrote its dump")
		require.Contains(t, string(log), "goroutine 1")
		assert.Empty(t, scan(t, path), "log:\n%s", log)
	})
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}
