package contracttest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/offload"
)

// TestMovedBlobDirectory writes envelopes whose geometry (and, once, the
// whole payload) is offloaded into a blob directory, copies the directory
// elsewhere and removes the original, and holds Go's Restore and the
// Python reader to the same answer over the copy: a file:// URI of the
// old directory is read from the new one, verified by hash; an altered
// blob, a URI of another scheme, a URI whose old base is malformed and a
// URI of another prefix are refused by both.
func TestMovedBlobDirectory(t *testing.T) {
	py := python(t)
	ctx := context.Background()
	parent := t.TempDir()
	oldDir, newDir := filepath.Join(parent, "old", "blobs"), filepath.Join(parent, "new home", "blobs")
	ds, err := offload.NewDirStore(oldDir)
	require.NoError(t, err)
	cause := classify.ResourceExhausted(errors.New("vertex budget exceeded"))
	type built struct {
		name    string
		data    []byte
		payload []byte
		want    error // nil: both restore
	}
	var cases []built
	build := func(name string, off *offload.Offloader, payload []byte, maxBytes int, edit func([]byte) []byte, want error) {
		_, data, err := newBuilder(t, &blobStore{off: off}).Build(ctx, envelope.Input{Payload: payload, Err: cause,
			IdempotencyKey: "idem:v1:" + name, MaxBytes: maxBytes})
		require.NoError(t, err)
		if edit != nil {
			data = edit(data)
		}
		cases = append(cases, built{name: name, data: data, payload: payload, want: want})
	}
	defaultOff, err := offload.New(ds, &offload.Options{Threshold: 1})
	require.NoError(t, err)
	otherScheme, err := offload.New(ds, &offload.Options{BaseURI: "s3://old-bucket", Threshold: 1})
	require.NoError(t, err)
	build("moved geometry", defaultOff, corpus.LargeEvent(4<<10), 0, nil, nil)
	build("moved payload", defaultOff, []byte(`{"properties":{"note":"`+strings.Repeat("x", 3000)+`"},"geometry":{"type":"Point","coordinates":[1,2]}}`), 1200, nil, nil)
	altered := corpus.LargeEvent(6 << 10)
	build("moved, altered", defaultOff, altered, 0, nil, offload.ErrIntegrity)
	build("another scheme", otherScheme, corpus.LargeEvent(7<<10), 0, nil, offload.ErrForbiddenURI)
	oldBase := defaultOff.BaseURI()
	build("old base with ..", defaultOff, corpus.LargeEvent(8<<10), 0, func(b []byte) []byte {
		return []byte(strings.ReplaceAll(string(b), oldBase+"/", oldBase+"/../x/"))
	}, offload.ErrForbiddenURI)
	build("another prefix", defaultOff, corpus.LargeEvent(9<<10), 0, func(b []byte) []byte {
		return []byte(strings.ReplaceAll(string(b), oldBase+"/geodlq/", oldBase+"/other/"))
	}, offload.ErrForbiddenURI)
	require.NoError(t, ds.Close())

	// Copy the directory, alter one blob in the copy, remove the original.
	require.NoError(t, filepath.WalkDir(oldDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(oldDir, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(newDir, r), 0o750)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(newDir, r), b, 0o600)
	}))
	require.NoError(t, os.RemoveAll(filepath.Join(parent, "old")))
	env, err := envelope.Decode(cases[1].data)
	require.NoError(t, err)
	require.NotEmpty(t, env.RawPayloadOffloadURI, "the whole payload offloaded")
	env, err = envelope.Decode(cases[2].data)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(newDir, "geodlq", env.Geometry.ContentSHA256+".geojson"), []byte(`{"type":"Point","coordinates":[0,0]}`), 0o600))

	gs, err := offload.NewDirStore(newDir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = gs.Close() })
	goff, err := offload.New(gs, nil) // file://<new home>: not the envelopes' base
	require.NoError(t, err)
	bs := &blobStore{dir: newDir, baseURI: goff.BaseURI(), prefix: goff.Prefix()}
	var docs []document
	for _, c := range cases {
		env, err := envelope.Decode(c.data)
		require.NoError(t, err, c.name)
		out, err := env.Restore(ctx, goff)
		if c.want == nil {
			require.NoError(t, err, c.name)
			require.Equal(t, c.payload, out, c.name)
		} else {
			require.ErrorIs(t, err, c.want, c.name)
		}
		docs = append(docs, document{name: c.name, data: c.data, store: bs})
	}
	results := runPython(t, py, docs)
	for _, c := range cases {
		r := results[c.name]
		require.Equal(t, "ok", r.Verdict, "%s: %s", c.name, r.Error)
		if c.want == nil {
			require.Empty(t, r.RestoreError, "%s: Go restores; Python: %s", c.name, r.RestoreError)
			got, err := os.ReadFile(r.Restored)
			require.NoError(t, err)
			require.Equal(t, c.payload, got, c.name)
			continue
		}
		require.True(t, strings.HasPrefix(r.RestoreError, "IntegrityError: "), fmt.Sprintf("%s: Go refuses (%v); Python: %q", c.name, c.want, r.RestoreError))
	}
}
