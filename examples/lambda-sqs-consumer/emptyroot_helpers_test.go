// Helpers of the empty-root test, kept in the example's own directory (as
// in lambda-sqs-consumer and pubsub-push-consumer) so that the directory
// copied whole builds and tests on its own: they build the example as a
// static binary and run it in an empty root, a temporary directory
// holding only the binary, entered with chroot(2) (the tests run as
// root). No /usr/lib, no proj.db, no /etc: what the binary needs beyond
// itself it does not find. Loopback networking stays, so the binary
// reaches test servers on 127.0.0.1.

package main

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Build compiles the package pkg (a directory, relative to the caller's
// test) as Lambda's provided.al2023 runtime wants it: linux/amd64,
// CGO_ENABLED=0, -trimpath -ldflags='-s -w', tags lambda.norpc (make
// lambda's flags). It returns the binary's path.
func Build(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bootstrap")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-tags", "lambda.norpc", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s: %s", pkg, b)
	return out
}

// ZipSize returns the size of bin zipped as Lambda's deployment package
// (one file, "bootstrap", deflated), as make lambda writes it.
func ZipSize(t *testing.T, bin string) int64 {
	t.Helper()
	path := filepath.Join(t.TempDir(), "function.zip")
	f, err := os.Create(path)
	require.NoError(t, err)
	zw := zip.NewWriter(f)
	w, err := zw.CreateHeader(&zip.FileHeader{Name: "bootstrap", Method: zip.Deflate})
	require.NoError(t, err)
	src, err := os.Open(bin)
	require.NoError(t, err)
	_, err = io.Copy(w, src)
	require.NoError(t, err)
	require.NoError(t, src.Close())
	require.NoError(t, zw.Close())
	require.NoError(t, f.Close())
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

// Start runs bin as /bootstrap in a fresh empty root with env as its
// whole environment; the process is killed when the test ends. Its
// standard error goes to stderr.
func Start(t *testing.T, ctx context.Context, bin string, env []string, stderr io.Writer) *exec.Cmd {
	t.Helper()
	root := t.TempDir()
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "bootstrap"), data, 0o755))
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Len(t, entries, 1, "the root holds the binary alone")
	cmd := &exec.Cmd{
		Path:        "/bootstrap", // resolved inside the new root
		Args:        []string{"/bootstrap"},
		Env:         env,
		Dir:         "/",
		Stdout:      stderr,
		Stderr:      stderr,
		SysProcAttr: &syscall.SysProcAttr{Chroot: root},
	}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	go func() {
		<-ctx.Done()
		_ = cmd.Process.Kill()
	}()
	return cmd
}

// LockedBuffer collects a running binary's output: os/exec writes to it
// from its own goroutine while the test reads it.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
