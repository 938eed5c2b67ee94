package main

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// copyTree copies the directory src to dst, files and all, as an operator
// moving a dead-letter store and its blob directory to another machine
// would (cp -a).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, r), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, r), b, 0o644)
	}))
}

// offloadedRecord returns the id of a record whose geometry is offloaded.
func offloadedRecord(t *testing.T, c cli) view {
	t.Helper()
	for _, v := range listViews(t, c) {
		if v.GeometryOffloadURI != "" {
			return v
		}
	}
	t.Fatal("no offloaded geometry in the store")
	return view{}
}

// TestMovedStoreAndBlobs copies a store and its blob directory elsewhere,
// removes the originals, and uses the copies: verify, show, show --raw,
// export and the console all read the blobs through the envelopes' old
// file:// URIs, verified by hash.
func TestMovedStoreAndBlobs(t *testing.T) {
	t.Parallel()
	old := seeded(t)
	oldDir := filepath.Dir(strings.TrimPrefix(old.store, "sqlite://"))
	newDir := filepath.Join(t.TempDir(), "moved here")
	copyTree(t, oldDir, newDir)
	require.NoError(t, os.RemoveAll(oldDir))
	c := cli{t: t, store: "sqlite://" + filepath.Join(newDir, "dlq.db"), blobs: "file://" + filepath.Join(newDir, "blobs")}

	r := c.must(exitOK, nil, "verify")
	require.Contains(t, r.stdout, "1 blobs referenced: 1 ok, 0 missing or altered")

	v := offloadedRecord(t, c)
	require.True(t, strings.HasPrefix(v.GeometryOffloadURI, "file://"+oldDir), "the envelope still names the old directory")
	ref := v.Destination + "/" + v.ID
	r = c.must(exitOK, nil, "show", "-o", "json", ref)
	var doc struct {
		PayloadVerified bool `json:"payload_verified"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.True(t, doc.PayloadVerified)
	r = c.must(exitOK, nil, "show", "--raw", ref)
	require.Equal(t, largeEvent(v.EventID), r.stdout, "restored byte for byte")

	out := filepath.Join(newDir, "out.geojson")
	r = c.must(exitOK, nil, "export", "-o", "json", out)
	require.NotContains(t, r.stdout, "fetch_failed")

	s := startServe(t, nil, c.base()...)
	res, err := http.Get(s.url + "api/records/" + v.Destination + "/" + v.ID + "/payload")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	res, err = http.Get(s.url + "api/records/" + v.Destination + "/" + v.ID + "/geometry")
	require.NoError(t, err)
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))

	// An altered copy is still caught.
	var blob string
	require.NoError(t, filepath.WalkDir(filepath.Join(newDir, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".geojson") {
			blob = p
		}
		return err
	}))
	require.NoError(t, os.WriteFile(blob, []byte(`{"type":"Point","coordinates":[0,0]}`), 0o644))
	r = c.must(exitProblems, nil, "verify")
	require.Contains(t, r.stdout, "0 ok, 1 missing or altered")
}

// TestBlobsWrittenUnderAnotherBase: envelopes written with --blobs-base
// s3://old-bucket (the blobs copied from a bucket into a directory, say)
// cannot be read from --blobs alone; verify, show and the console say to
// pass --blobs-base s3://old-bucket, and with it everything reads.
func TestBlobsWrittenUnderAnotherBase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := cli{t: t, store: "sqlite://" + filepath.Join(dir, "dlq.db"), blobs: "file://" + filepath.Join(dir, "blobs")}
	c.must(exitProblems, []byte(largeEvent("evt-big-1")+"\n"), "--blobs-base", "s3://old-bucket", "check", "--dead-letter", "parcels", "--max-vertices", "5000")
	v := offloadedRecord(t, c)
	require.True(t, strings.HasPrefix(v.GeometryOffloadURI, "s3://old-bucket/"), v.GeometryOffloadURI)
	ref := v.Destination + "/" + v.ID

	r := c.must(exitProblems, nil, "verify")
	require.Contains(t, r.stdout, "--blobs-base s3://old-bucket")
	r = c.must(exitProblems, nil, "verify", "-o", "json")
	require.Contains(t, r.stdout, "--blobs-base s3://old-bucket")
	r = c.must(exitProblems, nil, "show", "--raw", ref)
	require.Contains(t, r.stderr, "--blobs-base s3://old-bucket")

	s := startServe(t, nil, c.base()...)
	for _, what := range []string{"payload", "geometry"} {
		res, err := http.Get(s.url + "api/records/" + v.Destination + "/" + v.ID + "/" + what)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, string(body))
		require.Contains(t, string(body), "--blobs-base s3://old-bucket", what)
	}

	c.must(exitOK, nil, "--blobs-base", "s3://old-bucket", "verify")
	r = c.must(exitOK, nil, "--blobs-base", "s3://old-bucket", "show", "--raw", ref)
	require.Equal(t, largeEvent("evt-big-1"), r.stdout)
}
