package blobstore_test

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/offload"
	_ "github.com/geodlq/geodlq/offload/blobstore"
)

// offload.OpenStore opens the schemes this package registers: an S3
// bucket that exists (read-only refuses writes), one that does not (no
// store here), mem://, and gs:// and azblob:// without their drivers
// (the error names the import).
func TestOpenStoreSchemes(t *testing.T) {
	f := newFakeS3(t)
	bucket := f.newBucket(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDGEODLQTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "geodlq-test-secret")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	s3url := func(b string) string {
		return "s3://" + b + "?region=us-east-1&use_path_style=true&endpoint=" + url.QueryEscape(f.srv.URL)
	}
	require.Subset(t, offload.StoreSchemes(), []string{"azblob", "file", "gs", "mem", "s3"})
	ctx := context.Background()

	for _, tc := range []struct {
		name    string
		url     string
		opts    *offload.OpenOptions
		wantErr error
		msg     string
	}{
		{name: "s3 bucket", url: s3url(bucket)},
		{name: "s3 bucket read-only", url: s3url(bucket), opts: &offload.OpenOptions{ReadOnly: true}},
		{name: "s3 missing bucket", url: s3url("no-such-bucket"), wantErr: offload.ErrNoStore, msg: "does not exist"},
		{name: "mem", url: "mem://"},
		{name: "gs without its driver", url: "gs://bucket", msg: `import _ "gocloud.dev/blob/gcsblob"`},
		{name: "azblob without its driver", url: "azblob://container", msg: `import _ "gocloud.dev/blob/azureblob"`},
		{name: "s3 with a path", url: "s3://bucket/dir", msg: "use ?prefix="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := offload.OpenStore(ctx, tc.url, tc.opts)
			if tc.wantErr == nil && tc.msg == "" {
				require.NoError(t, err)
				defer s.Close()
				o, err := offload.New(s, nil)
				require.NoError(t, err)
				_, err = o.Put(ctx, []byte(`{"type":"Point","coordinates":[1,2],"test":"`+tc.name+`"}`), offload.ExtGeoJSON)
				if tc.opts != nil && tc.opts.ReadOnly {
					require.ErrorIs(t, err, offload.ErrReadOnly)
					return
				}
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			}
			require.Contains(t, err.Error(), tc.msg)
			require.False(t, strings.Contains(err.Error(), "geodlq-test-secret"))
		})
	}
}
