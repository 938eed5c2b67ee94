package blobstore

import (
	"context"
	"fmt"
	"net/url"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/geodlq/geodlq/offload"
)

// Importing this package registers s3://, gs://, azblob:// and mem:// with
// [offload.OpenStore], so that a program (the geodlq command among them)
// opens any of them by URL:
//
//	import _ "github.com/geodlq/geodlq/offload/blobstore"
//	store, err := offload.OpenStore(ctx, "s3://dlq-geom?region=eu-west-1", &offload.OpenOptions{ReadOnly: true})
//
// Each is opened with [Open] (gocloud.dev's blob.OpenBucket), and the
// bucket is then asked for one object listing within the connect
// timeout: a bucket the service says does not exist is
// [offload.ErrNoStore], an unreachable service an error, and a listing
// refused for lack of permission is let through (a writer may hold only
// put and get rights). gs:// and azblob:// need their gocloud drivers,
// which this package does not import (see Schemes in the package
// documentation): without them the opener says which import is missing.
// file:// stays [offload.DirStore]'s, registered by package offload.
func init() {
	for _, s := range []string{"s3", "gs", "azblob", "mem"} {
		offload.RegisterStore(s, openURL)
	}
}

// driverImport names the package whose import registers a scheme's
// gocloud driver.
var driverImport = map[string]string{
	"s3":     "gocloud.dev/blob/s3blob",
	"gs":     "gocloud.dev/blob/gcsblob",
	"azblob": "gocloud.dev/blob/azureblob",
	"mem":    "gocloud.dev/blob/memblob",
}

func openURL(ctx context.Context, u *url.URL, raw string, _ offload.OpenOptions) (offload.StoreCloser, error) {
	if !blob.DefaultURLMux().ValidBucketScheme(u.Scheme) {
		return nil, fmt.Errorf("blobstore: %s:// needs its gocloud driver: import _ %q in the program", u.Scheme, driverImport[u.Scheme])
	}
	s, err := Open(ctx, raw, nil)
	if err != nil {
		return nil, err
	}
	ok, err := s.Bucket().IsAccessible(ctx)
	switch {
	case err != nil && gcerrors.Code(err) == gcerrors.PermissionDenied:
	case err != nil:
		_ = s.Close()
		return nil, fmt.Errorf("blobstore: %s: %w", s.URI(), err)
	case !ok:
		_ = s.Close()
		return nil, fmt.Errorf("blobstore: bucket %s does not exist: %w", s.URI(), offload.ErrNoStore)
	}
	return s, nil
}
