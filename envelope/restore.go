package envelope

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

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
	g := &e.Geometry
	ref := appendRef(nil, g.OffloadURI)
	off := g.PayloadOffset
	if off < 0 || off > int64(len(e.RawPayload)) || !bytes.HasPrefix(e.RawPayload[off:], ref) {
		return nil, &offload.IntegrityError{Problem: offload.ProblemBadRef, WantSize: e.PayloadSize, GotSize: -1, WantSHA256: e.PayloadSHA256,
			Detail: fmt.Sprintf("raw_payload does not hold the geometry's $ref at payload_offset %d", off)}
	}
	if want := int64(len(e.RawPayload)) - int64(len(ref)) + g.ByteSize; want != e.PayloadSize {
		return nil, &offload.IntegrityError{Problem: offload.ProblemBadRef, WantSize: e.PayloadSize, GotSize: want, WantSHA256: e.PayloadSHA256,
			Detail: "raw_payload, byte_size and payload_size disagree"}
	}
	if f == nil {
		return nil, fmt.Errorf("envelope: restore: geometry is offloaded: %w", ErrNoFetcher)
	}
	geom, err := f.Fetch(ctx, offload.Ref{URI: g.OffloadURI, Size: g.ByteSize, SHA256: g.ContentSHA256})
	if err != nil {
		return nil, fmt.Errorf("envelope: restore geometry: %w", err)
	}
	if sum := sha256.Sum256(geom); int64(len(geom)) != g.ByteSize || hex.EncodeToString(sum[:]) != g.ContentSHA256 {
		return nil, &offload.IntegrityError{URI: g.OffloadURI, Problem: offload.ProblemHash, WantSize: g.ByteSize, GotSize: int64(len(geom)),
			WantSHA256: g.ContentSHA256, GotSHA256: hex.EncodeToString(sum[:])}
	}
	// Sized by the bytes in hand, never by payload_size: it is a claim,
	// and what it claims is checked only once the payload is assembled.
	out := make([]byte, 0, len(e.RawPayload)-len(ref)+len(geom))
	out = append(out, e.RawPayload[:off]...)
	out = append(out, geom...)
	out = append(out, e.RawPayload[off+int64(len(ref)):]...)
	return verified(out, e.checkPayload(out))
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
