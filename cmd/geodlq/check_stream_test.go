package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
)

// countedEvents yields n events named "0", "1", … and counts how many it
// has handed out.
type countedEvents struct {
	n, i int
	read atomic.Int64
}

func (s *countedEvents) next() (event, error) {
	if s.i == s.n {
		return event{}, io.EOF
	}
	ev := event{where: strconv.Itoa(s.i), payload: []byte(strconv.Itoa(s.i))}
	s.i++
	s.read.Add(1)
	return ev, nil
}

// spin makes a worker take longer on some events than on others, so that
// results finish out of order (no sleeping: the scheduler decides).
func spin(i int) {
	for range (i * 7919) % 97 {
		runtime.Gosched()
	}
}

// TestCheckEventsOrderAndBound runs the pipeline with 1 to 8 workers: the
// results come out in input order, each once, and at no point have more
// than 2×jobs+2 events been read and not yet emitted.
func TestCheckEventsOrderAndBound(t *testing.T) {
	tests := []struct {
		jobs, events int
	}{
		{1, 200}, {2, 500}, {3, 1}, {4, 500}, {8, 1000}, {8, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("jobs=%d/events=%d", tt.jobs, tt.events), func(t *testing.T) {
			src := &countedEvents{n: tt.events}
			var inFlight atomic.Int64
			work := func(_ context.Context, ev event) checked {
				i, _ := strconv.Atoi(ev.where)
				inFlight.Add(1)
				spin(i)
				inFlight.Add(-1)
				return checked{ev: ev, v: verdict{Input: ev.where}}
			}
			var got []string
			var worst int64
			emit := func(r checked) error {
				got = append(got, r.v.Input)
				worst = max(worst, src.read.Load()-int64(len(got)-1))
				return nil
			}
			n, err := checkEvents(context.Background(), src, tt.jobs, work, emit)
			require.NoError(t, err)
			require.Equal(t, tt.events, n)
			require.Len(t, got, tt.events)
			for i, in := range got {
				require.Equal(t, strconv.Itoa(i), in)
			}
			require.LessOrEqual(t, worst, int64(2*tt.jobs+2), "events held at once")
			require.Zero(t, inFlight.Load())
		})
	}
}

// TestCheckEventsStops: an emit error, a read error and a cancelled
// context each end the run with that error (checkEvents returns once
// its goroutines have).
func TestCheckEventsStops(t *testing.T) {
	errEmit, errRead := errors.New("emit failed"), errors.New("read failed")
	tests := []struct {
		name   string
		src    eventSource
		emit   func(int) error
		cancel bool
		want   error
	}{
		{name: "emit", src: &countedEvents{n: 1000}, emit: func(i int) error {
			if i == 10 {
				return errEmit
			}
			return nil
		}, want: errEmit},
		{name: "read", src: &failingEvents{countedEvents: countedEvents{n: 1000}, after: 20, err: errRead}, emit: func(int) error { return nil }, want: errRead},
		{name: "cancel", src: &countedEvents{n: 1000}, emit: func(int) error { return nil }, cancel: true, want: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			i := 0
			emit := func(checked) error {
				if tt.cancel && i == 5 {
					cancel()
				}
				err := tt.emit(i)
				i++
				return err
			}
			work := func(_ context.Context, ev event) checked { return checked{ev: ev} }
			_, err := checkEvents(ctx, tt.src, 4, work, emit)
			require.ErrorIs(t, err, tt.want)
		})
	}
}

type failingEvents struct {
	countedEvents
	after int
	err   error
}

func (s *failingEvents) next() (event, error) {
	if s.i == s.after {
		return event{}, s.err
	}
	return s.countedEvents.next()
}

// generated is an io.Reader that writes n JSON-lines events of about size
// bytes each as it is read, without holding them, and counts the events
// it has begun to hand out.
type generated struct {
	n, size int
	made    atomic.Int64
	buf     []byte
}

func (g *generated) Read(p []byte) (int, error) {
	if len(g.buf) == 0 {
		i := int(g.made.Load())
		if i == g.n {
			return 0, io.EOF
		}
		pad := strings.Repeat("x", max(g.size-100, 0))
		g.buf = fmt.Appendf(nil, `{"event_id":"e%d","pad":"%s","geometry":{"type":"Point","coordinates":[%d,1]}}`+"\n", i, pad, i%90)
		g.made.Add(1)
	}
	n := copy(p, g.buf)
	g.buf = g.buf[n:]
	return n, nil
}

