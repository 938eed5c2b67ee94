package offload

import (
	"crypto/sha256"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpanHashResumes drives the hash past the end, as a Run that went on
// while the end was unknown, and checks that finish resumes from a saved
// state and yields the SHA-256 of exactly data[start:end].
func TestSpanHashResumes(t *testing.T) {
	data := make([]byte, 5*spanSnapEvery+12345)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for _, tc := range []struct{ start, end int }{
		{0, 0}, {0, 1}, {0, spanSnapEvery - 1}, {0, spanSnapEvery}, {0, spanSnapEvery + 1},
		{0, 3*spanSnapEvery + 7}, {0, len(data)}, {17, 17}, {17, 2*spanSnapEvery + 17}, {17, len(data)},
		{len(data) - 5, len(data)}, {len(data), len(data)},
	} {
		for _, ahead := range []int{tc.start, (tc.start + tc.end) / 2, tc.end, len(data)} {
			st := newSpanHash(tc.start)
			for st.pos < ahead {
				st.advance(data, tc.start)
			}
			want := sha256.Sum256(data[tc.start:tc.end])
			require.Equal(t, want[:], st.finish(data, tc.start, tc.end), "start %d end %d hashed to %d", tc.start, tc.end, st.pos)
		}
	}
	st := newSpanHash(0)
	for st.pos < len(data) {
		st.advance(data, 0)
	}
	require.Len(t, st.snaps, 6, "a state saved every spanSnapEvery bytes")
}
