package offload_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/offload"
)

// copyDir copies the tree at src to dst, as cp -a would.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	}))
}

// TestMovedBlobDirectory writes blobs into a directory, copies it
// elsewhere and removes the original: an offloader over the copy reads
// them through the URIs the envelopes hold (verified by hash), and still
// refuses what is not a blob of its prefix, what was altered, and
// another scheme's URI — naming the base it was written under.
func TestMovedBlobDirectory(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	oldDir, newDir := filepath.Join(root, "old", "blobs"), filepath.Join(root, "new place", "blobs")
	oldStore, err := offload.NewDirStore(oldDir)
	require.NoError(t, err)
	writer, err := offload.New(oldStore, nil)
	require.NoError(t, err)
	geom := []byte(`{"type":"Point","coordinates":[8.5,47.3]}`)
	ref, err := writer.Put(ctx, geom, offload.ExtGeoJSON)
	require.NoError(t, err)
	payload := []byte(`{"id":1}`)
	pref, err := writer.Put(ctx, payload, offload.ExtJSON)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(ref.URI, "file://"+oldDir+"/geodlq/"), ref.URI)

	copyDir(t, oldDir, newDir)
	require.NoError(t, os.RemoveAll(filepath.Join(root, "old")))
	newStore, err := offload.NewDirStore(newDir)
	require.NoError(t, err)
	reader, err := offload.New(newStore, nil)
	require.NoError(t, err)
	require.NotEqual(t, writer.BaseURI(), reader.BaseURI())

	for _, r := range []offload.Ref{ref, pref} {
		key, moved, err := reader.Resolve(r.URI)
		require.NoError(t, err)
		require.True(t, moved)
		require.Equal(t, writer.Key(r.SHA256, filepath.Ext(r.URI)[1:]), key)
		got, err := reader.Fetch(ctx, r)
		require.NoError(t, err, "the moved directory just works")
		require.NotEmpty(t, got)
	}
	key, moved, err := reader.Resolve(reader.URI(writer.Key(ref.SHA256, offload.ExtGeoJSON)))
	require.NoError(t, err)
	require.False(t, moved)
	require.Equal(t, writer.Key(ref.SHA256, offload.ExtGeoJSON), key)

	// Verified by hash, as always: an altered copy is an integrity error.
	require.NoError(t, os.WriteFile(filepath.Join(newDir, "geodlq", ref.SHA256+".geojson"), []byte(`{"type":"Point","coordinates":[0,0]}`), 0o644))
	_, err = reader.Fetch(ctx, ref)
	require.ErrorIs(t, err, offload.ErrIntegrity)

	// The URI names another hash than the envelope's: refused before the
	// store is asked.
	bad := pref
	bad.URI = strings.Replace(ref.URI, ref.SHA256, pref.SHA256, 1)
	_, err = reader.Fetch(ctx, offload.Ref{URI: bad.URI, Size: ref.Size, SHA256: ref.SHA256})
	require.ErrorIs(t, err, offload.ErrIntegrity)

	h := ref.SHA256
	for _, tc := range []struct{ name, uri, base string }{
		{"other prefix", "file:///elsewhere/blobs/other/" + h + ".geojson", ""},
		{"no prefix", "file:///elsewhere/" + h + ".geojson", ""},
		{"traversal in the old base", "file:///elsewhere/../../etc/geodlq/" + h + ".geojson", ""},
		{"escaped traversal", "file:///elsewhere/%2e%2e/geodlq/" + h + ".geojson", ""},
		{"query", "file:///elsewhere/geodlq/" + h + ".geojson?x=1", ""},
		{"backslash", `file:///elsewhere\geodlq/` + h + ".geojson", ""},
		{"sub directory", "file:///elsewhere/geodlq/sub/" + h + ".geojson", ""},
		{"upper-case hex", "file:///elsewhere/geodlq/" + strings.ToUpper(h) + ".geojson", ""},
		{"other extension", "file:///elsewhere/geodlq/" + h + ".exe", ""},
		{"only the name", "geodlq/" + h + ".geojson", ""},
		{"too long", "file:///" + strings.Repeat("a/", 1100) + "geodlq/" + h + ".geojson", ""},
		{"other scheme", "s3://old-bucket/geodlq/" + h + ".geojson", "s3://old-bucket"},
		{"other host", "https://blobs.example/dlq/geodlq/" + h + ".geojson", "https://blobs.example/dlq"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := reader.Resolve(tc.uri)
			require.ErrorIs(t, err, offload.ErrForbiddenURI)
			var ue *offload.URIError
			require.ErrorAs(t, err, &ue)
			require.Equal(t, tc.base, ue.Base)
			if tc.base != "" {
				require.Contains(t, err.Error(), tc.base)
			}
			_, err = reader.Fetch(ctx, offload.Ref{URI: tc.uri, Size: ref.Size, SHA256: h})
			require.ErrorIs(t, err, offload.ErrForbiddenURI)
		})
	}

	// Written under another base on purpose (--blobs-base): an offloader
	// with that base reads it.
	s3ish, err := offload.New(newStore, &offload.Options{BaseURI: "s3://old-bucket"})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(newDir, "geodlq", h+".geojson"), geom, 0o644))
	_, err = s3ish.Fetch(ctx, offload.Ref{URI: "s3://old-bucket/geodlq/" + h + ".geojson", Size: ref.Size, SHA256: h})
	require.NoError(t, err)
}
