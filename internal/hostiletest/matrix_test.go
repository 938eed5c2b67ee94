package hostiletest_test

import (
	"testing"

	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/hostiletest/entrypoints"
)

// familySize is the size the scaling families are generated at: the
// default, 32 MiB, half the checker's byte budget; entrypoints.RaceSize
// (just over 4 MiB) with -short and under the race detector.
func familySize() int {
	if testing.Short() || raceEnabled {
		return entrypoints.RaceSize
	}
	return corpus.DefaultHostileSize
}

// TestHostileEntryPoints answers every hostile family at every library
// entry point — CheckEvent, the ingress function and middleware, Builder →
// Decode → Restore (or Decode → Restore for forged envelopes), replay with
// the checker's repairers, and triage — the families at once on one
// checker (so that the detector also watches what they share), each
// family's calls under a deadline, with the goroutine stack capped
// (entrypoints.Run): the verdict is the family's, every error is typed,
// nothing panics or recurses with the input.
//
// Under the race detector it runs the entry points that start goroutines
// of their own (entrypoints.Concurrent); the others — the gate, the
// middleware, Decode → Restore — run in package entrypoints, which make
// test runs without the detector, at 32 MiB (TestHostileSequentialEntryPoints).
func TestHostileEntryPoints(t *testing.T) {
	keep := func(string) bool { return true }
	if raceEnabled {
		keep = entrypoints.Concurrent
	}
	entrypoints.Run(t, entrypoints.NewEnv(t), familySize(), true, keep)
}
