package logscan

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Kinds of report.
const (
	KindDataRace   = "DATA RACE"
	KindPanic      = "panic"
	KindFatalError = "fatal error"
)

const (
	// excerptLines bounds the lines kept of each report: the race's two
	// accesses, or the panic value and the top of the panicking stack.
	excerptLines = 40
	// traceWithin is how many lines after "panic:" or "fatal error:" the
	// goroutine trace must begin for the line to be the runtime's. Other
	// goroutines' log lines may land in between.
	traceWithin = 20
	// raceSeparator opens and closes each race detector report.
	raceSeparator = "=================="
)

// traceStart matches the first line of a stack the runtime prints after a
// panic or fatal error: "goroutine 7 [running]:" (with GOTRACEBACK=system
// also "goroutine 7 gp=0x… m=3 mp=0x… [running]:"), or "runtime stack:".
var traceStart = regexp.MustCompile(`^(goroutine \d+ .*\[.*\]:|runtime stack:)$`)

// Report is one race or crash report found in a log.
type Report struct {
	// Path is the log's file; Line the 1-based line the report starts on.
	Path string
	Line int
	// Kind is KindDataRace, KindPanic or KindFatalError.
	Kind string
	// Excerpt is the report's first lines.
	Excerpt []string
}

func (r Report) String() string {
	return fmt.Sprintf("%s in %s:%d\n    %s", r.Kind, r.Path, r.Line, strings.Join(r.Excerpt, "\n    "))
}

// Scan returns the reports in the log read from r; path only labels them.
//
// A race is the race detector's "WARNING: DATA RACE" block. A panic or fatal
// error is a line that starts with "panic: " or "fatal error: " and is
// followed by a goroutine trace, which is how the runtime prints an
// unrecovered one; so a log message that merely mentions a panic does not
// count, nor does the goroutine dump a component writes on SIGQUIT when it
// is slow to stop ("SIGQUIT: quit" and stacks, no panic line).
func Scan(path string, r io.Reader) ([]Report, error) {
	var (
		reports []Report
		open    *Report // the report being read
		// traceBy is the last line by which open, a panic or fatal error
		// candidate, must show a trace; 0 once it has (or for a race).
		traceBy int
	)
	closeOpen := func() {
		if open != nil && traceBy == 0 {
			reports = append(reports, *open)
		}
		open, traceBy = nil, 0
	}
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, err := br.ReadString('\n')
		if line == "" && err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return reports, err
		}
		line = strings.TrimRight(line, "\r\n")

		kind := reportKind(line)
		if open != nil && traceBy != 0 && kind != "" {
			open, traceBy = nil, 0 // a later candidate replaces one without a trace yet
		}
		if open != nil {
			if open.Kind == KindDataRace && line == raceSeparator {
				closeOpen()
				continue
			}
			if traceBy != 0 && traceStart.MatchString(line) {
				traceBy = 0
			}
			if len(open.Excerpt) < excerptLines {
				open.Excerpt = append(open.Excerpt, line)
			}
			switch {
			case traceBy != 0 && n >= traceBy:
				open, traceBy = nil, 0 // no trace followed: not the runtime's
			case traceBy == 0 && len(open.Excerpt) >= excerptLines && open.Kind != KindDataRace:
				closeOpen()
			}
			if open != nil {
				continue
			}
		}

		if kind != "" {
			open = &Report{Path: path, Line: n, Kind: kind, Excerpt: []string{line}}
			if kind != KindDataRace {
				traceBy = n + traceWithin
			}
		}
	}
	closeOpen()
	return reports, nil
}

// reportKind reports which kind of report line starts, if any.
func reportKind(line string) string {
	switch {
	case line == "WARNING: DATA RACE":
		return KindDataRace
	case strings.HasPrefix(line, "panic: "):
		return KindPanic
	case strings.HasPrefix(line, "fatal error: "):
		return KindFatalError
	}
	return ""
}

// ScanFile is Scan of the file at path.
func ScanFile(path string) ([]Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Scan(path, f)
}

// ScanDirs scans every *.log file under dirs, recursively; a dir that does
// not exist has nothing to report.
func ScanDirs(dirs ...string) ([]Report, error) {
	var reports []Report
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() || !strings.HasSuffix(path, ".log") {
				return nil
			}
			found, err := ScanFile(path)
			reports = append(reports, found...)
			return err
		})
		if err != nil {
			return reports, err
		}
	}
	return reports, nil
}