// verdictCounter counts the verdict lines written to it, and records the
// largest lead the input had over them.
type verdictCounter struct {
	in    *generated
	lines int
	lead  int64
	out   bytes.Buffer
}

func (w *verdictCounter) Write(p []byte) (int, error) {
	w.lines += bytes.Count(p, []byte("\n"))
	w.lead = max(w.lead, w.in.made.Load()-int64(w.lines))
	return w.out.Write(p)
}

// TestCheckStreamsBoundedInput runs `geodlq check -o jsonl --jobs 4` in
// process on 3,000 events of 64 KiB (192 MB) generated as they are read:
// the verdicts come in input order, and at no point has check read more
// than a few events beyond those it has reported: 2×jobs+2 in the
// pipeline, plus what its 256 KiB read buffer holds.
func TestCheckStreamsBoundedInput(t *testing.T) {
	const jobs, events, size = 4, 3000, 64 << 10
	if testing.Short() {
		t.Skip("192 MB of input")
	}
	in := &generated{n: events, size: size}
	out := &verdictCounter{in: in}
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--store", "sqlite://unused.db", "check", "-o", "jsonl", "--jobs", strconv.Itoa(jobs)},
		stdio{stdin: in, stdout: out, stderr: &stderr})
	require.Equal(t, exitOK, code, stderr.String())
	require.Equal(t, events, out.lines)
	sc := bufio.NewScanner(&out.out)
	for i := 0; sc.Scan(); i++ {
		var v verdict
		require.NoError(t, json.Unmarshal(sc.Bytes(), &v))
		require.Equal(t, fmt.Sprintf("line %d", i+1), v.Input)
		require.Equal(t, fmt.Sprintf("e%d", i), v.EventID)
		require.True(t, v.OK)
	}
	require.LessOrEqual(t, out.lead, int64(2*jobs+2+(256<<10)/size+2), "events read ahead of the verdicts")
}

// TestCheckJSONInterrupted: a check cancelled half-way through still
// writes a whole -o json document, with the summary of what it reported.
func TestCheckJSONInterrupted(t *testing.T) {
	in := &generated{n: 100000, size: 200}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelAfter{lines: 200, cancel: cancel}
	var stderr bytes.Buffer
	code := run(ctx, []string{"--store", "sqlite://unused.db", "check", "-o", "json", "--jobs", "2"},
		stdio{stdin: in, stdout: out, stderr: &stderr})
	require.Equal(t, exitInterrupted, code, stderr.String())
	var doc struct {
		Events  []verdict    `json:"events"`
		Summary checkSummary `json:"summary"`
	}
	require.NoError(t, json.Unmarshal(out.buf.Bytes(), &doc))
	require.NotEmpty(t, doc.Events)
	require.Less(t, len(doc.Events), in.n)
	require.Equal(t, len(doc.Events), doc.Summary.Events)
	for i, v := range doc.Events {
		require.Equal(t, fmt.Sprintf("line %d", i+1), v.Input)
	}
}

// cancelAfter cancels once lines lines have been written to it.
type cancelAfter struct {
	lines  int
	cancel context.CancelFunc
	buf    bytes.Buffer
}

func (w *cancelAfter) Write(p []byte) (int, error) {
	if w.lines -= bytes.Count(p, []byte("\n")); w.lines <= 0 {
		w.cancel()
	}
	return w.buf.Write(p)
}

