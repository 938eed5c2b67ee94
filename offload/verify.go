package offload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
)

// Open returns a reader of the blob ref points at that verifies it while
// it streams: what [Offloader.Fetch] checks, without holding the blob.
// ref is checked as Fetch checks it before the store is asked (a refused
// URI is a [*URIError], an inconsistent reference an [*IntegrityError],
// a missing blob an error wrapping [ErrNotFound]).
//
// The reader hands on the blob's bytes as they arrive, hashing them, and
// never more than ref.Size of them. It ends with io.EOF only once the
// blob has proved to hold exactly ref.Size bytes hashing to ref.SHA256;
// otherwise its last Read returns an [*IntegrityError] (wrapping
// [ErrIntegrity]) instead: ProblemTruncated when the blob ends early,
// ProblemExtended as soon as a byte past ref.Size arrives,
// ProblemHash when the whole blob is there but hashes to something else.
// Bytes read before that error are therefore unverified: a caller that
// passes them on (an HTTP download) must be able to take them back, for
// instance by aborting the response before its end.
//
// Nothing is allocated from ref.Size: the reader reads into the caller's
// buffers, at most 256 KiB at a time, and every error it returns is
// sticky. Each Read first checks ctx; a Read blocked in the store's
// reader returns when that reader does, which every [Store] bounds by
// ctx. The caller must Close the reader, which closes the store's. The
// reader is not safe for concurrent use.
func (o *Offloader) Open(ctx context.Context, ref Ref) (io.ReadCloser, error) {
	key, ie, err := o.checkRef(ref)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("offload: open %s: %w", ref.URI, err)
	}
	v, err := o.open(ctx, "open", key, ref, ie)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// open gets the blob under key and wraps it in a verifier; op names the
// operation in errors.
func (o *Offloader) open(ctx context.Context, op, key string, ref Ref, ie *IntegrityError) (*verifier, error) {
	rc, err := o.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("offload: %s %s: %w", op, ref.URI, err)
	}
	return &verifier{ctx: ctx, r: rc, c: rc, op: op, ref: ref, ie: ie, h: sha256.New()}, nil
}

// NewVerifier returns a reader of r's bytes verified against ref as the
// reader of [Offloader.Open] verifies a blob: at most ref.Size bytes are
// handed on, and the end is io.EOF only when r held exactly ref.Size bytes
// hashing to ref.SHA256, else an [*IntegrityError]. ref.URI only names the
// bytes in errors and may be empty; a ref whose Size is negative or whose
// SHA256 is not 64 lowercase hex digits fails the first Read
// (ProblemBadRef). It is how a payload assembled from several parts (see
// envelope.Envelope.OpenPayload) is checked as it streams.
func NewVerifier(r io.Reader, ref Ref) io.Reader {
	ie := &IntegrityError{URI: ref.URI, WantSize: ref.Size, WantSHA256: ref.SHA256, GotSize: -1}
	v := &verifier{r: r, op: "read", ref: ref, ie: ie, h: sha256.New()}
	switch {
	case !isHex64(ref.SHA256):
		ie.Problem, ie.Detail = ProblemBadRef, "sha256 is not 64 lowercase hex digits"
		v.err = ie
	case ref.Size < 0:
		ie.Problem, ie.Detail = ProblemBadRef, fmt.Sprintf("size %d is negative", ref.Size)
		v.err = ie
	}
	return v
}

// errClosed is returned by a Read after Close.
var errClosed = errors.New("offload: read after Close")

// verifier is the one place blobs are verified: the reader of Open, of
// NewVerifier, and what Fetch reads to the end.
type verifier struct {
	ctx   context.Context // nil: none to check
	r     io.Reader
	c     io.Closer // nil: nothing to close
	op    string
	ref   Ref
	ie    *IntegrityError // filled in and returned on a mismatch
	h     hash.Hash
	n     int64 // bytes handed on (and hashed)
	empty int   // reads in a row that returned nothing
	err   error // sticky: io.EOF once verified, or the failure
}

