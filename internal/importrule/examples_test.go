package importrule_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// geodlqModule is the path every module of this repository starts with.
const geodlqModule = "github.com/geodlq/geodlq"

// examplesModule holds the examples; a copy of one must not need it.
const examplesModule = geodlqModule + "/examples"

// unpublished is the version a scratch module requires geodlq's modules
// at; a replace directive points each at this checkout.
const unpublished = "v0.0.0-00010101000000-000000000000"

// workModule is a module of the workspace: its path and directory.
type workModule struct{ path, dir string }

// workModules lists the modules go.work uses, longest path first, so that
// the first whose path prefixes an import path is the import's module.
func workModules(t *testing.T) []workModule {
	t.Helper()
	root := repoRoot(t)
	var work struct{ Use []struct{ DiskPath string } }
	require.NoError(t, json.Unmarshal([]byte(goCmdWork(t, root, "work", "edit", "-json")), &work))
	var mods []workModule
	for _, u := range work.Use {
		dir := filepath.Join(root, u.DiskPath)
		mods = append(mods, workModule{path: modulePath(t, filepath.Join(dir, "go.mod")), dir: dir})
	}
	require.NotEmpty(t, mods)
	slices.SortFunc(mods, func(a, b workModule) int { return len(b.path) - len(a.path) })
	return mods
}

// goCmdWork runs the go command in dir with the repository's go.work,
// and returns its standard output.
func goCmdWork(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go %s in %s: %s", strings.Join(args, " "), dir, stderr.String())
	return string(out)
}

// modulePath reads the module directive of a go.mod file.
func modulePath(t *testing.T, gomod string) string {
	t.Helper()
	f, err := os.Open(gomod)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			p := strings.TrimSpace(rest)
			if uq, err := strconv.Unquote(p); err == nil {
				p = uq
			}
			return p
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("%s has no module directive", gomod)
	return ""
}

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

// copyFiles are the files of an example a user copies: every regular file
// but the tests (non-Go files too, since main.go may embed them).
func copyFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() && !strings.HasSuffix(e.Name(), "_test.go") {
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

// TestExamplesImportNoInternalPackage parses every non-test Go file of
// every example: none may import an internal package, of geodlq or of
// anything else, since a copy in another module could not.
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

// TestExamplesBuildWhenCopied copies each example's non-test files into a
// fresh module of its own (example.com/copy), which requires the geodlq
// modules the example imports — at an unpublished version replaced by
// this checkout's directories, as a user's module would require a tagged
// one — tidies it with the workspace off, and builds it. An example that
// needs anything a user cannot have (an internal package, a sibling file
// left out, a dependency only the examples module pins) fails here.
func TestExamplesBuildWhenCopied(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every example in a scratch module with the go command (runs in make test)")
	}
	mods := workModules(t)
	goVersion := goDirective(t, filepath.Join(repoRoot(t), "examples", "go.mod"))
	start := time.Now()
	t.Cleanup(func() {
		t.Logf("every example copied, tidied and built in %s", time.Since(start).Round(100*time.Millisecond))
	})
	for _, dir := range exampleDirs(t) {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			began := time.Now()
			scratch := t.TempDir()
			required := map[string]bool{}
			for _, f := range copyFiles(t, dir) {
				b, err := os.ReadFile(filepath.Join(dir, f))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(scratch, f), b, 0o644))
				if !strings.HasSuffix(f, ".go") {
					continue
				}
				parsed, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, f), b, parser.ImportsOnly)
				require.NoError(t, err)
				for _, imp := range parsed.Imports {
					p, _ := strconv.Unquote(imp.Path.Value)
					if p != geodlqModule && !strings.HasPrefix(p, geodlqModule+"/") {
						continue
					}
					for _, m := range mods {
						if p == m.path || strings.HasPrefix(p, m.path+"/") {
							require.NotEqual(t, examplesModule, m.path, "examples/%s/%s imports %s, a package of the examples module: a copy cannot require it", name, f, p)
							required[m.path] = true
							break
						}
					}
				}
			}
			require.NotEmpty(t, required, "examples/%s imports no geodlq package", name)
			var mod strings.Builder
			fmt.Fprintf(&mod, "module example.com/copy\n\ngo %s\n\nrequire (\n", goVersion)
			for _, p := range slices.Sorted(maps.Keys(required)) {
				fmt.Fprintf(&mod, "\t%s %s\n", p, unpublished)
			}
			mod.WriteString(")\n\n")
			// Every geodlq module but the examples', so that the ones the
			// required modules require in turn resolve to this checkout too.
			for _, m := range mods {
				if m.path != examplesModule {
					fmt.Fprintf(&mod, "replace %s => %s\n", m.path, m.dir)
				}
			}
			require.NoError(t, os.WriteFile(filepath.Join(scratch, "go.mod"), []byte(mod.String()), 0o644))
			goCmd(t, scratch, "mod", "tidy")
			tidied := time.Now()
			goCmd(t, scratch, "build", "-o", os.DevNull, ".")
			t.Logf("examples/%s builds in a module of its own (tidy %s, build %s)", name,
				tidied.Sub(began).Round(100*time.Millisecond), time.Since(tidied).Round(100*time.Millisecond))
		})
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
