package blobstore_test

import (
	"context"
	"fmt"

	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/blobstore"
)

// Example opens a bucket by URL and offloads a geometry into it. With
// "s3://dlq-geom?region=eu-west-1&prefix=prod/" the code is the same and
// the URIs read s3://dlq-geom/prod/geodlq/<sha256>.geojson.
func Example() {
	ctx := context.Background()
	store, err := blobstore.Open(ctx, "mem://dlq-geom?prefix=prod/", nil)
	if err != nil {
		panic(err)
	}
	defer store.Close()
	off, err := offload.New(store, nil) // BaseURI defaults to store.URI()
	if err != nil {
		panic(err)
	}
	ref, err := off.Put(ctx, []byte(`{"type":"Point","coordinates":[12.5,41.9]}`), offload.ExtGeoJSON)
	if err != nil {
		panic(err)
	}
	fmt.Println(store.URI())
	fmt.Println(ref.URI)
	geom, err := off.Fetch(ctx, ref)
	fmt.Println(string(geom), err)
	// Output:
	// mem://dlq-geom/prod
	// mem://dlq-geom/prod/geodlq/ff084564b8b22c69f6de42534e89b19ec2230989ad235842ebafcd3e2f354832.geojson
	// {"type":"Point","coordinates":[12.5,41.9]} <nil>
}

// ExampleURIFromURL shows which part of a bucket URL becomes the base URI
// recorded in envelopes.
func ExampleURIFromURL() {
	for _, u := range []string{
		"s3://dlq-geom?region=eu-west-1&endpoint=http://127.0.0.1:9000&use_path_style=true",
		"gs://dlq-geom?prefix=prod/2026/",
		"file:///var/lib/dlq?create_dir=1",
	} {
		uri, err := blobstore.URIFromURL(u)
		fmt.Println(uri, err)
	}
	// Output:
	// s3://dlq-geom <nil>
	// gs://dlq-geom/prod/2026 <nil>
	// file:///var/lib/dlq <nil>
}
