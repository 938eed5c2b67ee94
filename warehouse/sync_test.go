package warehouse

import (
	"context"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/warehouse/internal/fixture"
)

// dataset reads every row of the dataset's visible data files.
func dataset(t *testing.T, dir string) (rows []Row, files []string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == MetaDir {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".parquet") {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, filepath.ToSlash(rel))
			rs, err := parquet.ReadFile[Row](p)
			require.NoError(t, err, p)
			rows = append(rows, rs...)
		}
		return nil
	})
	require.NoError(t, err)
	slices.Sort(files)
	return rows, files
}

func eventIDs(rows []Row) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.EventID
	}
	slices.Sort(ids)
	return ids
}

func filled(t testing.TB, n int) *broker.Store {
	t.Helper()
	s := memory.New(nil)
	require.NoError(t, fixture.Fill(context.Background(), s, "vector-dlq", n, nil))
	return s
}

func TestSyncAppendsOnlyNewRecords(t *testing.T) {
	ctx := context.Background()
	s := filled(t, 120)
	dir := t.TempDir()

	res, err := Sync(ctx, s, dir, &SyncOptions{StoreID: "memory://test"})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Run)
	require.EqualValues(t, 120, res.Rows)
	rows, files := dataset(t, dir)
	require.Len(t, rows, 120)
	require.Equal(t, res.Files, files)
	require.EqualValues(t, 120, res.Watermark.Rows)

	again, err := Sync(ctx, s, dir, &SyncOptions{StoreID: "memory://test"})
	require.NoError(t, err)
	require.Zero(t, again.Rows, "a second sync of the same range adds nothing")
	require.Zero(t, again.Run)
	_, files2 := dataset(t, dir)
	require.Equal(t, files, files2)

	require.NoError(t, fixture.Fill(ctx, s, "vector-dlq", 30, &fixture.Options{From: 120}))
	third, err := Sync(ctx, s, dir, &SyncOptions{StoreID: "memory://test"})
	require.NoError(t, err)
	require.EqualValues(t, 2, third.Run)
	require.EqualValues(t, 30, third.Rows)
	rows, _ = dataset(t, dir)
	require.Len(t, rows, 150)
	ids := eventIDs(rows)
	require.Equal(t, slices.Compact(slices.Clone(ids)), ids, "no duplicates")
	for _, f := range third.Files {
		require.Contains(t, f, "part-r000002-")
	}
}

func TestSyncSmallPagesAndSeenCursor(t *testing.T) {
	ctx := context.Background()
	s := filled(t, 25)
	dir := t.TempDir()
	opts := &SyncOptions{PageSize: 7}
	_, err := Sync(ctx, s, dir, opts)
	require.NoError(t, err)
	for round := 0; round < 4; round++ {
		require.NoError(t, fixture.Fill(ctx, s, "vector-dlq", 3, &fixture.Options{From: 25 + 3*round}))
		res, err := Sync(ctx, s, dir, opts)
		require.NoError(t, err)
		require.EqualValues(t, 3, res.Rows, "round %d", round)
	}
	rows, _ := dataset(t, dir)
	require.Len(t, rows, 37)
	ids := eventIDs(rows)
	require.Equal(t, slices.Compact(slices.Clone(ids)), ids)
}

func TestSyncPartitionsAndColumns(t *testing.T) {
	ctx := context.Background()
	s := filled(t, 60)
	dir := t.TempDir()
	res, err := Sync(ctx, s, dir, &SyncOptions{MaxBufferBytes: 4096, MaxRowsPerFile: 4})
	require.NoError(t, err)
	rows, files := dataset(t, dir)
	require.Len(t, rows, 60)
	require.Equal(t, res.Files, files)
	for _, f := range files {
		parts := strings.Split(f, "/")
		require.Len(t, parts, 3)
		date := strings.TrimPrefix(parts[0], "dead_lettered_date=")
		class := strings.TrimPrefix(parts[1], "class=")
		rs, err := parquet.ReadFile[Row](filepath.Join(dir, f))
		require.NoError(t, err)
		require.LessOrEqual(t, len(rs), 4)
		crs := rs[0].GeometryCRS
		for _, r := range rs {
			require.Equal(t, date, r.DeadLetteredAt.Format(time.DateOnly), f)
			require.Equal(t, class, r.FailureClass, f)
			require.Equal(t, crs, r.GeometryCRS, "one CRS per file: %s", f)
		}
	}
	byClass := map[string]int{}
	for _, r := range rows {
		byClass[r.FailureClass]++
		switch r.FailureClass {
		case string(classify.ClassInvalidGeometry):
			require.Len(t, r.FaultPoint, 21)
			require.NotNil(t, r.BBox)
			require.Equal(t, GeometryOK, r.GeometryStatus)
			require.Equal(t, "EPSG:4326", r.GeometryCRS)
			require.Equal(t, "self_intersection", r.ReasonKind)
			require.NotNil(t, r.FaultVertex)
		case string(classify.ClassSchemaViolation):
			require.Nil(t, r.GeometryBBox)
			require.Equal(t, GeometryUnparseable, r.GeometryStatus)
		}
		require.Equal(t, PayloadNotExported, r.PayloadStatus)
		require.Nil(t, r.Payload)
		require.Equal(t, "pending", r.RepairStatus)
	}
	require.Equal(t, 20, byClass["invalid_geometry"])
	require.Equal(t, 20, byClass["crs_mismatch"])
}

