package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"runtime/debug"
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
	r     *lineReader
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
			if line, err = s.r.readLine(); err != nil {
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

// lineReader reads lines, each into a new buffer of its own. When the
// input is a regular file (an io.ReaderAt whose position is known), a line
// longer than the reader's buffer is measured first, by reading ahead
// with ReadAt, and then read once into a buffer of exactly its size: the
// largest event of a file costs its size in memory, not twice it.
type lineReader struct {
	r *bufio.Reader
	// ra, when not nil, is the input again, for reading ahead: the byte
	// r returns next is at offset pos of ra.
	ra      io.ReaderAt
	pos     int64
	scratch []byte
	// longest is the size of the longest line read so far.
	longest int
	// onLong, when not nil, is called with the size of a line before it
	// is read into memory, each time a line is the longest so far.
	onLong func(size int)
}

// readAheadChunk is how much of a long line is read at a time while
// looking for its end.
const readAheadChunk = 64 << 10

// newLineReader returns a lineReader of in with a buffer of size bytes.
// When in is a regular file (or any io.ReaderAt and io.Seeker, such as
// a bytes.Reader), long lines are measured before they are read.
func newLineReader(in io.Reader, size int) *lineReader {
	lr := &lineReader{r: bufio.NewReaderSize(in, size)}
	ra, ok := in.(io.ReaderAt)
	sk, ok2 := in.(io.Seeker)
	if !ok || !ok2 {
		return lr
	}
	if f, isFile := in.(*os.File); isFile {
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			return lr // a pipe, a terminal, a device: no reading ahead
		}
	}
	pos, err := sk.Seek(0, io.SeekCurrent)
	if err != nil {
		return lr
	}
	lr.ra, lr.pos = ra, pos
	return lr
}

// readLine returns the next line, its '\n' included, in a new buffer of
// its own; io.EOF when none is left. The last line needs no '\n'. A line
// longer than the buffer is measured and read once (see lineReader), or,
// from an input that cannot be read ahead (a pipe), gathered in chunks
// and copied once, so that reading it never holds more than twice its
// size (growing one slice would hold up to 2.25 times it and leave four
// times it to the collector).
func (lr *lineReader) readLine() ([]byte, error) {
	b, err := lr.r.ReadSlice('\n')
	if err == nil || (err == io.EOF && len(b) > 0) {
		lr.pos += int64(len(b))
		lr.longest = max(lr.longest, len(b))
		return bytes.Clone(b), nil
	}
	if err != bufio.ErrBufferFull {
		return nil, err
	}
	if lr.ra != nil {
		return lr.readMeasured(b)
	}
	chunks := [][]byte{bytes.Clone(b)}
	n := len(b)
	for {
		b, err = lr.r.ReadSlice('\n')
		if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
			return nil, err
		}
		chunks = append(chunks, bytes.Clone(b))
		n += len(b)
		if err != bufio.ErrBufferFull {
			break
		}
	}
	lr.noteLong(n)
	line := make([]byte, 0, n)
	for i, c := range chunks {
		line = append(line, c...)
		chunks[i] = nil
	}
	lr.pos += int64(n)
	return line, nil
}

// readMeasured reads the rest of a line whose first bytes, head (the
// reader's whole buffer, already consumed), did not hold its end: it
// finds the end with ReadAt, then reads the line into a buffer of its
// size. An input that changes under it (the end is not where it was
// measured) is an error, never a wrong line.
func (lr *lineReader) readMeasured(head []byte) ([]byte, error) {
	restStart := lr.pos + int64(len(head))
	rest, newline, err := lr.measure(restStart)
	if err != nil {
		return nil, err
	}
	n := len(head) + rest
	lr.noteLong(n)
	line := make([]byte, n)
	copy(line, head)
	if _, err := io.ReadFull(lr.r, line[len(head):]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, errInputChanged
		}
		return nil, err
	}
	want := -1 // where the '\n' must be in the rest, if anywhere
	if newline {
		want = rest - 1
	}
	if bytes.IndexByte(line[len(head):], '\n') != want {
		return nil, errInputChanged
	}
	lr.pos += int64(n)
	return line, nil
}

// errInputChanged is the error of a line that was not where it was
// measured.
var errInputChanged = errors.New("the input changed while it was read")

// measure returns how many bytes from off to the next '\n' (included,
// newline true) or the end of the input.
func (lr *lineReader) measure(off int64) (n int, newline bool, err error) {
	if lr.scratch == nil {
		lr.scratch = make([]byte, readAheadChunk)
	}
	for {
		k, err := lr.ra.ReadAt(lr.scratch, off+int64(n))
		if i := bytes.IndexByte(lr.scratch[:k], '\n'); i >= 0 {
			return n + i + 1, true, nil
		}
		n += k
		if err == io.EOF {
			return n, false, nil
		}
		if err != nil {
			return 0, false, err
		}
		if k == 0 {
			return 0, false, io.ErrNoProgress
		}
	}
}

// noteLong records a line of n bytes about to be held whole.
func (lr *lineReader) noteLong(n int) {
	if n > lr.longest {
		lr.longest = n
		if lr.onLong != nil {
			lr.onLong(n)
		}
	}
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
	r := newLineReader(in, 256<<10)
	if os.Getenv("GOMEMLIMIT") == "" {
		r.onLong = raiseMemoryLimit
	}
	return openEventsWith(r)
}

// checkMemoryFloor is the soft memory limit of geodlq check before it has
// read an event longer than half of it.
const checkMemoryFloor = 64 << 20

// raiseMemoryLimit sets the soft memory limit of the Go runtime
// (runtime/debug.SetMemoryLimit) to twice the size of the longest event
// read so far, n, and at least checkMemoryFloor. An event costs its bytes
// plus its parsed positions and the engine's structures, about twice its
// size at the peak; without a limit the collector lets the heap grow to
// twice what was live after its last cycle, and keeps the pages of the
// events already checked, so that a 40 MB event measured 30 MiB more
// (docs/benchmarks.md). The limit is soft: a heap that needs more gets it,
// the collector only works harder. $GOMEMLIMIT, when set, is left alone.
func raiseMemoryLimit(n int) {
	debug.SetMemoryLimit(max(int64(checkMemoryFloor), 2*int64(n)))
}

// openEventsWith is openEvents of the lines r reads.
func openEventsWith(r *lineReader) (eventSource, error) {
	blanks := 0
	for {
		line, err := r.readLine()
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
		rest, err := io.ReadAll(r.r)
		if err != nil {
			return nil, err
		}
		data := append(append(bytes.Repeat([]byte("\n"), blanks), line...), rest...)
		r.noteLong(len(data))
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
