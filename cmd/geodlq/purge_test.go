package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
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
	t.Parallel()
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

	r := c.must(exitOK, nil, "triage", "-o", "json", "--target", c.store, "--webhook", hook.URL)
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
	r = c.must(exitOK, []byte("y\n"), "purge", "-o", "json", "--older-than", "0s", "--replayed-only", "--dest", "parcels.poison.dlt", "--blob-grace", "0s")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &pr))
	require.Positive(t, pr.Records)
	require.Empty(t, pr.Unreferenced)
	require.Equal(t, 1, pr.Sweep.Referenced)
	require.Empty(t, pr.Sweep.Quarantined)
	require.FileExists(t, blob)
	require.Equal(t, all-pr.Records, len(listIDs(t, c, "--all")))

	// A dry run of the last references says the blob would go; it stays.
	uri := blobURI(t, c)
	key := "geodlq/" + filepath.Base(blob)
	r = c.must(exitOK, nil, "purge", "-o", "json", "--older-than", "0s", "--class", "resource_exhausted", "--dry-run", "--blob-grace", "0s")
	pr = purgeReport{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &pr))
	require.Equal(t, 2, pr.Records)
	require.Equal(t, []string{uri}, pr.Unreferenced)
	require.Equal(t, []string{key}, pr.Sweep.Quarantined)
	require.FileExists(t, blob)

	// With the default grace period a young blob is kept even unreferenced.
	r = c.must(exitOK, nil, "purge", "-o", "json", "--older-than", "0s", "--class", "resource_exhausted", "--dry-run")
	pr = purgeReport{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &pr))
	require.Equal(t, 1, pr.Sweep.Young)
	require.Empty(t, pr.Sweep.Quarantined)

	// Purged: the blob is quarantined at once (grace 0s) ...
	r = c.must(exitOK, nil, "purge", "--older-than", "0s", "--class", "resource_exhausted", "--yes", "--blob-grace", "0s")
	require.Contains(t, r.stdout, "deleted 2 records")
	require.Contains(t, r.stdout, "no remaining record references "+uri)
	require.Contains(t, r.stdout, "quarantined "+key)
	require.NoFileExists(t, blob)
	require.Empty(t, listIDs(t, c, "--all", "--class", "resource_exhausted"))
	c.must(exitOK, nil, "verify") // nothing references it

	// ... and deleted for good by the next sweep.
	r = c.must(exitOK, nil, "purge", "-o", "json", "--older-than", "0s", "--yes", "--blob-grace", "0s", "--class", "schema_violation", "--replayed-only")
	pr = purgeReport{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &pr))
	require.Zero(t, pr.Records)
	require.Len(t, pr.Sweep.Deleted, 1)
	require.Contains(t, pr.Sweep.Deleted[0], "gc-trash/")

	// Without --blobs, or with --keep-blobs, blobs are left alone.
	noBlobs := c
	noBlobs.blobs = ""
	require.Contains(t, noBlobs.must(exitOK, nil, "purge", "--older-than", "1h", "--yes").stdout, "blobs left alone (no --blobs)")
	require.Contains(t, c.must(exitOK, nil, "purge", "--older-than", "1h", "--yes", "--keep-blobs").stdout, "blobs left alone (--keep-blobs)")
}

func blobURI(t *testing.T, c cli) string {
	t.Helper()
	views := listViews(t, c, "--all", "--class", "resource_exhausted")
	require.NotEmpty(t, views)
	return views[0].GeometryOffloadURI
}
