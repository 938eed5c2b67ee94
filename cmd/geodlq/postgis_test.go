package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/testenv"
)

// TestPostGIS runs the operator's cycle against the PostGIS store: seed
// (migrating a fresh schema), list with filters, show byte for byte, stats,
// export, replay with a repair (twice: nothing comes back), verify, and a
// reference-safe purge.
func TestPostGIS(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres(t)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	schema := "geodlq_cli_" + hex.EncodeToString(rnd[:])
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	dir := t.TempDir()
	c := cli{t: t, store: dsn + sep + "geodlq_schema=" + schema, blobs: "file://" + filepath.Join(dir, "blobs")}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			_ = conn.Close(context.Background())
		}
	})
	c.must(exitProblems, seedLines(), "check", "--dead-letter", "parcels", "--max-vertices", "5000", "-")

	require.Equal(t, []string{"evt-9", "evt-gc", "evt-provider-a", "evt-provider-b"}, listIDs(t, c, "--reason", "self_intersection"))
	require.Equal(t, []string{"evt-3857", "evt-named-3857"}, listIDs(t, c, "--class", "crs_mismatch", "--epsg", "3857"))
	require.Equal(t, []string{"evt-provider-b"}, listIDs(t, c, "--bbox", "10.5,10.5,11.5,11.5"))
	require.Equal(t, []string{"evt-big-1", "evt-big-2", "evt-provider-b"}, listIDs(t, c, "--source-prefix", "s3://provider-b/"))

	bowtie, _ := corpus.Lookup("bowtie")
	require.Equal(t, strings.TrimRight(string(bowtie.Payload), "\n"), c.must(exitOK, nil, "show", "--raw", "evt-9").stdout)
	require.Equal(t, largeEvent("evt-big-1"), c.must(exitOK, nil, "show", "--raw", "evt-big-1").stdout)

	var st statsReport
	require.NoError(t, json.Unmarshal([]byte(c.must(exitOK, nil, "stats", "-o", "json").stdout), &st))
	require.Equal(t, 2, st.ByClass["resource_exhausted"])
	require.Equal(t, 3, st.BySourcePrefix["s3://provider-b"])

	var fc featureCollection
	require.NoError(t, json.Unmarshal([]byte(c.must(exitOK, nil, "export", "--reason", "self_intersection").stdout), &fc))
	require.Len(t, fc.geometries(), 4)

	rep := replayJSON(t, c, exitOK, "--repair", "make-valid", "--reason", "self_intersection", "--target", c.store)
	require.Equal(t, 4, rep.Counts["repaired"], "%+v", rep)
	again := replayJSON(t, c, exitOK, "--repair", "make-valid", "--reason", "self_intersection", "--target", c.store)
	require.Zero(t, again.Examined, "acknowledged records never come back")
	require.Equal(t, 4, len(listIDs(t, c, "--all", "--reason", "self_intersection")))
	require.Len(t, listIDs(t, c, "--dest", "parcels"), 4, "re-injected into the source topic")

	c.must(exitOK, nil, "verify")
	var pr purgeReport
	require.NoError(t, json.Unmarshal([]byte(c.must(exitOK, nil, "purge", "-o", "json", "--yes", "--older-than", "0s",
		"--dest", "parcels.poison.dlt", "--class", "resource_exhausted", "--blob-grace", "0s").stdout), &pr))
	require.Equal(t, 2, pr.Records)
	require.Len(t, pr.Unreferenced, 1)
	require.Len(t, pr.Sweep.Quarantined, 1)
	require.Len(t, listIDs(t, c, "--all", "--reason", "self_intersection", "--dest", "parcels.poison.dlt"), 4, "other records untouched")
	require.Empty(t, listIDs(t, c, "--all", "--class", "resource_exhausted"))
	c.must(exitOK, nil, "verify")
}
