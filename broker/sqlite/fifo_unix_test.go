//go:build unix

package sqlite_test

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// mkfifo returns a maker of a FIFO at the store's path.
func mkfifo(*testing.T) func(t *testing.T, dir string) string {
	return func(t *testing.T, dir string) string {
		p := filepath.Join(dir, "fifo.db")
		require.NoError(t, syscall.Mkfifo(p, 0o600))
		return p
	}
}
