package offload

import (
	"crypto/sha256"
	"math/rand/v2"
	"testing"
	"time"

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

// TestSpanCancelWaitsForRun: Cancel returns only once a Run that claimed
// the hashing has stopped reading the data, so that the caller may reuse
// it (the hashing is assembly, which the race detector does not see).
func TestSpanCancelWaitsForRun(t *testing.T) {
	o, err := New(NewMemStore(), nil)
	require.NoError(t, err)
	p, err := o.NewSpanPut(make([]byte, 10), 0, ExtJSON)
	require.NoError(t, err)
	require.True(t, p.claimed.CompareAndSwap(false, true), "a Run in progress")
	canceled := make(chan struct{})
	go func() {
		p.Cancel()
		close(canceled)
	}()
	select {
	case <-canceled:
		require.FailNow(t, "Cancel returned while Run was still going")
	case <-time.After(50 * time.Millisecond):
	}
	close(p.stopped) // Run returns
	select {
	case <-canceled:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Cancel did not return after Run stopped")
	}

	// Without a Run, Cancel claims the hashing and returns at once; a Run
	// started later does nothing.
	p, err = o.NewSpanPut(make([]byte, 10), 0, ExtJSON)
	require.NoError(t, err)
	p.Cancel()
	p.Run()
}
