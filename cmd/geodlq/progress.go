package main

import (
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
)

// meter reports the progress of a long command (replay, triage, verify,
// purge, export): a bar with the count, the total and an ETA on a
// terminal (github.com/schollz/progressbar/v3), and, when stderr is not a
// terminal, one JSON record per --progress-interval on stderr:
//
//	{"progress":"replay","done":1200,"total":10000,"unit":"records","elapsed_s":2.0,"rate_per_s":600,"eta_s":14.7,"counts":{"acked":1200}}
//
// Records start after one interval, so quick commands print none. done
// and counts are set by the command from any goroutine.
type meter struct {
	what, unit string
	total      atomic.Int64 // -1: unknown
	done       atomic.Int64
	start      time.Time

	mu     sync.Mutex
	counts map[string]int64

	stop chan struct{}
	wg   sync.WaitGroup
}

// startMeter starts reporting the progress of what (a command name) in
// unit; total < 0 is unknown. Call finish when the work ends.
func (a *app) startMeter(what, unit string, total int64) *meter {
	m := &meter{what: what, unit: unit, start: time.Now(), counts: map[string]int64{}, stop: make(chan struct{})}
	m.total.Store(total)
	mode := a.progressMode
	if mode == "auto" {
		mode = "json"
		if a.progress {
			mode = "bar"
		}
	}
	switch mode {
	case "bar":
		m.wg.Add(1)
		go m.bar(a)
	case "json":
		m.wg.Add(1)
		go m.records(a)
	}
	return m
}

// add counts n more units done.
func (m *meter) add(n int64) { m.done.Add(n) }

// set sets the units done.
func (m *meter) set(n int64) { m.done.Store(n) }

// count adds n to a named count (an outcome).
func (m *meter) count(name string, n int64) {
	m.mu.Lock()
	m.counts[name] += n
	m.mu.Unlock()
}

// setTotal changes the total (when it becomes known).
func (m *meter) setTotal(n int64) { m.total.Store(n) }

// finish stops reporting; a terminal's bar is cleared.
func (m *meter) finish() {
	if m == nil {
		return
	}
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	m.wg.Wait()
}

func (m *meter) bar(a *app) {
	defer m.wg.Done()
	total := m.total.Load()
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(a.stderr),
		progressbar.OptionSetDescription(m.what),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString(m.unit),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetWidth(24),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionFullWidth(),
	)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			_ = bar.Clear()
			return
		case <-t.C:
			if n := m.total.Load(); n != total {
				total = n
				bar.ChangeMax64(n)
			}
			_ = bar.Set64(m.done.Load())
		}
	}
}

// progressRecord is one JSON progress line on stderr. Field names are
// stable.
type progressRecord struct {
	Progress string           `json:"progress"`
	Done     int64            `json:"done"`
	Total    *int64           `json:"total"`
	Unit     string           `json:"unit"`
	Elapsed  float64          `json:"elapsed_s"`
	Rate     float64          `json:"rate_per_s"`
	ETA      *float64         `json:"eta_s"`
	Counts   map[string]int64 `json:"counts,omitempty"`
}

func (m *meter) record() progressRecord {
	done := m.done.Load()
	el := time.Since(m.start).Seconds()
	r := progressRecord{Progress: m.what, Done: done, Unit: m.unit, Elapsed: round1(el)}
	if el > 0 {
		r.Rate = round1(float64(done) / el)
	}
	if total := m.total.Load(); total >= 0 {
		r.Total = &total
		if r.Rate > 0 && total >= done {
			eta := round1(float64(total-done) / (float64(done) / el))
			r.ETA = &eta
		}
	}
	m.mu.Lock()
	if len(m.counts) > 0 {
		r.Counts = maps.Clone(m.counts)
	}
	m.mu.Unlock()
	return r
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

func (m *meter) records(a *app) {
	defer m.wg.Done()
	every := a.progressEvery
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			if err := writeJSONLine(a.stderr, m.record()); err != nil {
				fmt.Fprintln(a.stderr, "geodlq: progress:", err)
				return
			}
		}
	}
}
