package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The streams below are shaped like real `go test -json` output (Go 1.26),
// trimmed to the fields the report reads.

func start(pkg string) string { return fmt.Sprintf(`{"Action":"start","Package":%q}`, pkg) }

func run(pkg, test string) string {
	return fmt.Sprintf(`{"Action":"run","Package":%q,"Test":%q}`+"\n"+`{"Action":"output","Package":%q,"Test":%q,"Output":"=== RUN   %s\n"}`, pkg, test, pkg, test, test)
}

func output(pkg, test, line string) string {
	return fmt.Sprintf(`{"Action":"output","Package":%q,"Test":%q,"Output":%q}`, pkg, test, line+"\n")
}

func outcome(action, pkg, test string) string {
	if test == "" {
		return fmt.Sprintf(`{"Action":%q,"Package":%q,"Elapsed":0.1}`, action, pkg)
	}
	return fmt.Sprintf(`{"Action":%q,"Package":%q,"Test":%q,"Elapsed":0.1}`, action, pkg, test)
}

func passing(pkg, test string) string {
	return lines(run(pkg, test), output(pkg, test, "--- PASS: "+test+" (0.10s)"), outcome("pass", pkg, test))
}

func skipping(pkg, test, reason string) string {
	return lines(run(pkg, test), output(pkg, test, "    x_test.go:12: "+reason), output(pkg, test, "--- SKIP: "+test+" (0.00s)"), outcome("skip", pkg, test))
}

func lines(l ...string) string { return strings.Join(l, "\n") }

const pkgA, pkgB = "kruntimes.io/kruntimes/a", "kruntimes.io/kruntimes/b"

