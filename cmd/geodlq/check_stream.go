package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync"

	"github.com/geodlq/geodlq/internal/jsonscan"
)

// How check streams: a reader goroutine takes events from the input one
// at a time, jobs workers check them, and the caller's goroutine emits
// the results in input order. Every event read is queued, in order, with
// a slot its worker fills; the queue holds at most 2×jobs events, so
// that at most about 2×jobs+2 events (the queued ones, the one being
// read, the one being emitted) are in memory however long the input.

// eventSource yields the input's events in order; next returns io.EOF
// after the last.
type eventSource interface {
	next() (event, error)
}

// checked is a worker's result for one event.
type checked struct {
	ev   event // the event; its payload is dropped unless emit needs it
	v    verdict
	cerr error
}

// checkEvents reads src to its end, runs work on up to jobs events at
// once and calls emit with each result in input order, from the calling
// goroutine. It stops at the first error of src or emit, or when ctx is
// done, and returns that error after every goroutine it started has
// returned. It returns how many results it emitted.
func checkEvents(ctx context.Context, src eventSource, jobs int, work func(context.Context, event) checked, emit func(checked) error) (int, error) {
	jobs = max(jobs, 1)
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	type job struct {
		ev   event
		slot chan checked
	}
	queue := make(chan chan checked, 2*jobs) // slots, in input order
	work1 := make(chan job)
	var readErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(queue)
		defer close(work1)
		for {
			ev, err := src.next()
			if err != nil {
				if err != io.EOF {
					readErr = err
				}
				return
			}
			slot := make(chan checked, 1)
			select {
			case queue <- slot:
			case <-ctx.Done():
				return
			}
			select {
			case work1 <- job{ev, slot}:
			case <-ctx.Done():
				return
			}
		}
	})
	for range jobs {
		wg.Go(func() {
			for j := range work1 {
				j.slot <- work(ctx, j.ev)
			}
		})
	}

	n := 0
	err := func() error {
		for slot := range queue {
			var r checked
			select {
			case r = <-slot:
			case <-ctx.Done():
				return ctx.Err()
			}
			if err := emit(r); err != nil {
				return err
			}
			n++
		}
		return nil
	}()
	cancel()
	wg.Wait()
	if err == nil {
		err = readErr
	}
	if err == nil {
		// The reader stops early, without an error, when parent ends.
		err = parent.Err()
	}
	return n, err
}

// lineEvents yields the non-blank lines of a JSON-lines input as events,
// each in a buffer of its own (a trailing \r dropped), numbered from 1
// as the lines are. first, when not nil, is the input's first line,
// already read.
type lineEvents struct {
	r     *bufio.Reader
	first []byte
	line  int
}

func (s *lineEvents) next() (event, error) {
	for {
		var line []byte
		if s.first != nil {
			line, s.first = s.first, nil
		} else {
			var err error
			if line, err = readLine(s.r); err != nil {
				return event{}, err
			}
		}
		s.line++
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		return event{where: "line " + strconv.Itoa(s.line), payload: line}, nil
	}
}

// readLine returns the next line of r, its '\n' included, in a new
// buffer of its own; io.EOF when none is left. The last line needs
// no '\n'. A line longer than r's buffer is gathered in chunks and
// copied once, so that reading it never holds more than twice its size
// (growing one slice would hold up to 2.25 times it and leave four times
// it to the collector).
func readLine(r *bufio.Reader) ([]byte, error) {
	b, err := r.ReadSlice('\n')
	if err == nil || (err == io.EOF && len(b) > 0) {
		return bytes.Clone(b), nil
	}
	if err != bufio.ErrBufferFull {
		return nil, err
	}
	chunks := [][]byte{bytes.Clone(b)}
	n := len(b)
	for {
		b, err = r.ReadSlice('\n')
		if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
			return nil, err
		}
		chunks = append(chunks, bytes.Clone(b))
		n += len(b)
		if err != bufio.ErrBufferFull {
			break
		}
	}
	line := make([]byte, 0, n)
	for i, c := range chunks {
		line = append(line, c...)
		chunks[i] = nil
	}
	return line, nil
}

// sliceEvents yields events already split.
type sliceEvents struct{ evs []event }

func (s *sliceEvents) next() (event, error) {
	if len(s.evs) == 0 {
		return event{}, io.EOF
	}
	ev := s.evs[0]
	s.evs[0] = event{} // the payload is the workers' now
	s.evs = s.evs[1:]
	return ev, nil
}

// openEvents returns the events of in: streamed line by line when its
// first line is a complete JSON value other than a FeatureCollection (a
// JSON-lines input), otherwise read whole and split as splitEvents does
// (a FeatureCollection, or any document spread over lines).
func openEvents(in io.Reader) (eventSource, error) {
	r := bufio.NewReaderSize(in, 256<<10)
	blanks := 0
	for {
		line, err := readLine(r)
		if err == io.EOF {
			return nil, &inputError{errors.New("no events")}
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			blanks++
			continue
		}
		if wholeLine(line) {
			return &lineEvents{r: r, first: line, line: blanks}, nil
		}
		rest, err := io.ReadAll(r)
		if err != nil {
			return nil, err
		}
		data := append(append(bytes.Repeat([]byte("\n"), blanks), line...), rest...)
		evs, err := splitEvents(data)
		if err != nil {
			return nil, &inputError{err}
		}
		return &sliceEvents{evs: evs}, nil
	}
}

// wholeLine reports whether line (not blank) holds one complete JSON
// value that is not a FeatureCollection: the first line of JSON lines.
func wholeLine(line []byte) bool {
	t := bytes.TrimSpace(line)
	if _, end, err := jsonscan.Skip(t, 0); err != nil || end != len(t) {
		return false
	}
	if t[0] != '{' {
		return true
	}
	s, e, err := jsonscan.Find(t, "/type")
	return err != nil || string(t[s:e]) != `"FeatureCollection"`
}

// inputError is an input check cannot split into events (a usage error).
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

// jsonVerdicts writes check's -o json document as its verdicts come,
// byte for byte what writeJSON writes for the whole document at once.
type jsonVerdicts struct {
	w   io.Writer
	n   int
	buf bytes.Buffer
	enc *json.Encoder
}

func newJSONVerdicts(w io.Writer) *jsonVerdicts {
	j := &jsonVerdicts{w: w}
	j.enc = json.NewEncoder(&j.buf)
	j.enc.SetEscapeHTML(false)
	j.enc.SetIndent("    ", "  ")
	return j
}

func (j *jsonVerdicts) add(v verdict) error {
	j.buf.Reset()
	if j.n == 0 {
		j.buf.WriteString("{\n  \"events\": [\n    ")
	} else {
		j.buf.WriteString(",\n    ")
	}
	if err := j.enc.Encode(v); err != nil {
		return err
	}
	j.buf.Truncate(j.buf.Len() - 1) // Encode's newline
	j.n++
	_, err := j.w.Write(j.buf.Bytes())
	return err
}

func (j *jsonVerdicts) finish(sum checkSummary) error {
	j.buf.Reset()
	if j.n == 0 {
		j.buf.WriteString("{\n  \"events\": null,\n  \"summary\": ")
	} else {
		j.buf.WriteString("\n  ],\n  \"summary\": ")
	}
	enc := json.NewEncoder(&j.buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("  ", "  ")
	if err := enc.Encode(sum); err != nil {
		return err
	}
	j.buf.Truncate(j.buf.Len() - 1)
	j.buf.WriteString("\n}\n")
	_, err := j.w.Write(j.buf.Bytes())
	return err
}
