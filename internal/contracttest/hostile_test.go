package contracttest

import (
	"testing"

	"github.com/geodlq/geodlq/envelope"
)

// hostileBuilt builds envelopes of the hostile event corpus with build.
func hostileBuilt(t testing.TB, build func(mode, name string, in envelope.Input)) {
	t.Helper()
}

// hostileForged returns the hostile corpus's forged envelopes.
func hostileForged(t testing.TB) []document {
	t.Helper()
	return nil
}
