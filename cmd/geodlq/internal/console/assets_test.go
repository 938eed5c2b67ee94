package console

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAssetsMatchFreshBuild rebuilds the page from ui/ with the lockfile's
// packages (node build.mjs, as make ui does) and requires the embedded
// ui/dist to be byte for byte what the build makes: the committed assets
// are the sources' and nothing else.
func TestAssetsMatchFreshBuild(t *testing.T) {
	node := need(t, false)
	out := filepath.Join(t.TempDir(), "dist")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "build.mjs", out)
	cmd.Dir = uiDir
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "node build.mjs: %s", b)
	fresh := tree(t, os.DirFS(out))
	embedded, err := fs.Sub(distFS, "ui/dist")
	require.NoError(t, err)
	got := tree(t, embedded)
	require.Equal(t, keys(fresh), keys(got), "the same files: run make ui and commit ui/dist")
	for name, want := range fresh {
		require.True(t, bytes.Equal(want, got[name]), "%s differs from a fresh build: run make ui and commit ui/dist", name)
	}
	require.Contains(t, fresh, "assets/basemap.json")
	require.Less(t, len(fresh["assets/basemap.json"]), 400<<10, "the offline basemap stays small")
}

func tree(t *testing.T, fsys fs.FS) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	require.NoError(t, fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		m[p] = b
		return err
	}))
	return m
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