// Read implements io.Reader.
func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if err := v.ctxErr(); err != nil {
		return 0, err
	}
	if v.n >= v.ref.Size {
		return 0, v.end()
	}
	// Never past the claim; hash in bounded, preemptible steps.
	p = p[:min(int64(len(p)), v.ref.Size-v.n, hashChunk)]
	for {
		m, err := v.r.Read(p)
		if m < 0 || m > len(p) {
			return 0, v.fail(fmt.Errorf("reader returned %d for a %d-byte read", m, len(p)))
		}
		v.h.Write(p[:m])
		v.n += int64(m)
		switch {
		case err == io.EOF:
			return m, v.atEOF()
		case err != nil:
			return m, v.fail(err)
		case m > 0:
			v.empty = 0
			return m, nil
		}
		if err := v.noProgress(); err != nil {
			return 0, err
		}
	}
}

// end is reached once ref.Size bytes are in: the blob must end here.
// It reads one byte more to know.
func (v *verifier) end() error {
	var extra [1]byte
	for {
		m, err := v.r.Read(extra[:])
		switch {
		case m < 0 || m > len(extra):
			return v.fail(fmt.Errorf("reader returned %d for a %d-byte read", m, len(extra)))
		case m > 0:
			v.ie.Problem = ProblemExtended
			v.err = v.ie
			return v.err
		case err == io.EOF:
			return v.atEOF()
		case err != nil:
			return v.fail(err)
		}
		if err := v.noProgress(); err != nil {
			return err
		}
		if err := v.ctxErr(); err != nil {
			return err
		}
	}
}

// atEOF settles the outcome once the reader has ended.
func (v *verifier) atEOF() error {
	if v.n < v.ref.Size {
		v.ie.Problem, v.ie.GotSize = ProblemTruncated, v.n
		v.err = v.ie
		return v.err
	}
	if got := hex.EncodeToString(v.h.Sum(nil)); got != v.ref.SHA256 {
		v.ie.Problem, v.ie.GotSize, v.ie.GotSHA256 = ProblemHash, v.n, got
		v.err = v.ie
		return v.err
	}
	v.err = io.EOF
	return v.err
}

func (v *verifier) noProgress() error {
	if v.empty++; v.empty >= maxEmptyReads {
		return v.fail(io.ErrNoProgress)
	}
	return nil
}

func (v *verifier) ctxErr() error {
	if v.ctx == nil {
		return nil
	}
	if err := v.ctx.Err(); err != nil {
		return v.fail(err)
	}
	return nil
}

// fail makes err the reader's sticky error. An integrity failure of a
// reader underneath (a verified part of a larger whole) passes as it is.
func (v *verifier) fail(err error) error {
	switch {
	case errors.Is(err, ErrIntegrity):
		v.err = err
	case v.ref.URI == "":
		v.err = fmt.Errorf("offload: %s: %w", v.op, err)
	default:
		v.err = fmt.Errorf("offload: %s %s: %w", v.op, v.ref.URI, err)
	}
	return v.err
}

// Close closes the store's reader; later Reads fail.
func (v *verifier) Close() error {
	if v.err == nil {
		v.err = errClosed
	}
	if v.c == nil {
		return nil
	}
	c := v.c
	v.c = nil
	return c.Close()
}

// readAll reads the blob to its verified end into a buffer that grows
// with the bytes that arrive (see [Offloader.Fetch]).
func (v *verifier) readAll() ([]byte, error) {
	want := v.ref.Size
	initial := min(want, fetchInitial)
	if n, ok := sizeHint(v.r); ok && n >= 0 {
		initial = min(want, n)
	}
	buf := make([]byte, 0, initial)
	var probe [1]byte
	for {
		if len(buf) == cap(buf) && int64(len(buf)) < want {
			// Grow with the data: double, never past what ref claims.
			grow := min(want-int64(len(buf)), max(int64(cap(buf)), fetchInitial))
			buf = slices.Grow(buf, int(grow))
		}
		dst := buf[len(buf):cap(buf)]
		if len(dst) == 0 {
			// All ref.Size bytes are in: this Read only checks the end
			// and stores nothing.
			dst = probe[:]
		}
		m, err := v.Read(dst)
		if len(buf) < cap(buf) {
			buf = buf[:len(buf)+m]
		}
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return nil, err
		}
	}
}