func TestSyncWithPayload(t *testing.T) {
	ctx := context.Background()
	s := filled(t, 12)
	dir := t.TempDir()
	_, err := Sync(ctx, s, dir, &SyncOptions{Options: Options{WithPayload: true}})
	require.NoError(t, err)
	rows, _ := dataset(t, dir)
	require.Len(t, rows, 12)
	for _, r := range rows {
		require.Equal(t, PayloadOK, r.PayloadStatus)
		require.Contains(t, string(r.Payload), `"event_id":"`+r.EventID+`"`)
		require.EqualValues(t, r.PayloadSize, len(r.Payload))
	}
	_, err = Sync(ctx, s, dir, &SyncOptions{})
	require.ErrorIs(t, err, ErrSelectionChanged, "a dataset keeps its selection")
}

func TestSyncFilterAndDestinations(t *testing.T) {
	ctx := context.Background()
	s := filled(t, 30)
	require.NoError(t, fixture.Fill(ctx, s, "other-dlq", 12, &fixture.Options{From: 1000}))
	dir := t.TempDir()
	f := broker.Filter{Classes: []classify.Class{classify.ClassCRSMismatch, classify.ClassSchemaViolation}}
	res, err := Sync(ctx, s, dir, &SyncOptions{Destinations: []string{"vector-dlq"}, Filter: f})
	require.NoError(t, err)
	require.EqualValues(t, 15, res.Rows)
	rows, _ := dataset(t, dir)
	for _, r := range rows {
		require.Contains(t, []string{"crs_mismatch", "schema_violation"}, r.FailureClass)
		require.Equal(t, "vector-dlq", r.DLQDestination)
	}
	_, err = Sync(ctx, s, dir, &SyncOptions{Destinations: []string{"vector-dlq", "other-dlq"}, Filter: f})
	require.ErrorIs(t, err, ErrSelectionChanged)
	_, err = Sync(ctx, s, t.TempDir(), &SyncOptions{Filter: broker.Filter{IDs: []string{"1"}}})
	require.ErrorIs(t, err, ErrInvalidOptions)
}

func TestSyncSettleAndMaxRows(t *testing.T) {
	ctx := context.Background()
	s := filled(t, 40)
	dir := t.TempDir()
	// The fixture's events are dead-lettered every 37 minutes from
	// fixture.Start; the memory store does not record published_at, so the
	// settle delay goes by dead_lettered_at.
	now := fixture.Start.Add(20*fixture.Step + time.Minute)
	res, err := Sync(ctx, s, dir, &SyncOptions{Options: Options{Now: func() time.Time { return now }}, Settle: 2 * fixture.Step})
	require.NoError(t, err)
	require.True(t, res.Settling)
	require.EqualValues(t, 19, res.Rows) // events 0..18 are at least two steps old
	res, err = Sync(ctx, s, dir, &SyncOptions{MaxRows: 10})
	require.NoError(t, err)
	require.True(t, res.Settling)
	require.EqualValues(t, 10, res.Rows)
	res, err = Sync(ctx, s, dir, &SyncOptions{})
	require.NoError(t, err)
	require.False(t, res.Settling)
	require.EqualValues(t, 11, res.Rows)
	rows, _ := dataset(t, dir)
	ids := eventIDs(rows)
	require.Len(t, ids, 40)
	require.Equal(t, slices.Compact(slices.Clone(ids)), ids)
}

// Records that arrive out of time order (eight producers, each
// dead-lettering a different week) are gathered per partition: a run
// writes one file per partition and CRS, not one per record.
func TestSyncOutOfOrderArrival(t *testing.T) {
	ctx := context.Background()
	s := memory.New(nil)
	for i := 0; i < 400; i++ {
		from := (i%8)*1000 + i/8 // producer i%8 is in its own week
		require.NoError(t, fixture.Fill(ctx, s, "vector-dlq", 1, &fixture.Options{From: from, Step: 10 * time.Minute}))
	}
	dir := t.TempDir()
	res, err := Sync(ctx, s, dir, nil)
	require.NoError(t, err)
	require.EqualValues(t, 400, res.Rows)
	parts := map[string]bool{}
	rows, files := dataset(t, dir)
	require.Len(t, rows, 400)
	for _, r := range rows {
		parts[r.DeadLetteredAt.Format(time.DateOnly)+r.FailureClass+r.GeometryCRS] = true
	}
	require.Len(t, files, len(parts), "one file per partition and CRS")

	// Under a small memory budget the largest partitions are written
	// early: more files, each record still once.
	dir = t.TempDir()
	res, err = Sync(ctx, s, dir, &SyncOptions{MaxBufferBytes: 64 << 10})
	require.NoError(t, err)
	rows, files = dataset(t, dir)
	require.Len(t, rows, 400)
	require.Greater(t, len(files), len(parts))
	require.Less(t, len(files), 200)
}
