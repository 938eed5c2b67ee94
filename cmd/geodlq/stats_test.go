package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/corpus"
)

func TestStats(t *testing.T) {
	t.Parallel()
	c := seeded(t)
	want := map[string]int{}
	total := 0
	for _, it := range corpus.All() {
		if !it.Valid() {
			want[it.Class.String()]++
			total++
		}
	}
	want["invalid_geometry"] += 2   // the providers' bowties
	want["resource_exhausted"] += 2 // the large events
	total += 4

	r := c.must(exitOK, nil, "stats", "-o", "json", "--bucket", "1h")
	var rep statsReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Equal(t, total, rep.Total)
	require.Equal(t, want, rep.ByClass)
	require.Equal(t, map[string]int{"parcels.poison.dlt": total}, rep.ByDestination)
	require.Equal(t, map[string]int{"pending": total}, rep.ByStatus)
	require.Equal(t, 2, rep.ByEPSG["3857"])
	require.Equal(t, 4, rep.ByReasonKind["self_intersection"])
	require.Equal(t, map[string]int{"s3://provider-a": 1, "s3://provider-b": 3, "(none)": total - 4}, rep.BySourcePrefix)
	require.NotEmpty(t, rep.Buckets)
	sum := 0
	for _, b := range rep.Buckets {
		sum += b.Total
	}
	require.Equal(t, total, sum)

	r = c.must(exitOK, nil, "stats", "-o", "json", "--prefix-depth", "2", "--source-prefix", "s3://provider-b")
	rep = statsReport{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Equal(t, map[string]int{"s3://provider-b/continent.geojson": 2, "s3://provider-b/parcels": 1}, rep.BySourcePrefix)

	r = c.must(exitOK, nil, "stats", "--class", "crs_mismatch")
	require.Contains(t, r.stdout, "4 envelopes")
	require.Contains(t, r.stdout, "crs_differs")
	c.must(exitUsage, nil, "stats", "--bucket", "0s")
}
