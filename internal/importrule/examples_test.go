package importrule_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// unpublished is the version a scratch module requires geodlq's root
// module at; a replace directive points it at this checkout.
const unpublished = "v0.0.0-00010101000000-000000000000"

// internalImport reports whether an import path names an internal
// package, which only code inside the tree that holds it may import.
func internalImport(path string) bool {
	return slices.Contains(strings.Split(path, "/"), "internal")
}

// exampleDirs lists the directories under examples/ that hold a main
// package: the examples a user copies.
func exampleDirs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(repoRoot(t), "examples"))
	require.NoError(t, err)
	var dirs []string
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "internal" || e.Name() == "testdata" {
			continue
		}
		dir := filepath.Join(repoRoot(t), "examples", e.Name())
		if _, err := os.Stat(filepath.Join(dir, "main.go")); err == nil {
			dirs = append(dirs, dir)
		}
	}
	require.NotEmpty(t, dirs)
	return dirs
}

// copyFiles are the files of an example a user copies: every regular file,
// tests included (make release-check copies each directory whole into a
// module of its own and builds, vets and tests it there).
func copyFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			files = append(files, e.Name())
		}
	}
	return files
}

func TestInternalImport(t *testing.T) {
	cases := map[string]bool{
		"github.com/geodlq/geodlq/examples/internal/sample": true,
		"github.com/geodlq/geodlq/internal/testenv":         true,
		"internal/poll":                             true,
		"github.com/geodlq/geodlq/internal":         true,
		"github.com/geodlq/geodlq/broker/jetstream": false,
		"github.com/example/internals/x":            false,
		"github.com/example/xinternal":              false,
	}
	for path, want := range cases {
		require.Equal(t, want, internalImport(path), path)
	}
}

// TestExamplesImportNoInternalPackage parses every Go file of every
// example, tests included: none may import an internal package, of geodlq
// or of anything else, since a copy in another module could not.
func TestExamplesImportNoInternalPackage(t *testing.T) {
	for _, dir := range exampleDirs(t) {
		for _, name := range copyFiles(t, dir) {
			if !strings.HasSuffix(name, ".go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ImportsOnly)
			require.NoError(t, err)
			for _, imp := range f.Imports {
				p, err := strconv.Unquote(imp.Path.Value)
				require.NoError(t, err)
				require.False(t, internalImport(p), "examples/%s/%s imports %s, an internal package: a copy of the example in another module cannot build",
					filepath.Base(dir), name, p)
			}
		}
	}
}

// goDirective reads the go directive of a go.mod file.
func goDirective(t *testing.T, gomod string) string {
	t.Helper()
	b, err := os.ReadFile(gomod)
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s has no go directive", gomod)
	return ""
}
