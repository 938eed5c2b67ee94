package offload_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/geodlq/geodlq/offload"
)

func Example() {
	ctx := context.Background()
	o, err := offload.New(offload.NewMemStore(), &offload.Options{BaseURI: "s3://dlq-geom", Prefix: "2026/dlq"})
	if err != nil {
		panic(err)
	}
	geom := []byte(`{"type":"Point","coordinates":[12.5,41.9]}`)
	ref, err := o.Put(ctx, geom, offload.ExtGeoJSON)
	if err != nil {
		panic(err)
	}
	fmt.Println(ref.URI)
	fmt.Println(ref.Size)

	back, err := o.Fetch(ctx, ref)
	fmt.Println(string(back), err)

	// An offload_uri read from an envelope is untrusted.
	_, err = o.KeyFor("s3://dlq-geom/2026/dlq/../../secrets/" + ref.SHA256 + ".geojson")
	fmt.Println(errors.Is(err, offload.ErrForbiddenURI))
	// Output:
	// s3://dlq-geom/2026/dlq/ff084564b8b22c69f6de42534e89b19ec2230989ad235842ebafcd3e2f354832.geojson
	// 42
	// {"type":"Point","coordinates":[12.5,41.9]} <nil>
	// true
}

func ExampleOffloader_Fetch_integrity() {
	ctx := context.Background()
	store := offload.NewMemStore()
	o, _ := offload.New(store, nil)
	ref, _ := o.Put(ctx, []byte(`[[0,0],[1,1]]`), offload.ExtGeoJSON)
	ref.Size-- // as if the envelope or the blob had been cut short
	_, err := o.Fetch(ctx, ref)
	var ie *offload.IntegrityError
	fmt.Println(errors.As(err, &ie), ie.Problem)
	// Output: true extended
}

// Open streams a blob and verifies it on the way: the bytes are handed on
// as they arrive, and the reader ends with io.EOF only if they are exactly
// the blob the reference names. A blob altered in the store ends with an
// IntegrityError instead, after its bytes were read.
func ExampleOffloader_Open() {
	ctx := context.Background()
	store := offload.NewMemStore()
	o, _ := offload.New(store, nil)
	ref, _ := o.Put(ctx, []byte(`{"type":"Point","coordinates":[12.5,41.9]}`), offload.ExtGeoJSON)

	rc, err := o.Open(ctx, ref)
	if err != nil {
		panic(err)
	}
	var out strings.Builder
	n, err := io.Copy(&out, rc) // io.Copy reports io.EOF as success
	_ = rc.Close()
	fmt.Println(n, err, out.String())

	// The same key, other bytes of the same length.
	key, _ := o.KeyFor(ref.URI)
	forged := `{"type":"Point","coordinates":[12.5,41.8]}`
	_ = store.Put(ctx, key, strings.NewReader(forged), int64(len(forged)))
	rc, _ = o.Open(ctx, ref)
	n, err = io.Copy(io.Discard, rc)
	_ = rc.Close()
	var ie *offload.IntegrityError
	fmt.Println(n, errors.As(err, &ie), ie.Problem)
	// Output:
	// 42 <nil> {"type":"Point","coordinates":[12.5,41.9]}
	// 42 true hash_mismatch
}

// A SpanPut hashes a blob inside a larger buffer before its end is known
// (while another goroutine is still looking for it), then stores it as
// Put would.
func ExampleSpanPut() {
	ctx := context.Background()
	off, err := offload.New(offload.NewMemStore(), nil)
	if err != nil {
		panic(err)
	}
	payload := []byte(`{"geometry":{"type":"Point","coordinates":[12.5,41.9]},"id":7}`)
	p, err := off.NewSpanPut(payload, 12, offload.ExtGeoJSON) // the geometry starts at 12
	if err != nil {
		panic(err)
	}
	go p.Run()                                        // hash from 12 on…
	end := bytes.Index(payload, []byte(`},"id"`)) + 1 // …while the end is found
	ref, err := p.Finish(ctx, end)
	if err != nil {
		panic(err)
	}
	same, _ := off.Put(ctx, payload[12:end], offload.ExtGeoJSON)
	fmt.Println(ref == same, ref.Size)
	// Output: true 42
}
