package main

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"
)

// TestS3Blobs runs the binary with --blobs s3://… against Amazon S3's
// protocol served in process (gofakes3 on loopback): large geometries are
// offloaded to the bucket, restored byte for byte, verified, and collected
// by purge.
func TestS3Blobs(t *testing.T) {
	t.Parallel()
	backend := s3mem.New()
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	require.NoError(t, backend.CreateBucket("dlq-geom"))
	c := cli{t: t, store: "sqlite://" + filepath.Join(t.TempDir(), "dlq.db"),
		blobs: "s3://dlq-geom?region=us-east-1&use_path_style=true&endpoint=" + srv.URL,
		env: []string{"AWS_ACCESS_KEY_ID=AKIDGEODLQTEST", "AWS_SECRET_ACCESS_KEY=geodlq-test-secret",
			"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}}
	c.must(exitProblems, []byte(largeEvent("evt-big-1")+"\n"+largeEvent("evt-big-2")), "check", "--dead-letter", "parcels", "--max-vertices", "5000")

	views := listViews(t, c)
	require.Len(t, views, 2)
	require.Regexp(t, `^s3://dlq-geom/geodlq/[0-9a-f]{64}\.geojson$`, views[0].GeometryOffloadURI, "the endpoint does not leak into envelopes")
	require.Equal(t, largeEvent("evt-big-2"), c.must(exitOK, nil, "show", "--raw", "evt-big-2").stdout)

	var out verifyOutput
	require.NoError(t, json.Unmarshal([]byte(c.must(exitOK, nil, "verify", "-o", "json").stdout), &out))
	require.Equal(t, 1, out.OK)

	var pr purgeReport
	require.NoError(t, json.Unmarshal([]byte(c.must(exitOK, nil, "purge", "-o", "json", "--yes", "--older-than", "0s", "--blob-grace", "0s").stdout), &pr))
	require.Equal(t, 2, pr.Records)
	require.Len(t, pr.Sweep.Quarantined, 1)
	require.NoError(t, json.Unmarshal([]byte(c.must(exitOK, nil, "purge", "-o", "json", "--yes", "--older-than", "0s", "--blob-grace", "0s").stdout), &pr))
	require.Len(t, pr.Sweep.Deleted, 1, "deleted for good by the next sweep")
}
