package sqlite

import (
	"context"
	"database/sql"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/classify"
)

// TestListPlans: a page is the same whichever plan reads it (a filter's
// index read and sorted, or the order walked and each row checked), for
// every sort, direction, filter and destination, across pages; so is
// Total, exact without TotalCap and, with it, exact or the cap flagged as
// a lower bound.
func TestListPlans(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "plans.db")
	s, err := Open(ctx, path, &Options{SourcePointers: []string{"/properties/provider"}})
	require.NoError(t, err)
	defer s.Close()
	d := s.Driver().(*drv)
	msgs := brokertest.Messages(t, brokertest.ListingInputs())
	for range 3 {
		require.NoError(t, s.PublishBatch(ctx, "a", msgs))
		require.NoError(t, s.PublishBatch(ctx, "b", msgs[:4]))
	}
	require.NoError(t, s.Publish(ctx, "a", &broker.Message{Body: []byte("not an envelope")}))
	recs, err := s.Fetch(ctx, "a", broker.Filter{}, 2)
	require.NoError(t, err)
	require.NoError(t, s.Ack(ctx, recs[0]))

	base := brokertest.ListingBaseTime
	filters := map[string]broker.Filter{
		"none":         {},
		"class":        {Classes: []classify.Class{classify.ClassTransient}},
		"classes":      {Classes: []classify.Class{classify.ClassTransient, classify.ClassInvalidGeometry}},
		"kind":         {ReasonKinds: []classify.ReasonKind{classify.KindTooFewPoints}},
		"epsg":         {EPSG: []int{0}},
		"common text":  {Text: "sudan"},
		"rare text":    {Text: "chukotka"},
		"short text":   {Text: "fi"},
		"since":        {Since: base.Add(4 * time.Hour)},
		"until":        {Until: base.Add(3 * time.Hour)},
		"range":        {Since: base.Add(2 * time.Hour), Until: base.Add(7 * time.Hour)},
		"empty range":  {Since: base.Add(100 * time.Hour)},
		"source":       {SourcePointer: "/properties/provider", Sources: []string{"osm"}},
		"sources":      {SourcePointer: "/properties/provider", Sources: []string{"ign", "usgs"}},
		"unindexed":    {SourcePointer: "/properties/name", Sources: []string{"Chad"}},
		"class since":  {Classes: []classify.Class{classify.ClassInvalidGeometry}, Since: base.Add(3 * time.Hour)},
		"text source":  {Text: "sudan", SourcePointer: "/properties/provider", Sources: []string{"ign"}},
		"prefix":       {SourcePrefix: "https://tiles.example/osm"},
		"ptr prefix":   {SourcePointer: "/properties/provider", SourcePrefix: "i"},
		"event ids":    {EventIDs: []string{"evt-list-3", "evt-list-9"}},
		"ids and kind": {IDs: []string{"1", "5", "12"}, ReasonKinds: []classify.ReasonKind{classify.KindTooFewPoints}},
	}
	list := func(opts broker.ListOptions) ([]string, int) {
		var ids []string
		total := -1
		for range 100 {
			p, err := s.List(ctx, opts)
			require.NoError(t, err, "%+v", opts)
			if total < 0 {
				total = p.Total
			}
			require.Equal(t, total, p.Total, "%+v: every page has the same Total", opts)
			require.False(t, p.TotalIsLowerBound)
			for _, e := range p.Entries {
				ids = append(ids, e.Record.Destination+"/"+e.Record.ID)
			}
			if p.Next == "" {
				return ids, total
			}
			opts.After = p.Next
		}
		t.Fatal("no last page")
		return nil, 0
	}
	// Every filter with every sort key, each pair under two of the eight
	// combinations of destination, direction and replayed, turned with the
	// filter and the key so that every filter meets all eight (over its
	// five keys) and so does every key (over the filters): the whole cross
	// product read 22,000 pages under the race detector (187 s of the
	// package's time; 600 s+ in make test alongside the other packages).
	names := slices.Sorted(maps.Keys(filters))
	for fi, name := range names {
		f := filters[name]
		for ki, k := range broker.SortKeys() {
			for _, c := range []int{(fi + ki) % 8, (fi + ki + 4) % 8} {
				dest, desc, replayed := []string{"", "a"}[c&1], c&2 != 0, c&4 != 0
				opts := broker.ListOptions{Destination: dest, Filter: f, Sort: k, Descending: desc, IncludeReplayed: replayed,
					Limit: 4, Summaries: true, Total: true}
				d.common = 1 << 30 // every filter few: its index read, the matches sorted
				want, wantTotal := list(opts)
				d.common = 3 // every filter common: the order walked
				got, total := list(opts)
				require.Equal(t, want, got, "filter %s, destination %q, sort %q, descending %v, replayed %v", name, dest, k, desc, replayed)
				require.Equal(t, wantTotal, total)
				require.Len(t, got, total, "filter %s: Total counts what is listed", name)
				for _, limit := range []int{1, total, total + 1} {
					if limit <= 0 {
						continue
					}
					opts.TotalCap = limit
					p, err := s.List(ctx, opts)
					require.NoError(t, err)
					if p.TotalIsLowerBound {
						require.Less(t, limit, total, "filter %s: a lower bound only when more match", name)
						require.Equal(t, limit, p.Total)
					} else {
						require.Equal(t, total, p.Total, "filter %s, cap %d", name, limit)
					}
					opts.TotalCap = 0
				}
			}
		}
	}
	d.common = commonMatches
	common, err := d.commonText(ctx, broker.SearchFold("sudan"))
	require.NoError(t, err)
	require.False(t, common, "a text of a few records is not common")
	d.common = 3
	common, err = d.commonText(ctx, broker.SearchFold("sudan"))
	require.NoError(t, err)
	require.True(t, common)
}

