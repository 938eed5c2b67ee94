package blobstore_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/blobstore"
	"github.com/geodlq/geodlq/offload/offloadtest"
)

// memHarness: mem:// buckets opened by URL.
type memHarness struct{ stores []*blobstore.Store }

func (h *memHarness) MakeStore(ctx context.Context) (offload.Store, error) {
	s, err := blobstore.Open(ctx, "mem://", nil)
	h.stores = append(h.stores, s)
	return s, err
}

func (h *memHarness) Tamper(ctx context.Context, s offload.Store, key string, mutate func([]byte) []byte) error {
	return offloadtest.TamperViaStore(ctx, s, key, mutate)
}

func (h *memHarness) Capabilities() offloadtest.Capabilities { return offloadtest.Capabilities{} }

func (h *memHarness) Close() {
	for _, s := range h.stores {
		_ = s.Close()
	}
}

func TestMemConformance(t *testing.T) {
	offloadtest.RunConformanceTests(t, func(context.Context, *testing.T) (offloadtest.Harness, error) {
		return &memHarness{}, nil
	})
}

// fileHarness: file:// buckets opened by URL; Tamper rewrites the file in
// place behind the store's back.
type fileHarness struct {
	dir    string
	stores []*blobstore.Store
}

func (h *fileHarness) MakeStore(ctx context.Context) (offload.Store, error) {
	s, err := blobstore.Open(ctx, "file://"+filepath.ToSlash(h.dir)+"?no_tmp_dir=1", nil)
	h.stores = append(h.stores, s)
	return s, err
}

func (h *fileHarness) Tamper(_ context.Context, _ offload.Store, key string, mutate func([]byte) []byte) error {
	p := filepath.Join(h.dir, filepath.FromSlash(key))
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return os.WriteFile(p, mutate(b), 0o640)
}

func (h *fileHarness) Capabilities() offloadtest.Capabilities { return offloadtest.Capabilities{} }

// Path makes the harness an offloadtest.FileHarness: the suite plants
// FIFOs and symbolic links in the bucket directory.
func (h *fileHarness) Path(_ offload.Store, key string) string {
	return filepath.Join(h.dir, filepath.FromSlash(key))
}

func (h *fileHarness) Close() {
	for _, s := range h.stores {
		_ = s.Close()
	}
}

func TestFileConformance(t *testing.T) {
	offloadtest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (offloadtest.Harness, error) {
		return &fileHarness{dir: t.TempDir()}, nil
	})
}

// s3Harness: a fresh bucket per test on gofakes3, through the AWS SDK v2
// client; Tamper rewrites the object with PutObject behind the store's
// back.
type s3Harness struct {
	t  *testing.T
	s3 *fakeS3
}

func (h *s3Harness) MakeStore(context.Context) (offload.Store, error) {
	s, _ := h.s3.store(h.t, nil)
	return s, nil
}

func (h *s3Harness) Tamper(ctx context.Context, st offload.Store, key string, mutate func([]byte) []byte) error {
	bucket := st.(*blobstore.Store).URI()[len("s3://"):]
	out, err := h.s3.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return err
	}
	old, err := io.ReadAll(out.Body)
	_ = out.Body.Close()
	if err != nil {
		return err
	}
	_, err = h.s3.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(mutate(old))})
	return err
}

func (h *s3Harness) Capabilities() offloadtest.Capabilities { return offloadtest.Capabilities{} }

// Stall makes the harness an offloadtest.Staller: the fake S3 server sends
// the headers and the first n bytes of the object, then nothing.
func (h *s3Harness) Stall(_ context.Context, st offload.Store, key string, n int) (func(), error) {
	bucket := st.(*blobstore.Store).URI()[len("s3://"):]
	return h.s3.stall(bucket, key, n), nil
}

func (h *s3Harness) Close() {}

var (
	_ offloadtest.FileHarness = (*fileHarness)(nil)
	_ offloadtest.Staller     = (*s3Harness)(nil)
)

func TestS3Conformance(t *testing.T) {
	offloadtest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (offloadtest.Harness, error) {
		return &s3Harness{t: t, s3: newFakeS3(t)}, nil
	})
}
