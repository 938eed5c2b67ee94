//go:build unix

package contracttest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/offload"
)

// symlinkBaseURI is the base URI of the stores of TestBlobSymlinks: fixed,
// so that the blob directory may be opened through another path.
const symlinkBaseURI = "file:///geodlq-contract-blobs"

// A blobLayout rearranges a blob directory after the Builder offloaded a
// geometry into it, and says what both readers must make of it.
type blobLayout struct {
	name   string
	prefix string // the offloader's prefix; "" for the default
	// arrange changes the directory root, whose blob is key (prefix/
	// <sha256>.geojson); outside is a directory next to it, outside the
	// store. It returns the path to open the store at (root, or another
	// path to it).
	arrange func(t *testing.T, root, outside, key string) string
	// want is the sentinel Go's Restore error wraps (nil: restores);
	// Python raises the exception class of the same name.
	want error
}

func mustRename(t *testing.T, from, to string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(to), 0o750))
	require.NoError(t, os.Rename(from, to))
}

func mustSymlink(t *testing.T, target, at string) {
	t.Helper()
	require.NoError(t, os.Symlink(target, at))
}

func rel(t *testing.T, fromDir, to string) string {
	t.Helper()
	r, err := filepath.Rel(fromDir, to)
	require.NoError(t, err)
	return r
}

// blobLayouts are the ways a blob's path can be bent. Go's rule
// (offload.DirStore through os.Root): directories on the way may be
// symbolic links that resolve inside the store by a relative path; an
// absolute target, a relative one leading out, or more than 8 links is
// outside the store; the blob itself must be a regular file.
func blobLayouts() []blobLayout {
	prefixDir := func(root, key string) string { return filepath.Join(root, filepath.Dir(key)) }
	return []blobLayout{
		{name: "plain", arrange: func(t *testing.T, root, outside, key string) string { return root }},
		{name: "blob missing", want: offload.ErrNotFound, arrange: func(t *testing.T, root, outside, key string) string {
			require.NoError(t, os.Remove(filepath.Join(root, key)))
			return root
		}},
		{name: "prefix links out by an absolute path", want: offload.ErrOutsideStore, arrange: func(t *testing.T, root, outside, key string) string {
			p := prefixDir(root, key)
			mustRename(t, p, filepath.Join(outside, "geodlq"))
			mustSymlink(t, filepath.Join(outside, "geodlq"), p)
			return root
		}},
		{name: "prefix links out by a relative path", want: offload.ErrOutsideStore, arrange: func(t *testing.T, root, outside, key string) string {
			p := prefixDir(root, key)
			mustRename(t, p, filepath.Join(outside, "geodlq"))
			mustSymlink(t, rel(t, root, filepath.Join(outside, "geodlq")), p)
			return root
		}},
		{name: "prefix links inside by a relative path", arrange: func(t *testing.T, root, outside, key string) string {
			p := prefixDir(root, key)
			mustRename(t, p, filepath.Join(root, "real"))
			mustSymlink(t, "real", p)
			return root
		}},
		{name: "prefix links inside with a trailing slash", arrange: func(t *testing.T, root, outside, key string) string {
			p := prefixDir(root, key)
			mustRename(t, p, filepath.Join(root, "real"))
			mustSymlink(t, "./real/", p)
			return root
		}},
		{name: "prefix links inside through ..", arrange: func(t *testing.T, root, outside, key string) string {
			p := prefixDir(root, key)
			mustRename(t, p, filepath.Join(root, "real"))
			require.NoError(t, os.Mkdir(filepath.Join(root, "a"), 0o750))
			mustSymlink(t, "a/../real", p)
			return root
		}},
		{name: "prefix links inside by an absolute path", want: offload.ErrOutsideStore, arrange: func(t *testing.T, root, outside, key string) string {
			p := prefixDir(root, key)
			mustRename(t, p, filepath.Join(root, "real"))
			mustSymlink(t, filepath.Join(root, "real"), p)
			return root
		}},
		{name: "prefix links to a link that leads out", want: offload.ErrOutsideStore, arrange: func(t *testing.T, root, outside, key string) string {
			p := prefixDir(root, key)
			mustRename(t, p, filepath.Join(outside, "geodlq"))
			mustSymlink(t, rel(t, root, filepath.Join(outside, "geodlq")), filepath.Join(root, "hop"))
			mustSymlink(t, "hop", p)
			return root
		}},
		{name: "prefix link dangles", want: offload.ErrNotFound, arrange: func(t *testing.T, root, outside, key string) string {
			p := prefixDir(root, key)
			mustRename(t, p, filepath.Join(outside, "geodlq"))
			mustSymlink(t, "missing", p)
			return root
		}},
		{name: "prefix links to itself", want: offload.ErrOutsideStore, arrange: func(t *testing.T, root, outside, key string) string {
			p := prefixDir(root, key)
			mustRename(t, p, filepath.Join(outside, "geodlq"))
			mustSymlink(t, "geodlq", p)
			return root
		}},
		{name: "blob is a link inside", want: offload.ErrNotRegular, arrange: func(t *testing.T, root, outside, key string) string {
			b := filepath.Join(root, key)
			mustRename(t, b, filepath.Join(root, "copy"))
			mustSymlink(t, "../copy", b)
			return root
		}},
		{name: "blob links out", want: offload.ErrNotRegular, arrange: func(t *testing.T, root, outside, key string) string {
			b := filepath.Join(root, key)
			mustRename(t, b, filepath.Join(outside, "blob"))
			mustSymlink(t, filepath.Join(outside, "blob"), b)
			return root
		}},
		{name: "blob is a FIFO", want: offload.ErrNotRegular, arrange: func(t *testing.T, root, outside, key string) string {
			b := filepath.Join(root, key)
			require.NoError(t, os.Remove(b))
			require.NoError(t, syscall.Mkfifo(b, 0o600))
			return root
		}},
		{name: "blob is a directory", want: offload.ErrNotRegular, arrange: func(t *testing.T, root, outside, key string) string {
			b := filepath.Join(root, key)
			require.NoError(t, os.Remove(b))
			require.NoError(t, os.Mkdir(b, 0o750))
			return root
		}},
		{name: "store opened through a link", arrange: func(t *testing.T, root, outside, key string) string {
			l := filepath.Join(outside, "store")
			mustSymlink(t, root, l)
			return l
		}},
		{name: "upper prefix directory links out", prefix: "tenant/geodlq", want: offload.ErrOutsideStore, arrange: func(t *testing.T, root, outside, key string) string {
			mustRename(t, filepath.Join(root, "tenant"), filepath.Join(outside, "tenant"))
			mustSymlink(t, filepath.Join(outside, "tenant"), filepath.Join(root, "tenant"))
			return root
		}},
		{name: "upper prefix directory links inside", prefix: "tenant/geodlq", arrange: func(t *testing.T, root, outside, key string) string {
			mustRename(t, filepath.Join(root, "tenant"), filepath.Join(root, "t2"))
			mustSymlink(t, "t2", filepath.Join(root, "tenant"))
			return root
		}},
		{name: "lower prefix directory links out", prefix: "tenant/geodlq", want: offload.ErrOutsideStore, arrange: func(t *testing.T, root, outside, key string) string {
			p := prefixDir(root, key)
			mustRename(t, p, filepath.Join(outside, "geodlq"))
			mustSymlink(t, rel(t, filepath.Dir(p), filepath.Join(outside, "geodlq")), p)
			return root
		}},
	}
}

