package kafka

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSpans(t *testing.T) {
	tests := []struct {
		name  string
		in    []span
		meta  string
		spans []span
	}{
		{"none", nil, "", nil},
		{"single", []span{{7, 7}}, "geodlq.acked.v1:7", []span{{7, 7}}},
		{"merged", []span{{9, 12}, {3, 4}, {5, 5}, {11, 13}}, "geodlq.acked.v1:3-5,9-13", []span{{3, 5}, {9, 13}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := encodeSpans(merge(tc.in))
			require.Equal(t, tc.meta, got)
			require.Equal(t, tc.spans, decodeSpans(got))
		})
	}
	for _, bad := range []string{"member-1", "geodlq.acked.v1:x", "geodlq.acked.v1:5-3", "geodlq.acked.v1:"} {
		require.Nil(t, decodeSpans(bad), "%q", bad)
	}
	require.True(t, covered([]span{{3, 5}}, 4))
	require.False(t, covered([]span{{3, 5}}, 6))

	// Too many gaps: the metadata stays under Kafka's limit and lists a
	// prefix; the rest are redelivered after a restart, never lost.
	var many []span
	for i := range int64(2000) {
		many = append(many, span{i * 10, i*10 + 1})
	}
	meta := encodeSpans(many)
	require.LessOrEqual(t, len(meta), maxMetadata)
	back := decodeSpans(meta)
	require.NotEmpty(t, back)
	require.Equal(t, many[:len(back)], back)
	require.False(t, strings.HasSuffix(meta, ","))
}
