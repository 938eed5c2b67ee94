package ingress_test

import (
	"bytes"
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/geodlq/geodlq/ingress"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/corpus/nesting"
)

// FuzzValidate: Validate never panics, never modifies its input, and
// always returns violations the middleware can encode, each with a JSON
// pointer, a valid class, a kind and a message.
func FuzzValidate(f *testing.F) {
	for _, it := range corpus.All() {
		f.Add(asGateEvent(it))
	}
	for _, s := range []string{
		seedEvent, "", "{", "[]", `{"a":[1 2]}`, `{"source_uri":"\ud800","processing_mode":"\u0000"}`,
		`{"geometry":{"type":"GeometryCollection","geometries":[{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[NaN,0]}]}]}}`,
		`{"crs":{"type":"name","properties":{"name":"EPSG:3857"}},"geometry":{"type":"Point","coordinates":[0,0],"crs":"x"}}`,
		`{"p":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	} {
		f.Add([]byte(s))
	}
	for _, seed := range corpus.HostileSeeds(corpus.InputEvent) {
		f.Add(seed)
	}
	for s := range nesting.Shapes() {
		f.Add(nesting.Build(s, 20_000, nil)) // past every depth limit, under the 1 MiB cap
	}
	// With the stack capped at 1 MiB, a reader that recursed per level
	// would overflow within the 1 MiB inputs the fuzzer may grow.
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	opts := &ingress.Options{MaxVertices: 10_000, MaxBytes: 1 << 20}
	f.Fuzz(func(t *testing.T, payload []byte) {
		orig := bytes.Clone(payload)
		vs := ingress.Validate(payload, opts)
		if !bytes.Equal(orig, payload) {
			t.Fatal("Validate modified its input")
		}
		for _, v := range vs {
			if v.Pointer != "" && !strings.HasPrefix(v.Pointer, "/") {
				t.Fatalf("pointer %q is not an RFC 6901 pointer", v.Pointer)
			}
			if !v.Class.Valid() || v.Kind == "" || v.Message == "" {
				t.Fatalf("incomplete violation %+v", v)
			}
		}
		if len(vs) > 0 {
			b, err := ingress.MarshalProblem(ingress.NewProblem(vs, "/events", nil))
			if err != nil || !json.Valid(b) {
				t.Fatalf("problem does not encode: %v", err)
			}
		}
	})
}
