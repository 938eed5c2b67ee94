package stores

import (
	"context"
	"io"
	"net/url"

	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/blobstore"
)

// s3://BUCKET?region=…&prefix=…&endpoint=…&use_path_style=true opens a
// bucket through offload/blobstore (gocloud.dev's s3blob, AWS SDK v2, the
// usual AWS credential chain); see that package for the parameters.
func init() {
	registerBlobs("s3", openBucket)
}

func openBucket(ctx context.Context, _ *url.URL, raw string, _ bool) (offload.Store, io.Closer, error) {
	s, err := blobstore.Open(ctx, raw, nil)
	if err != nil {
		return nil, nil, err
	}
	return s, s, nil
}

// listedDir is a DirStore that lists its objects (offload.DirLister), so
// that Offloader.Sweep can collect garbage in it.
type listedDir struct {
	*offload.DirStore
	offload.Lister
}
