package blobstore_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/s3blob"

	"github.com/geodlq/geodlq/offload/blobstore"
)

// fakeS3 is Amazon S3's protocol served in process by gofakes3 (memory
// backend) on a loopback httptest server, spoken to by the real AWS SDK v2
// S3 client: path-style addressing, static credentials, us-east-1.
type fakeS3 struct {
	srv     *httptest.Server
	backend *s3mem.Backend
	client  *s3.Client
}

func newFakeS3(t testing.TB) *fakeS3 {
	t.Helper()
	backend := s3mem.New()
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	client := s3.NewFromConfig(aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDGEODLQTEST", "geodlq-test-secret", ""),
		BaseEndpoint: aws.String(srv.URL),
	}, func(o *s3.Options) { o.UsePathStyle = true })
	return &fakeS3{srv: srv, backend: backend, client: client}
}

var bucketSeq atomic.Int64

// newBucket creates a bucket with a name unique to the test.
func (f *fakeS3) newBucket(t testing.TB) string {
	t.Helper()
	var b strings.Builder
	for _, c := range strings.ToLower(t.Name()) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		} else if b.Len() > 0 && !strings.HasSuffix(b.String(), "-") {
			b.WriteByte('-')
		}
	}
	name := b.String()
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	name = strings.Trim(name, "-") + "-" + strconv.FormatInt(bucketSeq.Add(1), 10)
	_, err := f.client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)})
	require.NoError(t, err)
	return name
}

// store opens a fresh bucket through s3blob.OpenBucket and wraps it.
func (f *fakeS3) store(t testing.TB, opts *blobstore.Options) (*blobstore.Store, string) {
	t.Helper()
	name := f.newBucket(t)
	b, err := s3blob.OpenBucket(context.Background(), f.client, name, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	s, err := blobstore.New(b, "s3://"+name, opts)
	require.NoError(t, err)
	return s, name
}
