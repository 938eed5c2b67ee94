package offload

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sync/atomic"

	"github.com/geodlq/geodlq/classify"
)

// SpanPut is an [Offloader.Put] of data[start:end] begun before end is
// known, so that hashing the blob can overlap the work that finds where
// it ends. The envelope builder uses it for a geometry inside a payload:
// one scan of the payload locates the geometry's end, and that scan takes
// about as long as hashing it.
//
// [SpanPut.Run] hashes data from start on, chunk by chunk, until
// [SpanPut.Finish] gives the end (or [SpanPut.Cancel] stops it);
// Finish then completes the hash from where Run got to (from a saved
// state at or before end, when Run went past it) and stores the blob
// exactly as Put does: the [Ref], the key and the stored bytes are the
// same as those of Put(ctx, data[start:end], ext).
//
// Run may run on another goroutine, or not at all: Finish hashes what Run
// has not. A SpanPut is used once, by one Finish or one Cancel; once
// either has returned, nothing reads data any more. data must not be
// modified before that.
type SpanPut struct {
	o     *Offloader
	data  []byte
	start int
	ext   string

	// end is spanOpen until Finish (the end) or Cancel (spanCanceled).
	end     atomic.Int64
	endSet  chan struct{} // closed with end
	claimed atomic.Bool   // Run, Finish or Cancel owns the hashing
	handoff chan *spanHash
	stopped chan struct{} // closed when a Run that claimed returns
}

const (
	spanOpen     = -1
	spanCanceled = -2
	// spanSnapEvery is how often Run saves the hash state, so that a Run
	// that went past the end resumes at most this many bytes before it.
	spanSnapEvery = 1 << 20
)

// spanHash is the hashing state Run hands over to Finish.
type spanHash struct {
	h      hash.Hash
	pos    int        // data[start:pos] is hashed
	snaps  []spanSnap // saved states, by increasing pos
	states []byte     // backing store of the snapshots
}

// spanSnap is the marshalled hash state at pos.
type spanSnap struct {
	pos   int
	state []byte
}

// NewSpanPut returns a SpanPut of data[start:end] for an end given later
// to Finish. ext is [ExtGeoJSON] or [ExtJSON].
func (o *Offloader) NewSpanPut(data []byte, start int, ext string) (*SpanPut, error) {
	if err := checkExt(ext); err != nil {
		return nil, err
	}
	if start < 0 || start > len(data) {
		return nil, fmt.Errorf("offload: span put: start %d outside [0, %d]", start, len(data))
	}
	p := &SpanPut{o: o, data: data, start: start, ext: ext, endSet: make(chan struct{}),
		handoff: make(chan *spanHash, 1), stopped: make(chan struct{})}
	p.end.Store(spanOpen)
	return p, nil
}

// Run hashes data from start on until Finish or Cancel is called (or the
// data ends, then it waits for them), and hands its state to Finish. It
// returns at once if Finish or Cancel came first, and does nothing when
// called again.
func (p *SpanPut) Run() {
	if !p.claimed.CompareAndSwap(false, true) {
		return
	}
	defer close(p.stopped)
	st := newSpanHash(p.start)
	for {
		switch e := p.end.Load(); {
		case e == spanCanceled:
			return
		case e >= 0:
			p.handoff <- st
			return
		case st.pos == len(p.data):
			<-p.endSet
			continue
		}
		st.advance(p.data, p.start)
	}
}

// Finish stores data[start:end] as [Offloader.Put] does and returns its
// Ref, hashing the part Run has not.
func (p *SpanPut) Finish(ctx context.Context, end int) (Ref, error) {
	if end < p.start || end > len(p.data) {
		p.Cancel()
		return Ref{}, fmt.Errorf("offload: span put: end %d outside [%d, %d]", end, p.start, len(p.data))
	}
	blob := p.data[p.start:end]
	if int64(len(blob)) > p.o.maxSize {
		p.Cancel()
		return Ref{}, fmt.Errorf("offload: put: %w", &classify.TooLargeError{What: "blob", Size: len(blob), Limit: int(p.o.maxSize), Hint: "Options.MaxSize"})
	}
	if !p.end.CompareAndSwap(spanOpen, int64(end)) {
		return Ref{}, errors.New("offload: span put: Finish after Finish or Cancel")
	}
	close(p.endSet)
	var st *spanHash
	if p.claimed.CompareAndSwap(false, true) {
		st = newSpanHash(p.start) // Run never started
	} else {
		st = <-p.handoff
	}
	return p.o.putSum(ctx, blob, hex.EncodeToString(st.finish(p.data, p.start, end)), p.ext)
}

func newSpanHash(start int) *spanHash {
	return &spanHash{h: sha256.New(), pos: start}
}

// advance hashes the next chunk of data, first saving the state when
// pos is a multiple of spanSnapEvery bytes past start.
func (st *spanHash) advance(data []byte, start int) {
	if (st.pos-start)%spanSnapEvery == 0 {
		if st.states == nil {
			n := (len(data)-start)/spanSnapEvery + 1
			st.states = make([]byte, 0, n*128)
			st.snaps = make([]spanSnap, 0, n)
		}
		n := len(st.states)
		if states, err := st.h.(encoding.BinaryAppender).AppendBinary(st.states); err == nil {
			st.states = states
			st.snaps = append(st.snaps, spanSnap{pos: st.pos, state: states[n:len(states):len(states)]})
		}
	}
	n := min(len(data)-st.pos, hashChunk)
	st.h.Write(data[st.pos : st.pos+n])
	st.pos += n
}

// finish returns the SHA-256 of data[start:end]: it resumes from the last
// saved state at or before end when the hash went past it, and hashes the
// rest in chunks.
func (st *spanHash) finish(data []byte, start, end int) []byte {
	if st.pos > end {
		st.h, st.pos = sha256.New(), start
		for i := len(st.snaps) - 1; i >= 0; i-- {
			if s := st.snaps[i]; s.pos <= end {
				h := sha256.New()
				if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(s.state); err == nil {
					st.h, st.pos = h, s.pos
				}
				break
			}
		}
	}
	for st.pos < end {
		n := min(end-st.pos, hashChunk)
		st.h.Write(data[st.pos : st.pos+n])
		st.pos += n
	}
	return st.h.Sum(nil)
}

// Cancel stops Run without storing anything, and returns once Run no
// longer reads data (at most one chunk of hashing later). It does nothing
// after Finish or another Cancel.
func (p *SpanPut) Cancel() {
	if !p.end.CompareAndSwap(spanOpen, spanCanceled) {
		return
	}
	close(p.endSet)
	if !p.claimed.CompareAndSwap(false, true) {
		<-p.stopped // a Run is going: wait for it
	}
}
