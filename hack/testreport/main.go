// Command testreport reads `go test -json` on stdin, prints the tests' output
// as they run and a summary at the end, and exits non-zero when the run
// failed: a test or package failed, a package did not build, the stream
// ended before its packages finished, or a test skipped without an entry in
// the allowed-skips file. A skip is a test that did not run; without this,
// one that skips on every CI machine looks exactly like one that passes.
//
// Usage:
//
//	set -o pipefail
//	go test -json ./... 2>&1 | testreport --allowed-skips hack/allowed-skips.txt
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

func main() {
	allowedPath := flag.String("allowed-skips", "", "File listing the tests that may skip, one `<package> <test> <reason>` per line. Empty: no skip is allowed.")
	failOnSkip := flag.Bool("fail-on-skip", true, "Fail the run when a test not in --allowed-skips skips. Off, skips are only listed in the summary.")
	flag.Parse()

	allowed := allowlist{}
	if *allowedPath != "" {
		data, err := os.ReadFile(*allowedPath)
		if err != nil {
			fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
			os.Exit(2)
		}
		if allowed, err = parseAllowlist(data); err != nil {
			fmt.Fprintf(os.Stderr, "testreport: %s: %v\n", *allowedPath, err)
			os.Exit(2)
		}
	}
	r := newReport(os.Stdout, allowed, *failOnSkip)
	if err := r.read(os.Stdin); err != nil {
		fmt.Fprintf(os.Stderr, "testreport: reading go test output: %v\n", err)
		os.Exit(2)
	}
	if !r.summarize() {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time        time.Time
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
	// ImportPath names the package of build-output and build-fail events.
	ImportPath string
}

// testKey names one test of one package.
type testKey struct{ pkg, test string }

func (k testKey) String() string { return k.pkg + " " + k.test }

// allowlist maps each test that may skip to the reason it may.
type allowlist map[testKey]string

// parseAllowlist reads `<package> <test> <reason>` lines; blank lines and
// lines starting with # are ignored. Every entry must say why.
func parseAllowlist(data []byte) (allowlist, error) {
	allowed := allowlist{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			return nil, fmt.Errorf("line %d: want `<package> <test> <reason>`, got %q", i+1, line)
		}
		key := testKey{fields[0], fields[1]}
		if _, dup := allowed[key]; dup {
			return nil, fmt.Errorf("line %d: %s is listed twice", i+1, key)
		}
		allowed[key] = strings.Join(fields[2:], " ")
	}
	return allowed, nil
}

// maxKeptLines bounds the output remembered per test, for the summary.
const maxKeptLines = 20

// maxAssertionLines bounds the failed assertions remembered per test: a
// test's assertions are printed long before its last lines (a component's
// shutdown log, say), and the summary may be all a reader of CI sees.
const maxAssertionLines = 60

// report follows one `go test -json` stream.
type report struct {
	out        io.Writer
	allowed    allowlist
	failOnSkip bool
	started    time.Time

	passed, benchmarks   int
	failed               []testKey
	skipped              []testKey
	failedPackages       []string
	failedBuilds         []string
	unfinishedPackages   map[string]bool
	running              map[testKey]bool
	output               map[testKey][]string
	assertions           map[testKey]*assertionLines
	sawEvent, sawPackage bool
}

func newReport(out io.Writer, allowed allowlist, failOnSkip bool) *report {
	return &report{
		out:                out,
		allowed:            allowed,
		failOnSkip:         failOnSkip,
		started:            time.Now(),
		unfinishedPackages: map[string]bool{},
		running:            map[testKey]bool{},
		output:             map[testKey][]string{},
		assertions:         map[testKey]*assertionLines{},
	}
}

// read consumes the stream until EOF. Lines that are not JSON events (go
// command errors, "go: downloading" notes) are printed as they are.
func (r *report) read(in io.Reader) error {
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for scanner.Scan() {
		line := scanner.Bytes()
		var ev event
		if !bytes.HasPrefix(line, []byte("{")) || json.Unmarshal(line, &ev) != nil || ev.Action == "" {
			fmt.Fprintf(r.out, "%s\n", line)
			continue
		}
		r.handle(ev)
	}
	return scanner.Err()
}

func (r *report) handle(ev event) {
	r.sawEvent = true
	key := testKey{ev.Package, ev.Test}
	switch ev.Action {
	case "build-output":
		r.print(ev.Output)
		return
	case "build-fail":
		r.failedBuilds = append(r.failedBuilds, ev.ImportPath)
		return
	case "output":
		if ev.Test != "" && !isFraming(ev.Output) {
			r.keep(key, ev.Output)
		}
		if !isFraming(ev.Output) {
			r.print(ev.Output)
		}
		return
	}
	if ev.Test == "" {
		r.handlePackage(ev)
		return
	}
	switch ev.Action {
	case "run":
		r.running[key] = true
	case "pass":
		r.passed++
		r.finish(key)
	case "fail":
		r.failed = append(r.failed, key)
		delete(r.running, key)
	case "skip":
		r.skipped = append(r.skipped, key)
		delete(r.running, key)
	}
}

func (r *report) handlePackage(ev event) {
	switch ev.Action {
	case "start":
		r.sawPackage = true
		r.unfinishedPackages[ev.Package] = true
	case "pass", "skip":
		// A package skips when it has no test files.
		delete(r.unfinishedPackages, ev.Package)
		r.endPackage(ev.Package)
	case "fail":
		delete(r.unfinishedPackages, ev.Package)
		r.failedPackages = append(r.failedPackages, ev.Package)
		r.endPackage(ev.Package)
	}
}

