package postgis_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/broker/postgis/internal/pgtest"
)

// TestMigrateToSummaries: a table of schema version 2 holding records
// (written as a geodlq of that version wrote them) is listed the old way,
// and once migrated to version 3 every record has its summary, sorts in
// SQL and is found by the text search.
func TestMigrateToSummaries(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.NewPool(t, 4)
	old, err := postgis.New(ctx, pool, &postgis.Options{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, postgis.MigrateToForTest(ctx, old, 2))
	v, err := postgis.VersionForTest(ctx, old)
	require.NoError(t, err)
	require.Equal(t, 2, v)
	msgs := brokertest.Messages(t, brokertest.ListingInputs())
	publishAll(t, old, "d", msgs)
	c, ok := old.Driver().(broker.ListCapabler)
	require.True(t, ok)
	require.Empty(t, c.ListCapabilities().Sorts, "version 2 is listed the old way")
	top, err := old.List(ctx, broker.ListOptions{Sort: broker.SortVertexCount, Descending: true, Limit: 1, Summaries: true, Total: true})
	require.NoError(t, err, "the portable store sorts a table of version 2")
	require.Equal(t, 100, top.Entries[0].Summary.VertexCount)
	require.Equal(t, len(msgs), top.Total)

	s, err := postgis.New(ctx, pool, &postgis.Options{Schema: schema, Create: true})
	require.NoError(t, err)
	v, err = postgis.VersionForTest(ctx, s)
	require.NoError(t, err)
	require.Equal(t, 5, v)
	require.Zero(t, count(t, s, "summary IS NULL"), "the migration indexed every record")
	c = s.Driver().(broker.ListCapabler)
	require.NotEmpty(t, c.ListCapabilities().Sorts)
	top, err = s.List(ctx, broker.ListOptions{Sort: broker.SortVertexCount, Descending: true, Limit: 1, Summaries: true, Total: true})
	require.NoError(t, err)
	require.Equal(t, 100, top.Entries[0].Summary.VertexCount, "sorted in SQL")
	require.Equal(t, len(msgs), top.Total)
	found, err := s.List(ctx, broker.ListOptions{Filter: broker.Filter{Text: "SUDAN"}, Summaries: true})
	require.NoError(t, err)
	require.Len(t, found.Entries, 2, "the text search covers the migrated records")
	counts, err := s.Stats(ctx, broker.StatsOptions{BySource: true, SourceDepth: 2})
	require.NoError(t, err)
	by := map[string]int{}
	for _, c := range counts {
		by[c.Source] += c.Total()
	}
	require.Equal(t, map[string]int{"https://tiles.example/osm": 6, "https://tiles.example/ign": 3, "https://tiles.example/usgs": 1}, by)
}
