//go:build cgo

package validity_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/geodlq/geodlq/internal/validity/validitytest"
)

// TestGeneratedAgree runs both engines over geometries the generator makes
// from pseudo-random programs.
func TestGeneratedAgree(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	rng := rand.New(rand.NewPCG(1, 2))
	prog := make([]byte, 256)
	counts := map[string]int{}
	for i := range n {
		for j := 0; j < len(prog); j += 8 {
			binary.LittleEndian.PutUint64(prog[j:], rng.Uint64())
		}
		g, ok := parse(validitytest.GeoJSON(prog))
		if !ok {
			continue
		}
		r := agree(t, fmt.Sprintf("program %d", i), g)
		counts[reasonKind(r)]++
		if t.Failed() {
			t.Fatalf("program %x", prog)
		}
	}
	t.Logf("verdicts: %v", counts)
}

// reasonKind is a reason without its point.
func reasonKind(r string) string {
	for i := range len(r) {
		if r[i] == '[' {
			return r[:i]
		}
	}
	return r
}

// FuzzEnginesAgree is the differential fuzz target: the fuzzer's bytes
// drive the generator (validitytest), and the pure-Go engine must give
// GEOS's answer, reason and point, for every geometry that reaches the
// engines.
func FuzzEnginesAgree(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 64 {
		prog := make([]byte, 64+rng.IntN(192))
		for j := range prog {
			prog[j] = byte(rng.Uint32())
		}
		f.Add(prog)
	}
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 4096 {
			prog = prog[:4096]
		}
		g, ok := parse(validitytest.GeoJSON(prog))
		if !ok {
			return
		}
		agree(t, "program", g)
	})
}
