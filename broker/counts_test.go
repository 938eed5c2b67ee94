package broker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
)

// TestMoveLeased: the live leases a driver counts apart move records of
// the count with the same fields from pending to leased, never more than
// it has pending, and leases of fields no count has change nothing.
func TestMoveLeased(t *testing.T) {
	a := broker.Count{Destination: "d", Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation, EPSG: 4326,
		ReasonKind: classify.KindSelfIntersection, Source: "s3://a"}
	b := a
	b.Source = "s3://b"
	with := func(c broker.Count, pending, leased, replayed int) broker.Count {
		c.Pending, c.Leased, c.Replayed = pending, leased, replayed
		return c
	}
	for _, tc := range []struct {
		name   string
		counts []broker.Count
		leased []broker.Count
		want   []broker.Count
	}{
		{"none leased", []broker.Count{with(a, 5, 0, 2)}, nil, []broker.Count{with(a, 5, 0, 2)}},
		{"some leased", []broker.Count{with(a, 5, 0, 2), with(b, 3, 0, 0)}, []broker.Count{with(a, 2, 0, 0)},
			[]broker.Count{with(a, 3, 2, 2), with(b, 3, 0, 0)}},
		{"more leased than pending (a count read before an ack)", []broker.Count{with(a, 1, 0, 4)}, []broker.Count{with(a, 3, 0, 0)},
			[]broker.Count{with(a, 0, 1, 4)}},
		{"a lease of fields no count has", []broker.Count{with(a, 2, 0, 0)}, []broker.Count{with(b, 1, 0, 0)},
			[]broker.Count{with(a, 2, 0, 0)}},
		{"two leases of one count", []broker.Count{with(a, 4, 0, 0)}, []broker.Count{with(a, 1, 0, 0), with(a, 2, 0, 0)},
			[]broker.Count{with(a, 1, 3, 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broker.MoveLeased(tc.counts, tc.leased)
			require.Equal(t, tc.want, tc.counts)
		})
	}
}