func TestReport(t *testing.T) {
	allowed := allowlist{{pkgA, "TestNeedsDevice"}: "no block device on CI", {pkgA, "TestTable/on_arm64"}: "amd64 only"}
	tests := []struct {
		name       string
		stream     string
		failOnSkip bool
		wantOK     bool
		// wantOutput must all appear in what the report prints; notWant must not.
		wantOutput []string
		notWant    []string
	}{
		{
			name:       "passing tests pass",
			stream:     lines(start(pkgA), passing(pkgA, "TestOne"), passing(pkgA, "TestTwo"), outcome("pass", pkgA, "")),
			failOnSkip: true, wantOK: true,
			wantOutput: []string{"--- PASS: TestOne", "2 passed", "PASS\n"},
			notWant:    []string{"=== RUN"},
		},
		{
			name: "a failing test fails the run and its logs are printed as it runs",
			stream: lines(start(pkgA), run(pkgA, "TestBroken"), output(pkgA, "TestBroken", "    x_test.go:9: got 403 Forbidden"),
				output(pkgA, "TestBroken", "--- FAIL: TestBroken (0.10s)"), outcome("fail", pkgA, "TestBroken"), outcome("fail", pkgA, "")),
			failOnSkip: true, wantOK: false,
			wantOutput: []string{"x_test.go:9: got 403 Forbidden", "FAIL test   " + pkgA + " TestBroken", "FAIL pkg    " + pkgA},
		},
		{
			name:       "a skip that is not allowed fails the run and says why the test skipped",
			stream:     lines(start(pkgA), skipping(pkgA, "TestDiskFull", "cannot mount a tmpfs (needs root)"), outcome("pass", pkgA, "")),
			failOnSkip: true, wantOK: false,
			wantOutput: []string{"SKIP (not allowed) " + pkgA + " TestDiskFull: x_test.go:12: cannot mount a tmpfs (needs root)"},
		},
		{
			name:       "a skip that is not allowed is listed but passes without --fail-on-skip",
			stream:     lines(start(pkgA), skipping(pkgA, "TestDiskFull", "needs root"), outcome("pass", pkgA, "")),
			failOnSkip: false, wantOK: true,
			wantOutput: []string{"SKIP " + pkgA + " TestDiskFull"},
		},
		{
			name:       "an allowed skip passes and is listed with its reason",
			stream:     lines(start(pkgA), skipping(pkgA, "TestNeedsDevice", "no /dev/mapper/control"), outcome("pass", pkgA, "")),
			failOnSkip: true, wantOK: true,
			wantOutput: []string{"skip (allowed) " + pkgA + " TestNeedsDevice: no block device on CI"},
		},
		{
			name:       "the allowlist names a subtest by its full name",
			stream:     lines(start(pkgA), run(pkgA, "TestTable"), skipping(pkgA, "TestTable/on_arm64", "amd64 only"), outcome("pass", pkgA, "TestTable"), outcome("pass", pkgA, "")),
			failOnSkip: true, wantOK: true,
		},
		{
			name:       "the same test name in another package is not allowed",
			stream:     lines(start(pkgB), skipping(pkgB, "TestNeedsDevice", "no device"), outcome("pass", pkgB, "")),
			failOnSkip: true, wantOK: false,
		},
		{
			name: "a build failure fails the run and its compiler output is printed",
			stream: lines(
				`{"ImportPath":"kruntimes.io/kruntimes/b [kruntimes.io/kruntimes/b.test]","Action":"build-output","Output":"# kruntimes.io/kruntimes/b [kruntimes.io/kruntimes/b.test]\n"}`,
				`{"ImportPath":"kruntimes.io/kruntimes/b [kruntimes.io/kruntimes/b.test]","Action":"build-output","Output":"b/b_test.go:3:44: undefined: x\n"}`,
				`{"ImportPath":"kruntimes.io/kruntimes/b [kruntimes.io/kruntimes/b.test]","Action":"build-fail"}`,
				start(pkgA), passing(pkgA, "TestOne"), outcome("pass", pkgA, ""),
				start(pkgB), `{"Action":"output","Package":"kruntimes.io/kruntimes/b","Output":"FAIL\tkruntimes.io/kruntimes/b [build failed]\n"}`,
				`{"Action":"fail","Package":"kruntimes.io/kruntimes/b","Elapsed":0,"FailedBuild":"kruntimes.io/kruntimes/b [kruntimes.io/kruntimes/b.test]"}`),
			failOnSkip: true, wantOK: false,
			wantOutput: []string{"b/b_test.go:3:44: undefined: x", "FAIL build  kruntimes.io/kruntimes/b [kruntimes.io/kruntimes/b.test]"},
		},
		{
			name: "a package that fails with every test passed fails the run (TestMain found a data race in a component log)",
			stream: lines(start(pkgA), passing(pkgA, "TestOne"),
				`{"Action":"output","Package":"kruntimes.io/kruntimes/a","Output":"e2e: WARNING: DATA RACE in logs/kruntimes-apiserver.log\n"}`,
				outcome("fail", pkgA, "")),
			failOnSkip: true, wantOK: false,
			wantOutput: []string{"e2e: WARNING: DATA RACE in logs/kruntimes-apiserver.log", "FAIL pkg    " + pkgA},
		},
		{
			name:       "a package without test files is not a skip",
			stream:     lines(start(pkgB), `{"Action":"output","Package":"kruntimes.io/kruntimes/b","Output":"?   \tkruntimes.io/kruntimes/b\t[no test files]\n"}`, outcome("skip", pkgB, "")),
			failOnSkip: true, wantOK: true,
		},
		{
			name: "a benchmark that ran reports no outcome of its own and counts as run",
			stream: lines(start(pkgA), run(pkgA, "BenchmarkCreate"), output(pkgA, "BenchmarkCreate", "BenchmarkCreate-2   \t       1\t    130.0 ns/op"),
				outcome("pass", pkgA, "")),
			failOnSkip: true, wantOK: true,
			wantOutput: []string{"1 benchmarks ran once", "BenchmarkCreate-2"},
		},
		{
			name: "benchmarks that ran next to one that failed are not failures",
			stream: lines(start(pkgA), run(pkgA, "BenchmarkList"), output(pkgA, "BenchmarkList", "BenchmarkList-2   \t       1\t    130.0 ns/op"),
				run(pkgA, "BenchmarkRacy"), output(pkgA, "BenchmarkRacy", "--- FAIL: BenchmarkRacy"), outcome("fail", pkgA, "BenchmarkRacy"),
				outcome("fail", pkgA, "")),
			failOnSkip: true, wantOK: false,
			wantOutput: []string{"1 benchmarks ran once, 1 failed", "FAIL test   " + pkgA + " BenchmarkRacy"},
			notWant:    []string{"FAIL test   " + pkgA + " BenchmarkList"},
		},
		{
			name: "a test still running when its package fails (a panic, a timeout) failed",
			stream: lines(start(pkgA), run(pkgA, "TestHangs"), output(pkgA, "TestHangs", "panic: test timed out after 30m0s"),
				outcome("fail", pkgA, "")),
			failOnSkip: true, wantOK: false,
			wantOutput: []string{"FAIL test   " + pkgA + " TestHangs", "panic: test timed out after 30m0s"},
		},
		{
			name:       "a stream that ends before its package finished fails",
			stream:     lines(start(pkgA), passing(pkgA, "TestOne")),
			failOnSkip: true, wantOK: false,
			wantOutput: []string{pkgA + " never finished"},
		},
		{
			name:       "output that is not go test -json is printed and fails",
			stream:     "go: updates to go.mod needed; to update it:\n\tgo mod tidy",
			failOnSkip: true, wantOK: false,
			wantOutput: []string{"go: updates to go.mod needed", "no test ran"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			r := newReport(&out, allowed, tc.failOnSkip)
			require.NoError(t, r.read(strings.NewReader(tc.stream+"\n")))
			assert.Equal(t, tc.wantOK, r.summarize(), out.String())
			for _, want := range tc.wantOutput {
				assert.Contains(t, out.String(), want)
			}
			for _, notWant := range tc.notWant {
				assert.NotContains(t, out.String(), notWant)
			}
		})
	}
}

