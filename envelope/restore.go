package envelope

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/geodlq/geodlq/offload"
)

// Fetcher reads back an offloaded blob and verifies it against its
// reference. [*offload.Offloader] is one; it also refuses offload URIs
// outside its own base and prefix, which matters because an envelope's
// URIs are untrusted input.
type Fetcher interface {
	Fetch(ctx context.Context, ref offload.Ref) ([]byte, error)
}

// Restore returns the original payload, byte for byte, and proves it: the
// result always has payload_size bytes and hashes to payload_sha256, or
// Restore fails with an [*offload.IntegrityError] (wrapping
// offload.ErrIntegrity).
//
//   - Whole payload offloaded (raw_payload_offload_uri): it is fetched as
//     the blob (raw_payload_offload_uri, payload_size, payload_sha256).
//   - Geometry offloaded: the persisted raw payload must hold exactly
//     {"$ref":"<offload_uri>"} at geometry.payload_offset; the geometry
//     blob is fetched and verified (offload_uri, byte_size,
//     content_sha256) and spliced back in its place.
//   - Otherwise raw_payload is the payload.
//
// f may be nil when nothing is offloaded. Restore verifies hashes itself
// too, so a Fetcher that does not verify cannot smuggle bytes in.
// Restore holds the whole payload (and the geometry blob) in memory;
// [Envelope.OpenPayload] streams it instead, checked the same way.
func (e *Envelope) Restore(ctx context.Context, f Fetcher) ([]byte, error) {
	switch {
	case e.RawPayloadOffloadURI != "":
		if f == nil {
			return nil, fmt.Errorf("envelope: restore: raw payload is offloaded: %w", ErrNoFetcher)
		}
		b, err := f.Fetch(ctx, offload.Ref{URI: e.RawPayloadOffloadURI, Size: e.PayloadSize, SHA256: e.PayloadSHA256})
		if err != nil {
			return nil, fmt.Errorf("envelope: restore payload: %w", err)
		}
		return verified(b, e.checkPayload(b))
	case e.Geometry.OffloadURI != "":
		return e.restoreGeometry(ctx, f)
	default:
		return verified(e.RawPayload, e.checkPayload(e.RawPayload))
	}
}

func (e *Envelope) restoreGeometry(ctx context.Context, f Fetcher) ([]byte, error) {
	prefix, suffix, err := e.splice()
	if err != nil {
		return nil, err
	}
	if f == nil {
		return nil, fmt.Errorf("envelope: restore: geometry is offloaded: %w", ErrNoFetcher)
	}
	g := &e.Geometry
	geom, err := f.Fetch(ctx, e.geometryRef())
	if err != nil {
		return nil, fmt.Errorf("envelope: restore geometry: %w", err)
	}
	if sum := sha256.Sum256(geom); int64(len(geom)) != g.ByteSize || hex.EncodeToString(sum[:]) != g.ContentSHA256 {
		return nil, &offload.IntegrityError{URI: g.OffloadURI, Problem: offload.ProblemHash, WantSize: g.ByteSize, GotSize: int64(len(geom)),
			WantSHA256: g.ContentSHA256, GotSHA256: hex.EncodeToString(sum[:])}
	}
	// Sized by the bytes in hand, never by payload_size: it is a claim,
	// and what it claims is checked only once the payload is assembled.
	out := make([]byte, 0, len(prefix)+len(geom)+len(suffix))
	out = append(out, prefix...)
	out = append(out, geom...)
	out = append(out, suffix...)
	return verified(out, e.checkPayload(out))
}

// splice checks that the persisted raw payload holds exactly
// {"$ref":"<offload_uri>"} at geometry.payload_offset and that its size,
// byte_size and payload_size agree, and returns the raw payload before
// and after the $ref: the payload is prefix, the geometry blob, suffix.
func (e *Envelope) splice() (prefix, suffix []byte, err error) {
	g := &e.Geometry
	ref := appendRef(nil, g.OffloadURI)
	off := g.PayloadOffset
	if off < 0 || off > int64(len(e.RawPayload)) || !bytes.HasPrefix(e.RawPayload[off:], ref) {
		return nil, nil, &offload.IntegrityError{Problem: offload.ProblemBadRef, WantSize: e.PayloadSize, GotSize: -1, WantSHA256: e.PayloadSHA256,
			Detail: fmt.Sprintf("raw_payload does not hold the geometry's $ref at payload_offset %d", off)}
	}
	if want := int64(len(e.RawPayload)) - int64(len(ref)) + g.ByteSize; want != e.PayloadSize {
		return nil, nil, &offload.IntegrityError{Problem: offload.ProblemBadRef, WantSize: e.PayloadSize, GotSize: want, WantSHA256: e.PayloadSHA256,
			Detail: "raw_payload, byte_size and payload_size disagree"}
	}
	return e.RawPayload[:off], e.RawPayload[off+int64(len(ref)):], nil
}

