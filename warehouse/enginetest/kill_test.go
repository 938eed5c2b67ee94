package enginetest

import (
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/warehouse"
)

// TestKilledSyncLeavesDatasetConsistent kills geodlq warehouse sync
// (SIGKILL: no deferred cleanup runs) while it is writing a run's files,
// on a first sync and on an incremental one, and checks that the visible
// files and the watermark agree at once — no partial file, no row the
// watermark does not count — and that the next sync completes the dataset
// with every record exactly once.
func TestKilledSyncLeavesDatasetConsistent(t *testing.T) {
	const first, more = 6_000, 1_500
	readURL, writeURL := backends[0].open(t)
	w := openStore(t, writeURL, true)
	fill(t, w, 0, first)
	bin, err := cli()
	require.NoError(t, err)
	dir := t.TempDir()
	db := duck(t)

	killMidWrite := func() {
		t.Helper()
		cmd := exec.Command(bin, "--store", readURL, "warehouse", "sync", dir, "--settle", "0s", "--max-rows-per-file", "200")
		cmd.Env = append(os.Environ(), "GEODLQ_STORE=", "GEODLQ_BLOBS=")
		require.NoError(t, cmd.Start())
		staging := filepath.Join(dir, warehouse.MetaDir, "staging")
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if n := stagedFiles(staging); n >= 5 {
				break // several files complete, more being written
			}
			require.True(t, time.Now().Before(deadline), "the sync never staged files")
			time.Sleep(2 * time.Millisecond)
		}
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		require.False(t, cmd.ProcessState.Success(), "killed before it finished")
	}

	killMidWrite()
	requireConsistent(t, db, dir, 0)
	syncCLI(t, readURL, dir)
	requireConsistent(t, db, dir, first)

	fill(t, w, first, more)
	killMidWrite()
	requireConsistent(t, db, dir, first)
	rep := syncCLI(t, readURL, dir)
	require.EqualValues(t, more, rep.Rows)
	requireConsistent(t, db, dir, first+more)
}

// stagedFiles counts the staged data files of the run in progress.
func stagedFiles(staging string) int {
	n := 0
	_ = filepath.WalkDir(staging, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".parquet.tmp") {
			n++
		}
		return nil
	})
	return n
}

// requireConsistent checks that the dataset's visible files hold exactly
// the rows its watermark counts (want), each record once, and that no
// commit is pending.
func requireConsistent(t *testing.T, db *sql.DB, dir string, want int) {
	t.Helper()
	wm, err := warehouse.ReadWatermark(dir)
	if want == 0 {
		require.True(t, errors.Is(err, fs.ErrNotExist), "no watermark before the first commit: %v", err)
	} else {
		require.NoError(t, err)
		require.EqualValues(t, want, wm.Rows)
	}
	_, err = os.Stat(filepath.Join(dir, warehouse.MetaDir, "commit.json"))
	require.ErrorIs(t, err, fs.ErrNotExist, "killed before its commit point, a run leaves no commit record")
	var files []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d.IsDir() && d.Name() == warehouse.MetaDir {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".parquet") {
			files = append(files, p)
		}
		return err
	}))
	if want == 0 {
		require.Empty(t, files, "nothing of an uncommitted run is visible")
		return
	}
	require.EqualValues(t, wm.Files, len(files))
	// DuckDB reads every visible file whole: none is partial.
	require.Equal(t, [][]string{{itoa(want), itoa(want)}},
		scan(t, db, "SELECT count(*), count(DISTINCT event_id) FROM read_parquet('"+glob(dir)+"')"))
}
