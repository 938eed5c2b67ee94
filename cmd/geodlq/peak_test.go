package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// peakrssBin is internal/peakrss, built by TestMain.
var peakrssBin = "" // set by TestMain

// measured makes cmd, not yet started, run under peakrss, and returns a
// function that, once cmd has run, gives the command's own peak RSS in
// bytes. Measured directly, a child's rusage maxrss counts this test
// process's pages: Go starts it as a vfork, and Linux folds the
// high-water mark of the address space the child leaves at exec into its
// maxrss — under -race, or after a large fixture, more than the bound
// (TestCheckMemoryBound failed in CI at 176 MiB for a 175 MiB bound that
// geodlq holds alone). peakrss is a small process; what the command
// inherits from it is a few MiB. cmd's exit code is peakrss's.
func measured(t *testing.T, cmd *exec.Cmd) func() int64 {
	t.Helper()
	out := filepath.Join(t.TempDir(), "peak")
	cmd.Args = append([]string{peakrssBin, "-o", out, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = peakrssBin
	return func() int64 {
		t.Helper()
		b, err := os.ReadFile(out)
		require.NoError(t, err, "peakrss wrote no figure: the command did not run")
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		require.NoError(t, err)
		require.Positive(t, n)
		return n
	}
}
