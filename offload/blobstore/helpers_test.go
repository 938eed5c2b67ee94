package blobstore_test

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
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

	mu     sync.Mutex
	stalls map[string]*stalled // by request path, "/bucket/key"
}

// stalled is a GetObject the server answers with its headers and the
// first n bytes of the body, then holds until the client goes away or
// release is closed.
type stalled struct {
	n       int
	release chan struct{}
}

// stall makes every later GetObject of bucket/key stall after n bytes;
// the returned func releases the held requests (and may be called more
// than once).
func (f *fakeS3) stall(bucket, key string, n int) func() {
	st := &stalled{n: n, release: make(chan struct{})}
	f.mu.Lock()
	f.stalls["/"+bucket+"/"+key] = st
	f.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(st.release) }) }
}

// serve answers a request, stalling the GetObjects registered with stall.
func (f *fakeS3) serve(inner http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		st := f.stalls[r.URL.Path]
		f.mu.Unlock()
		if st == nil || r.Method != http.MethodGet {
			inner.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		inner.ServeHTTP(rec, r)
		maps.Copy(w.Header(), rec.Header())
		w.WriteHeader(rec.Code)
		body := rec.Body.Bytes()
		_, _ = w.Write(body[:min(st.n, len(body))])
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
		case <-st.release:
		}
	})
}

func newFakeS3(t testing.TB) *fakeS3 {
	t.Helper()
	backend := s3mem.New()
	f := &fakeS3{backend: backend, stalls: make(map[string]*stalled)}
	srv := httptest.NewServer(f.serve(gofakes3.New(backend).Server()))
	t.Cleanup(srv.Close)
	client := s3.NewFromConfig(aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDGEODLQTEST", "geodlq-test-secret", ""),
		BaseEndpoint: aws.String(srv.URL),
	}, func(o *s3.Options) { o.UsePathStyle = true })
	f.srv, f.client = srv, client
	return f
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
