package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExportFileModes: files written through a temporary name (every
// export format, Parquet included) get 0644 less the umask, as an
// ordinary create would (os.CreateTemp's 0600 kept other readers out).
func TestExportFileModes(t *testing.T) {
	t.Parallel()
	c := seeded(t)
	for _, umask := range []fs.FileMode{0o022, 0o027, 0o077} {
		dir := t.TempDir()
		for _, name := range []string{"dl.parquet", "dl.geojson", "dl.csv", "dl.jsonl", "dl.gpkg"} {
			t.Run(fmt.Sprintf("%04o/%s", umask, name), func(t *testing.T) {
				file := filepath.Join(dir, name)
				args := append([]string{"-c", fmt.Sprintf(`umask %04o && exec "$0" "$@"`, umask), binary}, c.base()...)
				cmd := exec.Command("sh", append(args, "export", file)...)
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, "%s", out)
				fi, err := os.Stat(file)
				require.NoError(t, err)
				require.Equal(t, 0o644&^umask, fi.Mode().Perm(), "%s under umask %04o", name, umask)
			})
		}
	}
}
