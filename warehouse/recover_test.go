package warehouse

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"

	"github.com/geodlq/geodlq/warehouse/internal/fixture"
)

var errCrash = errors.New("simulated crash")

// TestSyncInterruptedAtEveryStep stops a run at each step of its commit —
// as a kill would — and checks that the dataset's visible files and its
// watermark agree before recovery (the watermark only counts what it
// committed) and after it (exactly once).
func TestSyncInterruptedAtEveryStep(t *testing.T) {
	for _, tc := range []struct {
		step string
		nth  int
		// visible is whether the interrupted run's files are visible
		// before recovery.
		visible bool
	}{
		{"committed", 1, false},
		{"renamed", 1, true},
		{"renamed", 3, true},
		{"watermark", 1, true},
	} {
		t.Run(tc.step, func(t *testing.T) {
			ctx := context.Background()
			s := filled(t, 40)
			dir := t.TempDir()
			_, err := Sync(ctx, s, dir, &SyncOptions{})
			require.NoError(t, err)
			require.NoError(t, fixture.Fill(ctx, s, "vector-dlq", 30, &fixture.Options{From: 40}))

			n := 0
			_, err = Sync(ctx, s, dir, &SyncOptions{hook: func(step string) error {
				if step == tc.step {
					if n++; n == tc.nth {
						return errCrash
					}
				}
				return nil
			}})
			require.ErrorIs(t, err, errCrash)
			wm, err := ReadWatermark(dir)
			require.NoError(t, err)
			_, pending := os.Stat(filepath.Join(dir, MetaDir, commitName))
			if tc.step == "watermark" {
				require.EqualValues(t, 70, wm.Rows)
			} else {
				require.EqualValues(t, 40, wm.Rows, "the watermark moves last")
				require.NoError(t, pending, "the commit record waits for recovery")
			}
			if !tc.visible {
				rows, _ := dataset(t, dir)
				require.Len(t, rows, 40, "nothing of the run is visible before its commit")
			}

			done, err := Recover(dir)
			require.NoError(t, err)
			require.True(t, done)
			rows, files := dataset(t, dir)
			require.Len(t, rows, 70)
			ids := eventIDs(rows)
			require.Equal(t, slices.Compact(slices.Clone(ids)), ids)
			wm, err = ReadWatermark(dir)
			require.NoError(t, err)
			require.EqualValues(t, 70, wm.Rows)
			require.EqualValues(t, len(files), wm.Files)
			entries, _ := os.ReadDir(filepath.Join(dir, MetaDir))
			for _, e := range entries {
				require.NotEqual(t, stagingDir, e.Name())
				require.NotEqual(t, commitName, e.Name())
			}

			res, err := Sync(ctx, s, dir, &SyncOptions{})
			require.NoError(t, err)
			require.Zero(t, res.Rows)
		})
	}
}

// A run that fails before its commit (here: the store fails mid-scan)
// leaves nothing behind, and the next run does the whole range.
func TestSyncFailedRunLeavesNothing(t *testing.T) {
	ctx := context.Background()
	s := filled(t, 50)
	dir := t.TempDir()
	calls := 0
	failing := listerFunc(func(ctx context.Context, o broker.ListOptions) (broker.Page, error) {
		if calls++; calls == 3 {
			return broker.Page{}, errors.New("connection reset")
		}
		return s.List(ctx, o)
	})
	_, err := Sync(ctx, failing, dir, &SyncOptions{PageSize: 10})
	require.ErrorContains(t, err, "connection reset")
	rows, files := dataset(t, dir)
	require.Empty(t, rows)
	require.Empty(t, files)
	_, err = ReadWatermark(dir)
	require.ErrorIs(t, err, os.ErrNotExist)

	res, err := Sync(ctx, s, dir, &SyncOptions{PageSize: 10})
	require.NoError(t, err)
	require.EqualValues(t, 50, res.Rows)
}

func TestSyncLocked(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, MetaDir), 0o755))
	unlock, err := lockDataset(filepath.Join(dir, MetaDir, lockFile))
	require.NoError(t, err)
	defer unlock()
	_, err = Sync(context.Background(), filled(t, 1), dir, &SyncOptions{})
	require.ErrorIs(t, err, ErrLocked)
}

func TestCorruptWatermark(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, MetaDir), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, MetaDir, WatermarkFile), []byte(`{"format":`), 0o644))
	_, err := Sync(context.Background(), filled(t, 1), dir, &SyncOptions{})
	require.ErrorIs(t, err, ErrCorrupt)
	require.NoError(t, os.WriteFile(filepath.Join(dir, MetaDir, WatermarkFile), []byte(`{"format":"other"}`), 0o644))
	_, err = Sync(context.Background(), filled(t, 1), dir, &SyncOptions{})
	require.ErrorIs(t, err, ErrCorrupt)
	// A commit record naming a path outside the dataset is refused.
	require.NoError(t, os.Remove(filepath.Join(dir, MetaDir, WatermarkFile)))
	require.NoError(t, os.WriteFile(filepath.Join(dir, MetaDir, commitName),
		[]byte(`{"format":"geodlq.warehouse.v1","run":1,"files":[{"staged":"1.parquet.tmp","path":"../../etc/x.parquet"}],"watermark":{}}`), 0o644))
	_, err = Recover(dir)
	require.ErrorIs(t, err, ErrCorrupt)
}

type listerFunc func(ctx context.Context, o broker.ListOptions) (broker.Page, error)

func (f listerFunc) List(ctx context.Context, o broker.ListOptions) (broker.Page, error) {
	return f(ctx, o)
}