// TestSummaryShowsFailedAssertions: a failed assertion printed long before
// the test's last lines (a component's shutdown log) is in the summary,
// which may be all a reader of CI sees; a log line is not.
func TestSummaryShowsFailedAssertions(t *testing.T) {
	const test = "TestRecovery"
	stream := []string{start(pkgA), run(pkgA, test),
		output(pkgA, test, "    x_test.go:40: created Pod silent"),
		output(pkgA, test, "    x_test.go:455: "),
		output(pkgA, test, "        \tError Trace:\t/src/x_test.go:455"),
		output(pkgA, test, "        \tError:      \tNot equal: "),
		output(pkgA, test, "        \t            \texpected: 1"),
		output(pkgA, test, "        \t            \tactual  : 2"),
		output(pkgA, test, "        \tMessages:   \tthe Pod is deleted once for all its Runs"),
	}
	for i := range 3 * maxKeptLines {
		stream = append(stream, output(pkgA, test, fmt.Sprintf("I1205 apiserver.go:%d] \"Shutting down\"", i)))
	}
	stream = append(stream, output(pkgA, test, "--- FAIL: "+test+" (3.47s)"), outcome("fail", pkgA, test), outcome("fail", pkgA, ""))

	var out bytes.Buffer
	r := newReport(&out, nil, true)
	require.NoError(t, r.read(strings.NewReader(lines(stream...)+"\n")))
	require.False(t, r.summarize())
	_, summary, ok := strings.Cut(out.String(), "==== testreport:")
	require.True(t, ok, out.String())
	for _, want := range []string{"x_test.go:455:", "Error Trace:\t/src/x_test.go:455", "actual  : 2", "the Pod is deleted once for all its Runs", "--- FAIL: " + test} {
		assert.Contains(t, summary, want)
	}
	assert.NotContains(t, summary, "created Pod silent", "a log line is no assertion")
	assert.NotContains(t, summary, "apiserver.go:0]", "only the last lines of the log")
}

func TestParseAllowlist(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    allowlist
		wantErr string
	}{
		{
			name: "entries with reasons; comments and blank lines ignored",
			in:   "# why these may skip\n\nexample.com/a TestX needs a GPU\n  example.com/b TestY/sub  flaky upstream \n",
			want: allowlist{{"example.com/a", "TestX"}: "needs a GPU", {"example.com/b", "TestY/sub"}: "flaky upstream"},
		},
		{name: "an entry without a reason is rejected", in: "example.com/a TestX\n", wantErr: "line 1"},
		{name: "a test listed twice is rejected", in: "example.com/a TestX one\nexample.com/a TestX two\n", wantErr: "listed twice"},
		{name: "an empty file allows nothing", in: "", want: allowlist{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAllowlist([]byte(tc.in))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
