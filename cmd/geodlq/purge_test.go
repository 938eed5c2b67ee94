package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/triage"
)

// TestTriageThenPurge runs the triage policy (repairs re-enqueued,
// resource_exhausted quarantined with a webhook alert), then purges, and
// proves purge is reference-safe for the blob the two large events share:
// kept while the quarantined copies reference it, deleted with the last
// reference.
func TestTriageThenPurge(t *testing.T) {
	c := seeded(t)
	var mu sync.Mutex
	var alerts []triage.Alert
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var a triage.Alert
		if json.Unmarshal(b, &a) != nil {
			http.Error(w, "bad alert", http.StatusBadRequest)
			return
		}
		mu.Lock()
		alerts = append(alerts, a)
		mu.Unlock()
	}))
	defer hook.Close()

	r := c.must(exitOK, nil, "triage", "--json", "--webhook", hook.URL)
	var rep triageReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Equal(t, 2, rep.Quarantined)
	require.Positive(t, rep.Replay.Counts["repaired"])
	mu.Lock()
	require.Len(t, alerts, 2)
	for _, a := range alerts {
		require.Equal(t, "resource_exhausted", a.Class)
		require.Equal(t, "MultiPolygon", a.GeometryType)
		require.Equal(t, "s3://provider-b/continent.geojson", a.SourceURI)
		require.Positive(t, a.VertexCount)
		require.Equal(t, "parcels.quarantine.dlt", a.Quarantine)
	}
	mu.Unlock()
	require.Equal(t, []string{"evt-big-1", "evt-big-2"}, listIDs(t, c, "--dest", "parcels.quarantine.dlt"))
	blob := blobFile(t, c)

	// Nothing is that old yet.
	r = c.must(exitOK, nil, "purge", "--older-than", "1h", "--yes")
	require.Contains(t, r.stdout, "no records dead-lettered before")

	// Asked, and told no (or not told at all): nothing is deleted.
	all := len(listIDs(t, c, "--all"))
	r = c.must(exitOK, []byte("n\n"), "purge", "--older-than", "0s")
	require.Contains(t, r.stderr, "[y/N]")
	require.Contains(t, r.stderr, "aborted; nothing deleted")
	c.must(exitUsage, []byte{}, "purge", "--older-than", "0s")
	require.Len(t, listIDs(t, c, "--all"), all)

	// The replayed originals in the poison destination go; the blob stays,
	// referenced by the quarantined copies.
	var pr purgeReport
	r = c.must(exitOK, []byte("y\n"), "purge", "--json", "--older-than", "0s", "--replayed-only", "--dest", "parcels.poison.dlt")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &pr))
	require.Positive(t, pr.Records)
	require.Contains(t, pr.Blobs, purgedBlob{URI: blobURI(t, c), Status: "kept_referenced"})
	require.FileExists(t, blob)
	require.Equal(t, all-pr.Records, len(listIDs(t, c, "--all")))

	// A dry run of the last references says the blob would go; then it goes.
	r = c.must(exitOK, nil, "purge", "--json", "--older-than", "0s", "--class", "resource_exhausted", "--dry-run")
	pr = purgeReport{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &pr))
	require.Equal(t, 2, pr.Records)
	require.Equal(t, []purgedBlob{{URI: blobURI(t, c), Status: "would_delete"}}, pr.Blobs)
	require.FileExists(t, blob)

	r = c.must(exitOK, nil, "purge", "--older-than", "0s", "--class", "resource_exhausted", "--yes")
	require.Contains(t, r.stdout, "deleted 2 records")
	require.Contains(t, r.stdout, ": deleted")
	require.NoFileExists(t, blob)
	require.Empty(t, listIDs(t, c, "--all", "--class", "resource_exhausted"))
	c.must(exitOK, nil, "verify") // nothing references a missing blob
}

func blobURI(t *testing.T, c cli) string {
	t.Helper()
	var views []view
	require.NoError(t, json.Unmarshal([]byte(c.must(exitOK, nil, "list", "--all", "--json", "--class", "resource_exhausted").stdout), &views))
	require.NotEmpty(t, views)
	return views[0].GeometryOffloadURI
}