// endPackage settles the tests of pkg that never reported an outcome. A
// benchmark that ran reports none (a failing one does); any other such test
// was running when its package failed (a panic, a timeout, an os.Exit).
func (r *report) endPackage(pkg string) {
	for key := range r.running {
		if key.pkg != pkg {
			continue
		}
		if strings.HasPrefix(key.test, "Benchmark") {
			r.benchmarks++
			r.finish(key)
			continue
		}
		r.failed = append(r.failed, key)
		delete(r.running, key)
	}
}

func (r *report) finish(key testKey) {
	delete(r.running, key)
	delete(r.output, key)
	delete(r.assertions, key)
}

// keep remembers the last lines a test printed; a skip's reason and a
// failure's last words are among them.
func (r *report) keep(key testKey, line string) {
	line = strings.TrimRight(line, "\n")
	a := r.assertions[key]
	if a == nil {
		a = &assertionLines{}
		r.assertions[key] = a
	}
	a.see(line)
	lines := append(r.output[key], line)
	if len(lines) > maxKeptLines {
		lines = lines[len(lines)-maxKeptLines:]
	}
	r.output[key] = lines
}

func (r *report) print(s string) { io.WriteString(r.out, s) }

// isFraming reports whether line only marks which test runs; the test's
// own lines and its --- PASS/FAIL/SKIP line say all that matters.
func isFraming(line string) bool {
	for _, prefix := range []string{"=== RUN ", "=== PAUSE ", "=== CONT ", "=== NAME "} {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

// summarize prints the summary and reports whether the run passed.
func (r *report) summarize() bool {
	ok := true
	fmt.Fprintf(r.out, "\n==== testreport: %d passed, %d benchmarks ran once, %d failed, %d skipped, %d packages failed, %d builds failed (%s)\n",
		r.passed, r.benchmarks, len(r.failed), len(r.skipped), len(r.failedPackages), len(r.failedBuilds), time.Since(r.started).Round(time.Second))

	if !r.sawEvent || !r.sawPackage {
		fmt.Fprintln(r.out, "FAIL: no test ran: is this `go test -json` output? (see the lines above)")
		ok = false
	}
	for _, b := range sorted(r.failedBuilds) {
		fmt.Fprintf(r.out, "FAIL build  %s\n", b)
		ok = false
	}
	for _, pkg := range sorted(r.failedPackages) {
		fmt.Fprintf(r.out, "FAIL pkg    %s\n", pkg)
		ok = false
	}
	for _, key := range r.failed {
		fmt.Fprintf(r.out, "FAIL test   %s\n", key)
		if a := r.assertions[key]; a != nil {
			for _, line := range a.lines {
				fmt.Fprintf(r.out, "              %s\n", line)
			}
			if a.dropped > 0 {
				fmt.Fprintf(r.out, "              (%d more lines of failed assertions: see the test's output above)\n", a.dropped)
			}
		}
		for _, line := range lastLines(r.output[key], 5) {
			fmt.Fprintf(r.out, "              %s\n", line)
		}
		ok = false
	}
	for _, pkg := range sorted(keys(r.unfinishedPackages)) {
		fmt.Fprintf(r.out, "FAIL        %s never finished: go test stopped early (see its exit status above)\n", pkg)
		ok = false
	}

	var allowedSkips, unlisted []testKey
	for _, key := range r.skipped {
		if _, ok := r.allowed[key]; ok {
			allowedSkips = append(allowedSkips, key)
		} else {
			unlisted = append(unlisted, key)
		}
	}
	for _, key := range allowedSkips {
		fmt.Fprintf(r.out, "skip (allowed) %s: %s\n", key, r.allowed[key])
	}
	for _, key := range unlisted {
		label := "SKIP (not allowed)"
		if !r.failOnSkip {
			label = "SKIP"
		}
		fmt.Fprintf(r.out, "%s %s: %s\n", label, key, skipReason(r.output[key]))
		if r.failOnSkip {
			ok = false
		}
	}
	if len(unlisted) > 0 && r.failOnSkip {
		fmt.Fprintln(r.out, "A test that skips did not test anything. Make it run here, or add it with a one-line reason to the allowed-skips file.")
	}
	if ok {
		fmt.Fprintln(r.out, "PASS")
	} else {
		fmt.Fprintln(r.out, "FAIL")
	}
	return ok
}

// skipReason is what the test printed before its --- SKIP line: the t.Skip
// message is the last of it.
func skipReason(lines []string) string {
	var reason []string
	for _, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "--- SKIP") {
			break
		}
		reason = append(reason, strings.TrimSpace(line))
	}
	if len(reason) == 0 {
		return "(no reason given)"
	}
	return strings.Join(lastLines(reason, 2), " / ")
}

// assertionLines keeps the failed testify assertions a test printed:
// each is a "file_test.go:N: " line followed by lines indented with a tab
// (Error Trace, Error, Test, Messages).
type assertionLines struct {
	lines   []string
	dropped int
	inBlock bool
}

func (a *assertionLines) see(line string) {
	switch {
	case assertionHeader.MatchString(line):
		a.inBlock = true
	case a.inBlock && strings.HasPrefix(strings.TrimLeft(line, " "), "\t"):
	default:
		a.inBlock = false
		return
	}
	if len(a.lines) < maxAssertionLines {
		a.lines = append(a.lines, line)
	} else {
		a.dropped++
	}
}

// assertionHeader is how testify starts a failed assertion: the caller's
// file and line, and nothing after.
var assertionHeader = regexp.MustCompile(`^\s+\S+_test\.go:\d+: ?$`)

func lastLines(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return s
}