// TestMigrateToVersion4: a file of version 3 gets version 4's indexes when
// opened read-write, and the index of each of Options.SourcePointers
// (once; an invalid pointer is refused); a read-only handle on a file of
// version 3 still lists in SQL.
func TestMigrateToVersion4(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v3.db")
	s, err := Open(ctx, path, nil)
	require.NoError(t, err)
	require.NoError(t, s.PublishBatch(ctx, "a", brokertest.Messages(t, brokertest.ListingInputs())))
	var db *sql.DB
	require.True(t, s.As(&db))
	_, err = db.Exec(`DROP INDEX dlq_class_attempts; DROP INDEX dlq_kind_attempts; DROP INDEX dlq_epsg_attempts; PRAGMA user_version = 3;`)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	indexes := func(db *sql.DB) []string {
		rows, err := db.Query(`SELECT name FROM sqlite_schema WHERE type = 'index' AND name LIKE 'dlq_%' ORDER BY name`)
		require.NoError(t, err)
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			require.NoError(t, rows.Scan(&n))
			names = append(names, n)
		}
		require.NoError(t, rows.Err())
		return names
	}
	ro, err := Open(ctx, path, &Options{StoreOptions: broker.StoreOptions{ReadOnly: true}, SourcePointers: []string{"/properties/provider"}})
	require.NoError(t, err)
	c := ro.Driver().(broker.ListCapabler).ListCapabilities()
	require.NotEmpty(t, c.Sorts, "a read-only handle lists a file of version 3 in SQL")
	p, err := ro.List(ctx, broker.ListOptions{Sort: broker.SortAttempts, Filter: broker.Filter{Classes: []classify.Class{classify.ClassTransient}},
		Summaries: true, Total: true})
	require.NoError(t, err)
	require.Equal(t, 2, p.Total)
	require.True(t, ro.Driver().(broker.Aser).As(&db))
	require.NotContains(t, indexes(db), "dlq_class_attempts", "a read-only handle migrates nothing")
	require.NoError(t, ro.Close())

	_, err = Open(ctx, path, &Options{SourcePointers: []string{"properties/provider"}})
	require.ErrorIs(t, err, broker.ErrInvalidArgument)

	s, err = broker.OpenStore(ctx, "sqlite://"+path+"?source_pointer=/properties/provider&source_pointer=/source_uri", nil)
	require.NoError(t, err)
	defer s.Close()
	require.True(t, s.Driver().(broker.Aser).As(&db))
	var v int
	require.NoError(t, db.QueryRow(`PRAGMA user_version`).Scan(&v))
	require.Equal(t, schemaVersion, v)
	names := indexes(db)
	for _, n := range []string{"dlq_class_attempts", "dlq_kind_attempts", "dlq_epsg_attempts", sourceIndex("/properties/provider")} {
		require.Contains(t, names, n)
	}
	require.NotContains(t, names, sourceIndex("/source_uri"), "the default pointer's source is a column")
	p, err = s.List(ctx, broker.ListOptions{Sort: broker.SortAttempts, Descending: true, Summaries: true, Total: true,
		Filter: broker.Filter{SourcePointer: "/properties/provider", Sources: []string{"osm"}}})
	require.NoError(t, err)
	require.Equal(t, 6, p.Total)
	require.Len(t, p.Entries, 6)
}
