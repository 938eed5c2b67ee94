package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPackageOf(t *testing.T) {
	mods := []string{"github.com/geodlq/geodlq/cmd/geodlq", "github.com/twpayne/go-proj/v11", "github.com/geodlq/geodlq/cmd/geodlq", "github.com/geodlq/geodlq", "gocloud.dev"}
	for sym, want := range map[string][2]string{
		"github.com/geodlq/geodlq/envelope.(*Builder).Build": {"github.com/geodlq/geodlq/envelope", "github.com/geodlq/geodlq"},
		"github.com/geodlq/geodlq/cmd/geodlq.newRoot":        {"github.com/geodlq/geodlq/cmd/geodlq", "github.com/geodlq/geodlq/cmd/geodlq"},
		"github.com/twpayne/go-proj/v11.(*PJ).Forward":       {"github.com/twpayne/go-proj/v11", "github.com/twpayne/go-proj/v11"},
		"gocloud.dev/blob.(*Bucket).NewReader":               {"gocloud.dev/blob", "gocloud.dev"},
		"net/http.(*conn).serve":                             {"net/http", "std"},
		"runtime.mallocgc":                                   {"runtime", "std"},
		"type:*github.com/geodlq/geodlq/envelope.Envelope":   {"[linker data: pcln tables, types, strings]", "[linker data: pcln tables, types, strings]"},
		"go:string.*":       {"[linker data: pcln tables, types, strings]", "[linker data: pcln tables, types, strings]"},
		"_cgo_topofstack":   {"[C: cgo and the C shims]", "[C: cgo and the C shims]"},
		"gdlq_check":        {"[C: cgo and the C shims]", "[C: cgo and the C shims]"},
		"example.org/x/y.F": {"example.org/x/y", "[other: example.org]"},
		"go.shape.int":      {"[linker data: pcln tables, types, strings]", "[linker data: pcln tables, types, strings]"},
		"github.com/geodlq/geodlq/broker.Fetch[go.shape.string]": {"github.com/geodlq/geodlq/broker", "github.com/geodlq/geodlq"},
		"slices..dict.stableCmpFunc[internal/abi.Name]":          {"slices", "std"},
		"main.main": {"main", "github.com/geodlq/geodlq/cmd/geodlq"},
	} {
		pkg := packageOf(sym)
		require.Equal(t, want[0], pkg, sym)
		require.Equal(t, want[1], moduleOf(pkg, mods), sym)
	}
}

// TestTable builds a small binary and checks the table accounts for its
// symbols: the standard library leads, the main module has a row.
func TestTable(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/small\n\ngo 1.25.0\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hi\") }\n"), 0o644))
	bin := filepath.Join(dir, "small")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var b strings.Builder
	require.NoError(t, run(&b, bin, 10))
	lines := strings.Split(b.String(), "\n")
	require.Contains(t, lines[0], "MB of a")
	require.True(t, strings.HasPrefix(lines[4], "| std |") || strings.HasPrefix(lines[4], "| [linker data"), lines[4])
	require.Contains(t, b.String(), "| example.com/small |")
}
