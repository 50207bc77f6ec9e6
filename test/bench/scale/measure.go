package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// process is one server process whose memory is reported.
type process struct {
	name string
	pid  int
	heap func(context.Context) (int64, error)
}

// subject is one target with the processes that serve it.
type subject struct {
	name string
	// direct reaches the server holding the Runs; aggregated, when set,
	// the same API through kube-apiserver.
	direct, aggregated *target
	// server answers the Run API; processes are all that hold Runs.
	server    process
	processes []process
	dataSize  func(context.Context) (int64, error)
	// saveProfile, when set, saves the server's heap profile; when names
	// the moment ("" after the fill, "-settled").
	saveProfile func(ctx context.Context, when string) error
}

// memory is a process's memory at one moment.
type memory struct {
	proc procMemory
	heap int64
}

type result struct {
	name string
	rows map[string]string
}

func (s *subject) snapshot(ctx context.Context) (map[string]memory, error) {
	out := map[string]memory{}
	for _, p := range s.processes {
		m, err := readProcMemory(p.pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		heap, err := p.heap(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s heap: %w", p.name, err)
		}
		out[p.name] = memory{proc: m, heap: heap}
	}
	return out, nil
}

// rowOrder is the order of the report's rows.
var rowOrder []string

func (r *result) set(row, format string, args ...any) {
	if !strings.Contains(strings.Join(rowOrder, "\x00")+"\x00", row+"\x00") {
		rowOrder = append(rowOrder, row)
	}
	r.rows[row] = fmt.Sprintf(format, args...)
	fmt.Fprintf(progressOut, "    %s: %s\n", row, r.rows[row])
}

func (s *subject) measure(ctx context.Context, o options) (*result, error) {
	r := &result{name: s.name, rows: map[string]string{}}
	t := s.direct
	fmt.Fprintf(progressOut, "==> %s: GET with one Run stored\n", s.name)
	if _, err := t.fill(ctx, 0, 1, 1, nil); err != nil {
		return nil, err
	}
	empty, err := t.getLatency(ctx, 1, o.samples)
	if err != nil {
		return nil, err
	}
	before, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	baseData, err := s.dataSize(ctx)
	if err != nil {
		return nil, err
	}

	fmt.Fprintf(progressOut, "==> %s: filling %d Runs, %d in flight\n", s.name, o.runs, o.workers)
	took, err := t.fill(ctx, 1, o.runs, o.workers, func(done int) {
		fmt.Fprintf(progressOut, "    %d Runs\n", done)
	})
	if err != nil {
		return nil, err
	}
	r.set("Runs", "%d", o.runs)
	r.set("fill (create + status write)", "%s, %.0f Runs/s", took.Round(time.Second), float64(o.runs-1)/took.Seconds())
	after, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	data, err := s.dataSize(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range s.processes {
		b, a := before[p.name], after[p.name]
		r.set(p.name+" RSS (anon + file)", "%s (%s + %s); empty %s", mib(a.proc.RSS), mib(a.proc.Anon), mib(a.proc.File), mib(b.proc.RSS))
		r.set(p.name+" live heap", "%s; empty %s", mib(a.heap), mib(b.heap))
	}
	if s.saveProfile != nil {
		if err := s.saveProfile(ctx, ""); err != nil {
			return nil, err
		}
	}
	r.set("data size (growth)", "%s (+%s)", mib(data), mib(data-baseData))
	if o.settle > 0 {
		if err := s.settle(ctx, o, r); err != nil {
			return nil, err
		}
	}

	fmt.Fprintf(progressOut, "==> %s: reads\n", s.name)
	get, err := t.getLatency(ctx, o.runs, o.samples)
	if err != nil {
		return nil, err
	}
	r.set("GET p50 / p99", "%s / %s", ms(get.pct(50)), ms(get.pct(99)))
	r.set("GET p50 / p99, one Run stored", "%s / %s (p50 ratio %.2f)", ms(empty.pct(50)), ms(empty.pct(99)), float64(get.pct(50))/float64(empty.pct(50)))
	page, err := t.listPageLatency(ctx, o.samples, "application/json")
	if err != nil {
		return nil, err
	}
	r.set("LIST page of 500 p50 / p99", "%s / %s", ms(page.pct(50)), ms(page.pct(99)))
	if t.servesProtobuf() {
		page, err := t.listPageLatency(ctx, o.samples, protobufMediaType)
		if err != nil {
			return nil, err
		}
		r.set("LIST page of 500, protobuf, p50 / p99", "%s / %s", ms(page.pct(50)), ms(page.pct(99)))
	}
	full, size, err := t.fullList(ctx, max(3, o.samples/100))
	if err != nil {
		return nil, err
	}
	r.set("full LIST, JSON (p50 / max)", "%s / %s, %s", ms(full.pct(50)), ms(full[len(full)-1]), mib(int64(size)))
	watch, err := t.watchStart(ctx, max(5, o.samples/10))
	if err != nil {
		return nil, err
	}
	r.set("watch start p50 / p99", "%s / %s", ms(watch.pct(50)), ms(watch.pct(99)))
	cpuBefore, err := cpuTime(s.server.pid)
	if err != nil {
		return nil, err
	}
	wl, count, err := t.watchList(ctx)
	if err != nil {
		return nil, err
	}
	cpuAfter, err := cpuTime(s.server.pid)
	if err != nil {
		return nil, err
	}
	r.set("watch-list of all Runs (an informer's start)", "%s for %d Runs, %s of server CPU", ms(wl), count, ms(cpuAfter-cpuBefore))
	if a := s.aggregated; a != nil {
		get, err := a.getLatency(ctx, o.runs, o.samples)
		if err != nil {
			return nil, err
		}
		r.set("aggregated GET p50 / p99", "%s / %s", ms(get.pct(50)), ms(get.pct(99)))
		page, err := a.listPageLatency(ctx, o.samples, "application/json")
		if err != nil {
			return nil, err
		}
		r.set("aggregated LIST page of 500 p50 / p99", "%s / %s", ms(page.pct(50)), ms(page.pct(99)))
	}
	end, err := s.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range s.processes {
		e := end[p.name]
		r.set(p.name+" RSS after reads, peak", "%s, peak %s", mib(e.proc.RSS), mib(e.proc.HWM))
	}
	return r, nil
}

// settle waits out the watch cache's event history (it keeps every event of
// the last 75 s, with each one's previous object, and shrinks only as new
// events arrive), writes a few Runs so that it does, and reports memory
// again: what a server holding these Runs uses once the fill's burst is
// over, rather than right after it.
func (s *subject) settle(ctx context.Context, o options, r *result) error {
	writes := min(o.runs, 64)
	fmt.Fprintf(progressOut, "==> %s: settling for %s, then %d writes\n", s.name, o.settle, writes)
	select {
	case <-time.After(o.settle):
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := s.direct.touch(ctx, writes); err != nil {
		return err
	}
	settled, err := s.snapshot(ctx)
	if err != nil {
		return err
	}
	if s.saveProfile != nil {
		if err := s.saveProfile(ctx, "-settled"); err != nil {
			return err
		}
	}
	for _, p := range s.processes {
		m := settled[p.name]
		r.set(p.name+" RSS (anon + file), settled", "%s (%s + %s)", mib(m.proc.RSS), mib(m.proc.Anon), mib(m.proc.File))
		r.set(p.name+" live heap, settled", "%s", mib(m.heap))
	}
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func ms(d time.Duration) string {
	if d >= 10*time.Millisecond {
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func jsonBytes(v any) ([]byte, error) { return json.Marshal(v) }

// printResults writes a Markdown table, one column per target.
func printResults(w io.Writer, o options, results []*result) {
	fmt.Fprintf(w, "\n%d Runs per target, %d in flight while filling, %d samples per latency (%s)\n\n", o.runs, o.workers, o.samples, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprint(w, "| |")
	for _, r := range results {
		fmt.Fprintf(w, " %s |", r.name)
	}
	fmt.Fprint(w, "\n| --- |")
	for range results {
		fmt.Fprint(w, " --- |")
	}
	fmt.Fprintln(w)
	for _, row := range rowOrder {
		fmt.Fprintf(w, "| %s |", row)
		for _, r := range results {
			v, ok := r.rows[row]
			if !ok {
				v = "—"
			}
			fmt.Fprintf(w, " %s |", v)
		}
		fmt.Fprintln(w)
	}
}
