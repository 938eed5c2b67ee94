package entrypoints_test

import (
	"testing"

	"github.com/geodlq/geodlq/internal/hostiletest/entrypoints"
)

// TestHostileSequentialEntryPoints answers every hostile family at the
// entry points that start no goroutines of their own — the ingress
// function and middleware, Decode → Restore — as internal/hostiletest's
// TestHostileEntryPoints does the others under the race detector: each
// family's calls under a deadline, with the goroutine stack capped
// (entrypoints.Run). make test runs this package without the detector
// (its tests start no goroutines but child processes), so the families
// that scale are generated at 32 MiB, eight times as deep and as long as
// under it; the families run one after the other, the detector being
// where several share a checker.
func TestHostileSequentialEntryPoints(t *testing.T) {
	entrypoints.Run(t, entrypoints.NewEnv(t), familySize(), false, func(stage string) bool { return !entrypoints.Concurrent(stage) })
}
