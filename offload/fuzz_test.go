package offload_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/geodlq/geodlq/offload"
)

// FuzzKeyFor: an offload URI read from an envelope is untrusted. KeyFor
// accepts exactly the URIs the offloader writes, and what it accepts is
// a valid key under the prefix that maps back to the same URI.
func FuzzKeyFor(f *testing.F) {
	o, err := offload.New(offload.NewMemStore(), &offload.Options{BaseURI: "s3://dlq-geom", Prefix: "2026/dlq"})
	if err != nil {
		f.Fatal(err)
	}
	h := strings.Repeat("0123456789abcdef", 4)
	for _, s := range []string{
		o.URI(o.Key(h, offload.ExtGeoJSON)), o.URI(o.Key(h, offload.ExtJSON)),
		"s3://dlq-geom/2026/dlq/../" + h + ".geojson", "s3://dlq-geom/2026/dlq/%2e%2e/" + h + ".json",
		"s3://dlq-geom//2026/dlq/" + h + ".geojson", "file:///etc/passwd", "", "\x00", strings.Repeat("/", 300),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		key, err := o.KeyFor(uri)
		if err != nil {
			if !errors.Is(err, offload.ErrForbiddenURI) {
				t.Fatalf("KeyFor(%q): untyped error %v", uri, err)
			}
			return
		}
		if !offload.ValidKey(key) || !strings.HasPrefix(key, "2026/dlq/") || o.URI(key) != uri {
			t.Fatalf("KeyFor(%q) = %q", uri, key)
		}
		name := strings.TrimPrefix(key, "2026/dlq/")
		hexsum, ext, _ := strings.Cut(name, ".")
		if o.Key(hexsum, ext) != key {
			t.Fatalf("KeyFor(%q) = %q, not the offloader's form", uri, key)
		}
	})
}

// FuzzFetchRef: a reference read from an envelope is untrusted. Fetch
// answers any of them with a typed error or with bytes that have exactly
// the referenced size and hash; it never panics.
func FuzzFetchRef(f *testing.F) {
	ctx := context.Background()
	blob := []byte(`{"type":"Point","coordinates":[1,2]}`)
	sum := sha256.Sum256(blob)
	good := hex.EncodeToString(sum[:])
	f.Add("mem://geodlq/geodlq/"+good+".geojson", int64(len(blob)), good)
	f.Add("mem://geodlq/geodlq/"+good+".geojson", int64(1<<40), good)
	f.Add("mem://geodlq/geodlq/"+good+".geojson", int64(-1), good)
	f.Add("mem://geodlq/geodlq/"+good+".json", int64(len(blob)), good)
	f.Add("mem://geodlq/geodlq/"+strings.Repeat("0", 64)+".geojson", int64(0), strings.Repeat("0", 64))
	f.Fuzz(func(t *testing.T, uri string, size int64, sha string) {
		mem := offload.NewMemStore()
		o, err := offload.New(mem, &offload.Options{MaxSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Put(ctx, blob, offload.ExtGeoJSON); err != nil {
			t.Fatal(err)
		}
		b, err := o.Fetch(ctx, offload.Ref{URI: uri, Size: size, SHA256: sha})
		if err != nil {
			if !errors.Is(err, offload.ErrForbiddenURI) && !errors.Is(err, offload.ErrIntegrity) && !errors.Is(err, offload.ErrNotFound) {
				t.Fatalf("Fetch(%q, %d, %q): untyped error %v", uri, size, sha, err)
			}
			return
		}
		got := sha256.Sum256(b)
		if int64(len(b)) != size || hex.EncodeToString(got[:]) != sha {
			t.Fatalf("Fetch(%q, %d, %q) returned %d bytes hashing to %x", uri, size, sha, len(b), got)
		}
	})
}