// pythonClass is the name of the Python reader's exception for Go's
// sentinel.
func pythonClass(want error) string {
	switch want {
	case nil:
		return ""
	case offload.ErrOutsideStore:
		return "OutsideStore"
	case offload.ErrNotRegular:
		return "NotRegular"
	}
	return "BlobNotFound"
}

// TestBlobSymlinks builds an envelope whose geometry is offloaded to a
// directory store, bends the blob's path in every way blobLayouts lists,
// and checks that Go's Restore and the Python reader both restore, or
// both refuse for the same reason.
func TestBlobSymlinks(t *testing.T) {
	py := python(t)
	payload := corpus.LargeEvent(4 << 10)
	var docs []document
	want := map[string]error{}
	for _, l := range blobLayouts() {
		parent := t.TempDir()
		root, outside := filepath.Join(parent, "store"), filepath.Join(parent, "outside")
		require.NoError(t, os.Mkdir(outside, 0o750))
		ds, err := offload.NewDirStore(root)
		require.NoError(t, err)
		off, err := offload.New(ds, &offload.Options{BaseURI: symlinkBaseURI, Prefix: l.prefix, Threshold: 1})
		require.NoError(t, err)
		_, data, err := newBuilder(t, &blobStore{off: off}).Build(context.Background(), envelope.Input{Payload: payload,
			IdempotencyKey: "idem:v1:symlinks", Err: classify.ResourceExhausted(errors.New("vertex budget exceeded"))})
		require.NoError(t, err)
		require.NoError(t, ds.Close())
		env, err := envelope.Decode(data)
		require.NoError(t, err)
		key, err := off.KeyFor(env.Geometry.OffloadURI)
		require.NoError(t, err)

		dir := l.arrange(t, root, outside, filepath.FromSlash(key))

		// Go, on a store opened anew at dir.
		gs, err := offload.NewDirStore(dir)
		require.NoError(t, err)
		t.Cleanup(func() { _ = gs.Close() })
		goff, err := offload.New(gs, &offload.Options{BaseURI: symlinkBaseURI, Prefix: off.Prefix()})
		require.NoError(t, err)
		out, err := env.Restore(context.Background(), goff)
		if l.want == nil {
			require.NoError(t, err, l.name)
			require.Equal(t, payload, out, l.name)
		} else {
			require.ErrorIs(t, err, l.want, l.name)
			if l.want == offload.ErrNotFound {
				require.NotErrorIs(t, err, offload.ErrOutsideStore, l.name)
				require.NotErrorIs(t, err, offload.ErrNotRegular, l.name)
			}
		}
		want[l.name] = l.want
		docs = append(docs, document{name: l.name, data: data, built: true, payload: payload,
			store: &blobStore{dir: dir, baseURI: symlinkBaseURI, prefix: off.Prefix()}})
	}

	results := runPython(t, py, docs)
	var disagree []string
	for _, d := range docs {
		r := results[d.name]
		require.Equal(t, "ok", r.Verdict, "%s: %s", d.name, r.Error)
		class := pythonClass(want[d.name])
		switch {
		case class == "" && r.RestoreError != "":
			disagree = append(disagree, fmt.Sprintf("%s: Go restores; Python: %s", d.name, r.RestoreError))
		case class == "":
			got, err := os.ReadFile(r.Restored)
			require.NoError(t, err)
			require.Equal(t, payload, got, d.name)
		case !strings.HasPrefix(r.RestoreError, class+": "):
			disagree = append(disagree, fmt.Sprintf("%s: Go refuses (%v); Python: %q", d.name, want[d.name], cmp.Or(r.RestoreError, "restores")))
		}
	}
	require.Empty(t, disagree, "the readers disagree on %d of %d layouts", len(disagree), len(docs))
}
