//go:build unix

package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConnectBounded: a FIFO put at the path after the probe looked
// blocks SQLite's open in the kernel; connect returns when its context
// ends all the same.
func TestConnectBounded(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "fifo.db")
	require.NoError(t, syscall.Mkfifo(p, 0o600))
	for _, mode := range []string{"ro", "ro&immutable=1", "rw"} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		_, err := connect(ctx, p, dsn(p, mode, []string{"busy_timeout(2)"}))
		cancel()
		if mode == "rw" {
			require.Error(t, err, mode) // Linux opens a FIFO for reading and writing at once
		} else {
			require.ErrorIs(t, err, context.DeadlineExceeded, mode)
		}
		require.Less(t, time.Since(start), 5*time.Second, mode)
	}
	// Let the open left behind return: a writer, then the reader's end.
	for range 3 {
		if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
}
