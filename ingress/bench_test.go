package ingress_test

import (
	"testing"

	"github.com/geodlq/geodlq/ingress"
	"github.com/geodlq/geodlq/internal/corpus"
)

// BenchmarkValidate8MB validates an 8 MB multipolygon event (about 300,000
// positions).
func BenchmarkValidate8MB(b *testing.B) {
	payload := asGateEvent(corpus.Item{Name: "large", Payload: corpus.LargeEvent(8 << 20)})
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if vs := ingress.Validate(payload, nil); len(vs) != 0 {
			b.Fatal(vs)
		}
	}
}