// TestReadLine reads lines shorter and longer than the reader's buffer,
// with and without a final newline, from an input that can be read
// ahead (a file; here a strings.Reader, which is an io.ReaderAt and an
// io.Seeker) and from one that cannot (a pipe), and reports each line
// longer than the buffer, before it is read, when it is the longest yet.
func TestReadLine(t *testing.T) {
	long := strings.Repeat("0123456789", 10)
	tests := []struct {
		name, in string
		want     []string
		longs    []int // sizes reported to onLong
	}{
		{"empty", "", nil, nil},
		{"short lines", "a\nbc\n\nd", []string{"a\n", "bc\n", "\n", "d"}, nil},
		{"buffer-sized", long[:16] + "\n" + long[:15] + "\n", []string{long[:16] + "\n", long[:15] + "\n"}, []int{17}},
		{"longer than the buffer", long + "\r\n" + long[:33], []string{long + "\r\n", long[:33]}, []int{102}},
		{"exact multiple, no newline", long[:32], []string{long[:32]}, []int{32}},
		{"long lines, longest last", long[:40] + "\n" + long[:20] + "\n" + long + "\n" + long[:50],
			[]string{long[:40] + "\n", long[:20] + "\n", long + "\n", long[:50]}, []int{41, 101}},
		{"line ending at a read-ahead chunk's end", strings.Repeat("x", readAheadChunk+15) + "\n" + "y",
			[]string{strings.Repeat("x", readAheadChunk+15) + "\n", "y"}, []int{readAheadChunk + 16}},
	}
	for _, tt := range tests {
		for _, ahead := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/ahead=%v", tt.name, ahead), func(t *testing.T) {
				var in io.Reader = strings.NewReader(tt.in)
				if !ahead {
					in = struct{ io.Reader }{in} // hides ReadAt and Seek
				}
				lr := newLineReader(in, 16)
				require.Equal(t, ahead, lr.ra != nil)
				var longs []int
				lr.onLong = func(n int) { longs = append(longs, n) }
				var got []string
				for {
					line, err := lr.readLine()
					if err == io.EOF {
						break
					}
					require.NoError(t, err)
					got = append(got, string(line))
				}
				require.Equal(t, tt.want, got)
				require.Equal(t, tt.longs, longs)
			})
		}
	}
}

// changedInput reads one text and reads ahead in another, as a file
// rewritten between the two reads would.
type changedInput struct {
	*strings.Reader
	ahead *strings.Reader
}

func (c changedInput) ReadAt(p []byte, off int64) (int, error) { return c.ahead.ReadAt(p, off) }

// TestReadLineChanged: a line whose end is not where reading ahead found
// it is an error, never a wrong line.
func TestReadLineChanged(t *testing.T) {
	long := strings.Repeat("0123456789", 10)
	for _, tc := range []struct{ name, read, ahead string }{
		{"newline earlier", long[:40] + "\n" + long, long + "\n" + long},
		{"shorter", long[:40], long + "\n"},
		{"newline gone", long + "x" + long, long + "\n" + long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lr := newLineReader(changedInput{strings.NewReader(tc.read), strings.NewReader(tc.ahead)}, 16)
			_, err := lr.readLine()
			require.ErrorIs(t, err, errInputChanged)
		})
	}
}

// TestJSONVerdictsStreamed: the -o json document written verdict by
// verdict is byte for byte the one writeJSON writes at once.
func TestJSONVerdictsStreamed(t *testing.T) {
	fault := &classify.Fault{Part: 1, Ring: 2, Vertex: 3}
	tests := [][]verdict{
		{{Input: "line 1", OK: true, EPSG: 4326, GeometryType: "Polygon", VertexCount: 5}},
		{
			{Input: "line 1", EventID: "a<b>&", OK: true, EPSG: 4326},
			{Input: "line 2", OK: false, FailureClass: "invalid_geometry", FailedStage: "topology_validation",
				Reason: "Self-intersection[0.5 0.5]", ReasonKind: "self_intersection", Location: []float64{0.5, 0.5}, Fault: fault, EPSG: 4326},
			{Input: "feature 3", DeadLetteredTo: "x.poison.dlt"},
		},
	}
	for i, vs := range tests {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			sum := checkSummary{Events: len(vs), OK: 1, DeadLettered: len(vs) - 1, ByClass: map[string]int{"invalid_geometry": 1}}
			var want, got bytes.Buffer
			require.NoError(t, writeJSON(&want, struct {
				Events  []verdict    `json:"events"`
				Summary checkSummary `json:"summary"`
			}{vs, sum}))
			doc := newJSONVerdicts(&got)
			for _, v := range vs {
				require.NoError(t, doc.add(v))
			}
			require.NoError(t, doc.finish(sum))
			require.Equal(t, want.String(), got.String())
		})
	}
}
