package atomicfile_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/atomicfile"
)

func TestWriteFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before []byte // nil: no file
		data   []byte
	}{
		{name: "new", data: []byte("one\n")},
		{name: "replaced", before: []byte("a longer old content\n"), data: []byte("new\n")},
		{name: "empty", before: []byte("old"), data: []byte{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out")
			if tc.before != nil {
				require.NoError(t, os.WriteFile(path, tc.before, 0o644))
			}
			require.NoError(t, atomicfile.WriteFile(path, tc.data))
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, string(tc.data), string(got))
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Len(t, entries, 1, "no temporary file left")
		})
	}
}

func TestWriteFileErrorLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	// The rename fails: path is a directory that is not empty.
	path := filepath.Join(dir, "taken")
	require.NoError(t, os.MkdirAll(filepath.Join(path, "inside"), 0o755))
	require.Error(t, atomicfile.WriteFile(path, []byte("x")))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "the temporary file is removed")
	require.True(t, entries[0].IsDir())
	// The directory does not exist.
	require.Error(t, atomicfile.WriteFile(filepath.Join(dir, "missing", "out"), []byte("x")))
}

func ExampleWriteFile() {
	dir, err := os.MkdirTemp("", "atomicfile-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "figure")
	if err := atomicfile.WriteFile(path, []byte("42\n")); err != nil {
		panic(err)
	}
	b, _ := os.ReadFile(path)
	fmt.Print(string(b))
	// Output: 42
}