// geometryRef is the offloaded geometry's reference.
func (e *Envelope) geometryRef() offload.Ref {
	return offload.Ref{URI: e.Geometry.OffloadURI, Size: e.Geometry.ByteSize, SHA256: e.Geometry.ContentSHA256}
}

// payloadRef is the whole payload's reference (its URI empty unless the
// payload is offloaded).
func (e *Envelope) payloadRef() offload.Ref {
	return offload.Ref{URI: e.RawPayloadOffloadURI, Size: e.PayloadSize, SHA256: e.PayloadSHA256}
}

// Opener opens an offloaded blob as a stream verified against its
// reference. [*offload.Offloader] is one (see [offload.Offloader.Open]);
// like Fetcher, it also refuses offload URIs outside its own base and
// prefix.
type Opener interface {
	Open(ctx context.Context, ref offload.Ref) (io.ReadCloser, error)
}

// OpenPayload is the streaming form of [Envelope.Restore]: it returns a
// reader of the original payload, byte for byte, that holds no more of it
// in memory than the envelope itself and the caller's buffer. The reader
// ends with io.EOF only once the whole payload has proved to have
// payload_size bytes and to hash to payload_sha256; otherwise its last
// Read returns an [*offload.IntegrityError] (wrapping offload.ErrIntegrity)
// instead, and the bytes read until then must not be trusted: a caller
// that passes them on as it reads (an HTTP download) must be able to
// withdraw them, e.g. by aborting the response before its end.
//
// It reads what Restore reads, checked as Restore checks it:
//
//   - Whole payload offloaded: the blob is opened with o and verified
//     against (raw_payload_offload_uri, payload_size, payload_sha256).
//   - Geometry offloaded: the raw payload must hold exactly
//     {"$ref":"<offload_uri>"} at geometry.payload_offset, and sizes must
//     agree (else an IntegrityError, ProblemBadRef, before o is asked);
//     the payload is streamed as the raw payload before the $ref, the
//     geometry blob opened with o and verified against (offload_uri,
//     byte_size, content_sha256), and the raw payload after it.
//   - Otherwise raw_payload is verified at once (it is in memory) and
//     read.
//
// OpenPayload verifies the payload's size and hash itself, so an Opener
// that does not verify cannot smuggle bytes in. o may be nil when nothing
// is offloaded. The caller must Close the reader; it is not safe for
// concurrent use, and it honours ctx as o's readers do.
func (e *Envelope) OpenPayload(ctx context.Context, o Opener) (io.ReadCloser, error) {
	switch {
	case e.RawPayloadOffloadURI != "":
		if o == nil {
			return nil, fmt.Errorf("envelope: restore: raw payload is offloaded: %w", ErrNoFetcher)
		}
		ref := e.payloadRef()
		rc, err := o.Open(ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("envelope: restore payload: %w", err)
		}
		return readCloser{offload.NewVerifier(rc, ref), rc}, nil
	case e.Geometry.OffloadURI != "":
		prefix, suffix, err := e.splice()
		if err != nil {
			return nil, err
		}
		if o == nil {
			return nil, fmt.Errorf("envelope: restore: geometry is offloaded: %w", ErrNoFetcher)
		}
		gref := e.geometryRef()
		rc, err := o.Open(ctx, gref)
		if err != nil {
			return nil, fmt.Errorf("envelope: restore geometry: %w", err)
		}
		whole := io.MultiReader(bytes.NewReader(prefix), offload.NewVerifier(rc, gref), bytes.NewReader(suffix))
		return readCloser{offload.NewVerifier(whole, e.payloadRef()), rc}, nil
	default:
		if err := e.checkPayload(e.RawPayload); err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(e.RawPayload)), nil
	}
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}

func verified(b []byte, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	return b, nil
}

// checkPayload verifies b against payload_size and payload_sha256.
func (e *Envelope) checkPayload(b []byte) error {
	sum := sha256.Sum256(b)
	got := hex.EncodeToString(sum[:])
	if int64(len(b)) != e.PayloadSize || got != e.PayloadSHA256 {
		problem := offload.ProblemHash
		switch {
		case int64(len(b)) < e.PayloadSize:
			problem = offload.ProblemTruncated
		case int64(len(b)) > e.PayloadSize:
			problem = offload.ProblemExtended
		}
		return &offload.IntegrityError{Problem: problem, WantSize: e.PayloadSize, GotSize: int64(len(b)), WantSHA256: e.PayloadSHA256, GotSHA256: got}
	}
	return nil
}
