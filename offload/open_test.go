package offload_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/offload"
)

func TestOpenStoreFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	existing := filepath.Join(dir, "blobs")
	require.NoError(t, os.Mkdir(existing, 0o750))
	plain := filepath.Join(dir, "plain")
	require.NoError(t, os.WriteFile(plain, []byte("x"), 0o600))
	missing := filepath.Join(dir, "missing")

	for _, tc := range []struct {
		name    string
		url     string
		opts    *offload.OpenOptions
		wantErr error  // nil and no msg: opens
		msg     string // part of the error message
	}{
		{name: "existing", url: "file://" + existing},
		{name: "existing read-only", url: "file://" + existing, opts: &offload.OpenOptions{ReadOnly: true}},
		{name: "missing", url: "file://" + missing, wantErr: offload.ErrNoStore, msg: "does not exist"},
		{name: "missing read-only create", url: "file://" + missing, opts: &offload.OpenOptions{ReadOnly: true, Create: true}, wantErr: offload.ErrNoStore},
		{name: "missing create_dir read-only", url: "file://" + missing + "?create_dir=1", opts: &offload.OpenOptions{ReadOnly: true}, wantErr: offload.ErrNoStore},
		{name: "a regular file", url: "file://" + plain, opts: &offload.OpenOptions{Create: true}, wantErr: offload.ErrNoStore, msg: "not a directory"},
		{name: "unknown scheme", url: "fiel://" + existing, wantErr: offload.ErrUnknownScheme, msg: `did you mean "file"`},
		{name: "not a URL", url: existing, wantErr: offload.ErrUnknownScheme, msg: "not a URL"},
		{name: "host", url: "file://example.com/blobs", msg: "takes no host"},
		{name: "empty path", url: "file://", msg: "empty directory"},
		{name: "unknown parameter", url: "file://" + existing + "?mode=x", msg: `unknown parameter "mode"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := offload.OpenStore(ctx, tc.url, tc.opts)
			if tc.wantErr == nil && tc.msg == "" {
				require.NoError(t, err)
				require.NoError(t, s.Close())
				return
			}
			require.Error(t, err)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			}
			require.Contains(t, err.Error(), tc.msg)
		})
	}
	_, err := os.Stat(missing)
	require.ErrorIs(t, err, os.ErrNotExist, "nothing was created without Create")
}

func TestOpenStoreCreateAndRelative(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ctx := context.Background()
	s, err := offload.OpenStore(ctx, "file://./a/blobs", &offload.OpenOptions{Create: true})
	require.NoError(t, err)
	defer s.Close()
	abs, err := filepath.EvalSymlinks(filepath.Join(dir, "a", "blobs"))
	require.NoError(t, err)
	fi, err := os.Stat(abs)
	require.NoError(t, err)
	require.True(t, fi.IsDir())

	o, err := offload.New(s, nil)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(o.BaseURI(), "file:///") && strings.HasSuffix(o.BaseURI(), "/a/blobs"),
		"the base URI is the absolute directory: %s", o.BaseURI())
	ref, err := o.Put(ctx, []byte(`{"type":"Point","coordinates":[1,2]}`), offload.ExtGeoJSON)
	require.NoError(t, err)

	l, ok := s.(offload.Lister)
	require.True(t, ok, "a file store lists its objects, so Sweep can collect them")
	var keys []string
	require.NoError(t, l.List(ctx, "", func(oi offload.ObjectInfo) error { keys = append(keys, oi.Key); return nil }))
	require.Equal(t, []string{"geodlq/" + ref.SHA256 + ".geojson"}, keys)
}

func TestOpenStoreReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	rw, err := offload.OpenStore(ctx, "file://"+dir, nil)
	require.NoError(t, err)
	defer rw.Close()
	require.NoError(t, rw.Put(ctx, "k/one", strings.NewReader("abc"), 3))

	ro, err := offload.OpenStore(ctx, "file://"+dir, &offload.OpenOptions{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"put", func() error { return ro.Put(ctx, "k/two", strings.NewReader("x"), 1) }},
		{"delete", func() error { return ro.Delete(ctx, "k/one") }},
	} {
		require.ErrorIs(t, tc.op(), offload.ErrReadOnly, tc.name)
	}
	require.ErrorIs(t, ro.Put(ctx, "../escape", strings.NewReader("x"), 1), offload.ErrInvalidKey, "keys are checked first")
	rc, err := ro.Get(ctx, "k/one")
	require.NoError(t, err)
	b, err := io.ReadAll(rc)
	require.NoError(t, rc.Close())
	require.NoError(t, err)
	require.Equal(t, "abc", string(b))
	ok, err := ro.Exists(ctx, "k/two")
	require.NoError(t, err)
	require.False(t, ok, "the refused put wrote nothing")
	o, err := offload.New(ro, nil)
	require.NoError(t, err, "the read-only store keeps its URI")
	require.True(t, strings.HasPrefix(o.BaseURI(), "file:///"))
	var n int
	require.NoError(t, ro.(offload.Lister).List(ctx, "", func(offload.ObjectInfo) error { n++; return nil }))
	require.Equal(t, 1, n)
}

// A registered opener gets the parsed URL and the options, bounded by the
// connect timeout.
func TestRegisterStore(t *testing.T) {
	t.Parallel()
	got := make(chan offload.OpenOptions, 1)
	offload.RegisterStore("geodlq-test-hang", func(ctx context.Context, u *url.URL, raw string, opts offload.OpenOptions) (offload.StoreCloser, error) {
		got <- opts
		<-ctx.Done()
		return nil, ctx.Err()
	})
	require.Contains(t, offload.StoreSchemes(), "geodlq-test-hang")
	require.Contains(t, offload.StoreSchemes(), "file")
	start := time.Now()
	_, err := offload.OpenStore(context.Background(), "geodlq-test-hang://x", &offload.OpenOptions{ConnectTimeout: 50 * time.Millisecond, Create: true})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "connect timeout")
	require.Less(t, time.Since(start), 5*time.Second)
	require.True(t, (<-got).Create)
	require.Panics(t, func() { offload.RegisterStore("file", nil) })
	require.Panics(t, func() {
		offload.RegisterStore("file", func(context.Context, *url.URL, string, offload.OpenOptions) (offload.StoreCloser, error) {
			return nil, errors.New("x")
		})
	})
	require.Panics(t, func() { offload.RegisterStore("Bad Scheme", nil) })
}

func ExampleOpenStore() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "geodlq-blobs-")
	defer os.RemoveAll(dir)

	// Read-only commands open read-only: nothing is created or written.
	_, err := offload.OpenStore(ctx, "file://"+filepath.Join(dir, "typo"), &offload.OpenOptions{ReadOnly: true})
	fmt.Println(errors.Is(err, offload.ErrNoStore))

	s, err := offload.OpenStore(ctx, "file://"+dir, nil)
	if err != nil {
		panic(err)
	}
	defer s.Close()
	o, _ := offload.New(s, nil)
	ref, _ := o.Put(ctx, []byte("{}"), offload.ExtJSON)
	back, _ := o.Fetch(ctx, ref)
	fmt.Println(string(back), bytes.Equal(back, []byte("{}")))

	_, err = offload.OpenStore(ctx, "s4://bucket", nil)
	fmt.Println(errors.Is(err, offload.ErrUnknownScheme))
	// Output:
	// true
	// {} true
	// true
}
