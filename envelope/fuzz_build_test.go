package envelope_test

import (
	"context"
	"errors"
	"runtime/debug"
	"testing"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/corpus/nesting"
)

// FuzzBuild checks the core promise on arbitrary bodies: Build always
// produces a valid envelope, the encoding decodes, re-encodes to the same
// bytes, and restores the exact payload — inline, with the geometry
// offloaded, and with the whole payload offloaded.
func FuzzBuild(f *testing.F) {
	for _, tc := range payloadCases {
		f.Add([]byte(tc.body))
	}
	f.Add([]byte(bowtie))
	f.Add([]byte(`{"geometry":{"type":"Point","coordinates":[1,2]},"geometry":{"type":"Point","coordinates":[3,4]}}`))
	for _, seed := range corpus.HostileSeeds(corpus.InputEvent) {
		f.Add(seed)
	}
	for s := range nesting.Shapes() {
		f.Add(nesting.Build(s, 20_000, nil))
	}
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, payload []byte) {
		off, _ := newOffloader(t, 16)
		for _, m := range []struct {
			b        *envelope.Builder
			maxBytes int
		}{{newBuilder(t, nil), 0}, {newBuilder(t, off), 0}, {newBuilder(t, off), 1200}} {
			env, data, err := m.b.Build(ctx, envelope.Input{Payload: payload, Err: classify.CRSMismatch(errors.New("bad crs"), 0), MaxBytes: m.maxBytes})
			if m.maxBytes > 0 && errors.Is(err, classify.ErrTooLarge) && env != nil && data == nil {
				// What cannot be offloaded (a source_crs of 4 KiB, a long
				// event_id) may not fit a small limit: Build says so, with
				// the smallest envelope it made.
				if err := env.Validate(); err != nil {
					t.Fatalf("smallest envelope invalid: %v", err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if err := env.Validate(); err != nil {
				t.Fatalf("Build output invalid: %v", err)
			}
			dec, err := envelope.Decode(data)
			if err != nil {
				t.Fatalf("Decode: %v\n%s", err, data)
			}
			again, err := dec.Encode()
			if err != nil || string(again) != string(data) {
				t.Fatalf("Encode(Decode(x)) != x: %v\n%s\n%s", err, data, again)
			}
			restored, err := dec.Restore(ctx, off)
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if string(restored) != string(payload) {
				t.Fatalf("restored %q, want %q", restored, payload)
			}
		}
	})
}
