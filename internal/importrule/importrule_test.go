// Package importrule_test enforces geodlq's layering: the core packages
// build without cgo and import no broker client, cloud SDK or C library.
package importrule_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// core lists the packages that must stay pure Go and client-free.
var core = []string{
	"github.com/geodlq/geodlq/classify",
	"github.com/geodlq/geodlq/envelope",
	"github.com/geodlq/geodlq/offload",
	"github.com/geodlq/geodlq/offload/offloadtest",
	"github.com/geodlq/geodlq/broker",
	"github.com/geodlq/geodlq/broker/memory",
	"github.com/geodlq/geodlq/broker/brokertest",
	"github.com/geodlq/geodlq/replay",
	"github.com/geodlq/geodlq/replay/claimstest",
	"github.com/geodlq/geodlq/offload/gcref",
	"github.com/geodlq/geodlq/triage",
	"github.com/geodlq/geodlq/dlqtest",
	"github.com/geodlq/geodlq/ingress",
}

// forbidden are import-path prefixes the core must not depend on.
var forbidden = []string{
	"github.com/twpayne/",              // GEOS and PROJ bindings (cgo)
	"github.com/geodlq/geodlq/spatial", // checking, and spatial/geos and spatial/proj (cgo)
	"github.com/twmb/franz-go",
	"github.com/redis/",
	"github.com/jackc/",
	"github.com/nats-io/",
	"github.com/rabbitmq/",
	"github.com/aws/",
	"cloud.google.com/",
	"github.com/Azure/",
	"gocloud.dev",
	"google.golang.org/grpc",
	"modernc.org/", // the embedded store is an adapter, not core
}

type pkg struct {
	ImportPath string
	Standard   bool
	CgoFiles   []string
	Imports    []string
	Error      *struct{ Err string }
	DepsErrors []*struct{ Err string }
}

func goList(t *testing.T, cgo string, args ...string) []pkg {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append([]string{"list", "-e", "-deps", "-json"}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestCoreBuildsWithoutCgo(t *testing.T) {
	for _, p := range goList(t, "0", core...) {
		require.Nil(t, p.Error, "%s does not build with CGO_ENABLED=0", p.ImportPath)
		require.Empty(t, p.DepsErrors, "%s has dependency errors with CGO_ENABLED=0", p.ImportPath)
	}
}

func TestCoreImportsNoClientsNorCgo(t *testing.T) {
	for _, p := range goList(t, "1", core...) {
		for _, f := range forbidden {
			require.False(t, strings.HasPrefix(p.ImportPath, f),
				"a core package depends on %s (forbidden prefix %q)", p.ImportPath, f)
		}
		if !p.Standard {
			require.Empty(t, p.CgoFiles, "core dependency %s uses cgo", p.ImportPath)
			require.NotContains(t, p.Imports, "C", "core dependency %s imports C", p.ImportPath)
		}
	}
}

// cgoPackages are the only geodlq packages that use cgo: GEOS and PROJ,
// injected into package spatial, which has none.
var cgoPackages = map[string]bool{
	"github.com/geodlq/geodlq/spatial/geos": true,
	"github.com/geodlq/geodlq/spatial/proj": true,
}

// TestOnlySpatialGEOSAndPROJUseCgo checks that cgo is confined to
// spatial/geos and spatial/proj, and that both do use it (the rule is not
// vacuous).
func TestOnlySpatialGEOSAndPROJUseCgo(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range goList(t, "1", "github.com/geodlq/geodlq/...") {
		if !strings.HasPrefix(p.ImportPath, "github.com/geodlq/geodlq") {
			continue
		}
		if cgoPackages[p.ImportPath] {
			require.NotEmpty(t, p.CgoFiles, "%s links GEOS or PROJ through cgo", p.ImportPath)
			seen[p.ImportPath] = true
			continue
		}
		require.Empty(t, p.CgoFiles, "%s uses cgo; only spatial/geos and spatial/proj may", p.ImportPath)
	}
	require.Len(t, seen, len(cgoPackages), "every cgo package listed")
}
