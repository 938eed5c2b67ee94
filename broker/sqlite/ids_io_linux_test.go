//go:build linux

package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
)

// processIO is this process's bytes read and written through system calls
// (/proc/self/io's rchar and wchar: SQLite's preads and pwrites of the
// database and of its temporary files).
func processIO(t *testing.T) (read, written int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "rchar":
			read = n
		case "wchar":
			written = n
		}
	}
	return read, written
}

// TestListByIDsReadsEachBodyOnce: records named by id, listed with their
// bodies a page at a time (what the console does to place records on its
// map and draw their shapes), are read by rowid in order — each page reads
// its own bodies and the next one, never every named record's sorted
// through a temporary file (which read 78 GB for 40 records of 20 MB).
// Not parallel: the figures are the whole process's.
func TestListByIDsReadsEachBodyOnce(t *testing.T) {
	const (
		n    = 24
		body = 1 << 20
	)
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "ids.db"), nil)
	require.NoError(t, err)
	defer s.Close()
	var ids []string
	for i := range n {
		b := []byte(strings.Repeat(strconv.Itoa(i%10), body))
		require.NoError(t, s.Publish(ctx, "big", &broker.Message{Body: b}))
		ids = append(ids, strconv.Itoa(i+1))
	}
	r0, w0 := processIO(t)
	opts := broker.ListOptions{Destination: "big", Filter: broker.Filter{IDs: ids}, Limit: len(ids), MaxBytes: body}
	var got []string
	for range n + 1 {
		p, err := s.List(ctx, opts)
		require.NoError(t, err)
		for _, e := range p.Entries {
			require.Len(t, e.Record.Message.Body, body)
			got = append(got, e.Record.ID)
		}
		if p.Next == "" {
			break
		}
		opts.After = p.Next
	}
	r1, w1 := processIO(t)
	require.Equal(t, ids, got, "every named record, in order, a page each")
	t.Logf("%d pages of one %d-byte body: read %d MB, wrote %d MB", n, body, (r1-r0)>>20, (w1-w0)>>20)
	require.Less(t, r1-r0, int64(3*n*body), "each page reads its body and the next one's, not every named record's")
	require.Less(t, w1-w0, int64(body), "no body written to a temporary file to be sorted")
}
