package importrule_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxCoreModules bounds the module graph a user's module gets by importing
// every package of geodlq's root module. The design's own dependencies
// (orb, validator, OpenTelemetry's API, testify, go-geos, go-proj) bring
// about 40, orb's go.mod brings mongo-driver with it.
const maxCoreModules = 45

// heavyModules are module-path prefixes that must never enter the module
// graph of a user who imports only the core: broker clients, cloud SDKs,
// gRPC and Google API clients, SQL drivers, gocloud.dev, CLI frameworks
// and test servers. They live in geodlq's nested modules.
var heavyModules = []string{
	"github.com/twmb/franz-go",
	"github.com/redis/go-redis",
	"github.com/jackc/pgx",
	"github.com/nats-io/",
	"github.com/rabbitmq/",
	"github.com/aws/",
	"github.com/Azure/",
	"cloud.google.com/",
	"google.golang.org/api",
	"google.golang.org/grpc",
	"google.golang.org/genproto",
	"modernc.org/",
	"github.com/go-sql-driver/",
	"github.com/lib/pq",
	"github.com/mattn/go-sqlite3",
	"gocloud.dev",
	"github.com/spf13/cobra",
	"github.com/spf13/pflag",
	"github.com/urfave/cli",
	"github.com/johannesboyne/gofakes3",
	"github.com/duckdb/",
	"github.com/parquet-go/",
	"github.com/apache/arrow",
	"github.com/cloudevents/",
	"github.com/aws/aws-lambda-go",
	"github.com/peterstace/simplefeatures", // benchmark-only (internal/enginebench)
	"github.com/geodlq/geodlq/",            // a nested module: the core must not need one
}

// userPins are the versions a user's module pins of the clients geodlq's
// adapters use, older than geodlq's own. Importing the core must leave
// every one of them alone.
var userPins = map[string]string{
	"github.com/redis/go-redis/v9": "v9.7.0",
	"github.com/jackc/pgx/v5":      "v5.7.1",
	"github.com/twmb/franz-go":     "v1.17.0",
	"github.com/nats-io/nats.go":   "v1.37.0",
	"github.com/aws/aws-sdk-go-v2": "v1.30.0",
}

// userPinImports are packages of userPins' modules, imported so that
// go mod tidy keeps the pins.
var userPinImports = []string{
	"github.com/redis/go-redis/v9",
	"github.com/jackc/pgx/v5",
	"github.com/twmb/franz-go/pkg/kgo",
	"github.com/nats-io/nats.go",
	"github.com/aws/aws-sdk-go-v2/aws",
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	return root
}

// goCmd runs the go command in dir with the workspace off, as a user's
// module would build, and returns its standard output.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go %s in %s: %s", strings.Join(args, " "), dir, stderr.String())
	return string(out)
}

// rootPackages lists every importable package of the root module.
func rootPackages(t *testing.T) []string {
	t.Helper()
	var pkgs []string
	for p := range strings.FieldsSeq(goCmd(t, repoRoot(t), "list", "./...")) {
		if !strings.Contains(p, "/internal/") && !strings.HasSuffix(p, "/internal") {
			pkgs = append(pkgs, p)
		}
	}
	require.NotEmpty(t, pkgs)
	return pkgs
}

// scratchModule writes a user's module that imports imports and requires
// requires (path → version), with geodlq's root module replaced by this
// checkout, and tidies it.
func scratchModule(t *testing.T, imports []string, requires map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	var mod strings.Builder
	fmt.Fprintf(&mod, "module example.com/user\n\ngo 1.25.0\n\nrequire (\n\tgithub.com/geodlq/geodlq v0.0.0-00010101000000-000000000000\n")
	for p, v := range requires {
		fmt.Fprintf(&mod, "\t%s %s\n", p, v)
	}
	fmt.Fprintf(&mod, ")\n\nreplace github.com/geodlq/geodlq => %s\n", repoRoot(t))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod.String()), 0o644))
	var src strings.Builder
	src.WriteString("package main\n\nimport (\n")
	for _, p := range imports {
		fmt.Fprintf(&src, "\t_ %q\n", p)
	}
	src.WriteString(")\n\nfunc main() {}\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src.String()), 0o644))
	goCmd(t, dir, "mod", "tidy")
	require.Equal(t, "1.25.0", goDirective(t, filepath.Join(dir, "go.mod")), "importing the core raised the user's go line")
	return dir
}

// TestCoreModuleGraph imports every package of the root module from a
// fresh module and checks the module graph that brings: small, and free
// of broker clients, cloud SDKs, drivers and CLI frameworks.
func TestCoreModuleGraph(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a scratch module with the go command (runs in make test)")
	}
	dir := scratchModule(t, rootPackages(t), nil)
	mods := strings.Split(strings.TrimSpace(goCmd(t, dir, "list", "-m", "all")), "\n")
	t.Logf("%d modules in the graph of a module importing the whole core", len(mods))
	require.LessOrEqual(t, len(mods), maxCoreModules, "go list -m all:\n%s", strings.Join(mods, "\n"))
	for _, m := range mods {
		path := strings.Fields(m)[0]
		for _, h := range heavyModules {
			require.False(t, strings.HasPrefix(path, h),
				"importing the core brings %s into the user's module graph (forbidden prefix %q)", m, h)
		}
	}
}

// TestCoreLeavesUserPinsAlone pins older versions of the clients geodlq's
// adapters use, imports the whole core, and checks that go mod tidy (that
// is, minimal version selection with geodlq in the graph) upgrades none of
// them.
func TestCoreLeavesUserPinsAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a scratch module with the go command (runs in make test)")
	}
	dir := scratchModule(t, append(rootPackages(t), userPinImports...), userPins)
	for path, want := range userPins {
		got := strings.TrimSpace(goCmd(t, dir, "list", "-m", "-f", "{{.Version}}", path))
		require.Equal(t, want, got, "importing the core changed the user's pin of %s", path)
	}
}
