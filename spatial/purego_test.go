package spatial

import (
	"go/build"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoCgo: package spatial has no cgo, in any build. With cgo enabled
// neither it nor any geodlq package it imports (transitively) lists a cgo
// file (a file importing "C") or a C, C++ or header file, and none
// imports GEOS's or PROJ's Go bindings or the packages that link them
// (spatial/geos, spatial/proj): those are injected through Options.
func TestNoCgo(t *testing.T) {
	ctx := build.Default
	ctx.CgoEnabled = true
	forbidden := func(p string) bool {
		return p == "C" || strings.Contains(p, "twpayne/go-geos") || strings.Contains(p, "twpayne/go-proj") ||
			slices.Contains([]string{"github.com/geodlq/geodlq/spatial/geos", "github.com/geodlq/geodlq/spatial/proj"}, p)
	}
	root, err := ctx.ImportDir(".", 0)
	require.NoError(t, err)
	root.ImportPath = "github.com/geodlq/geodlq/spatial"
	require.NotEmpty(t, root.GoFiles)
	for _, p := range root.TestImports {
		require.False(t, forbidden(p), "package spatial's tests import %s", p)
	}
	seen := map[string]bool{}
	queue := []*build.Package{root}
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		name := pkg.ImportPath
		require.Empty(t, pkg.CgoFiles, "cgo files of %s", name)
		require.Empty(t, pkg.CFiles, "C files of %s", name)
		require.Empty(t, pkg.HFiles, "header files of %s", name)
		require.Empty(t, pkg.CXXFiles, "C++ files of %s", name)
		for _, p := range pkg.Imports {
			require.False(t, forbidden(p), "%s imports %s", name, p)
			if seen[p] || !strings.HasPrefix(p, "github.com/geodlq/geodlq/") {
				continue
			}
			seen[p] = true
			dep, err := ctx.Import(p, pkg.Dir, 0)
			require.NoError(t, err, p)
			queue = append(queue, dep)
		}
	}
	require.NotEmpty(t, seen, "geodlq packages spatial imports")
	t.Logf("package spatial and the %d geodlq packages it imports have no cgo", len(seen))
}
