//go:build cgo

package ingress_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/ingress"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/proj"
)

// *spatial.Checker plugs into the gate as both checkers.
var (
	_ ingress.CRSChecker      = (*spatial.Checker)(nil)
	_ ingress.GeometryChecker = (*spatial.Checker)(nil)
)

// TestSpatialCheckerPlugged runs the corpus through the gate with a
// *spatial.Checker plugged in (this file needs cgo: PROJ resolves the
// corpus's PROJ string): every verdict, topology and PROJ ones included,
// is then exactly the consumer's.
func TestSpatialCheckerPlugged(t *testing.T) {
	p, err := proj.New(nil)
	require.NoError(t, err)
	defer p.Close()
	c, err := spatial.NewChecker(&spatial.Options{ResolveCRS: p.ResolveCRS})
	require.NoError(t, err)
	defer c.Close()
	opts := &ingress.Options{CRSChecker: c, GeometryChecker: c}
	for _, it := range corpus.All() {
		t.Run(it.Name, func(t *testing.T) {
			payload := asGateEvent(it)
			got := ingress.Validate(payload, opts)
			_, cerr := c.CheckEvent(payload)
			if it.Valid() {
				require.Empty(t, got)
				require.NoError(t, cerr)
				return
			}
			require.Len(t, got, 1, "%v", got)
			v := got[0]
			require.Equal(t, it.Class, v.Class, "%v", v)
			require.Equal(t, it.Kind, v.Kind, "%v", v)
			if it.Reason != "" {
				require.Equal(t, it.Reason, v.Message)
			}
			if it.Location != nil {
				require.Equal(t, it.Location, v.Location)
			}
			if it.Fault != nil {
				require.Equal(t, it.Fault, v.Fault)
			}
			require.Error(t, cerr, "the consumer refuses it too")
		})
	}
	// The seed's bowtie: refused at its first segment.
	got := ingress.Validate([]byte(seedEvent), opts)
	require.Len(t, got, 1)
	require.Equal(t, "/geometry/coordinates/0/0", got[0].Pointer)
	require.Equal(t, "Self-intersection[0.5 0.5]", got[0].Message)
}
