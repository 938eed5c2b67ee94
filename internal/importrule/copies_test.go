package importrule_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// helperCopies are test helpers that several modules (or example
// directories) each hold a copy of, so that no module requires a
// test-support module and a copied example directory is whole. The files
// of each set must stay identical.
var helperCopies = map[string][]string{
	"pgtest": {
		"broker/postgis/internal/pgtest", "replay/pgclaims/internal/pgtest",
		"pgmigrate/internal/pgtest", "warehouse/enginetest/internal/pgtest",
	},
	"redistest": {"broker/redisstream/internal/redistest", "replay/redisclaims/internal/redistest"},
}

// helperFiles are the files compared in each directory of a set.
var helperFiles = map[string][]string{
	"pgtest":    {"pgtest.go", "proxy.go"},
	"redistest": {"redistest.go", "proxy.go"},
}

// exampleCopies are files the broker examples each hold word for word.
var exampleCopies = map[string][]string{
	"sample_test.go": {"jetstream-consumer", "postgis-consumer", "rabbitmq-consumer", "redis-consumer"},
}

// TestHelperCopies checks that every copy of a shared test helper is the
// same, byte for byte.
func TestHelperCopies(t *testing.T) {
	root := repoRoot(t)
	same := func(files []string) {
		t.Helper()
		want, err := os.ReadFile(files[0])
		require.NoError(t, err)
		for _, f := range files[1:] {
			got, err := os.ReadFile(f)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), "%s differs from %s: change every copy", f, files[0])
		}
	}
	for set, dirs := range helperCopies {
		for _, name := range helperFiles[set] {
			var files []string
			for _, d := range dirs {
				files = append(files, filepath.Join(root, d, name))
			}
			same(files)
		}
	}
	for name, dirs := range exampleCopies {
		var files []string
		for _, d := range dirs {
			files = append(files, filepath.Join(root, "examples", d, name))
		}
		same(files)
	}
}
