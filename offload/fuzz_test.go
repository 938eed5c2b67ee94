package offload_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
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

// FuzzOpen: whatever a store holds under a blob's key and whatever size
// the reference claims, the reader of Open hands on a prefix of the
// stored bytes, never more than the claim, and ends with io.EOF exactly
// when the stored blob is the referenced one; otherwise with a typed
// error. It never panics.
func FuzzOpen(f *testing.F) {
	ctx := context.Background()
	blob := []byte(`{"type":"Point","coordinates":[1,2]}`)
	f.Add(blob, blob, int64(len(blob)), uint16(7))
	f.Add(blob, blob[:10], int64(len(blob)), uint16(1))
	f.Add(blob, append(bytes.Clone(blob), '\n'), int64(len(blob)), uint16(4096))
	f.Add(blob, []byte(`{"type":"Point","coordinates":[1,3]}`), int64(len(blob)), uint16(16))
	f.Add(blob, blob, int64(1<<40), uint16(64))
	f.Add([]byte{}, []byte{}, int64(0), uint16(0))
	f.Fuzz(func(t *testing.T, orig, stored []byte, size int64, chunk uint16) {
		mem := offload.NewMemStore()
		o, err := offload.New(mem, &offload.Options{MaxSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(orig)
		ref := offload.Ref{URI: o.URI(o.Key(hex.EncodeToString(sum[:]), offload.ExtGeoJSON)), Size: size, SHA256: hex.EncodeToString(sum[:])}
		key, err := o.KeyFor(ref.URI)
		if err != nil {
			t.Fatal(err)
		}
		if err := mem.Put(ctx, key, bytes.NewReader(stored), int64(len(stored))); err != nil {
			t.Fatal(err)
		}
		rc, err := o.Open(ctx, ref)
		if err != nil {
			if !errors.Is(err, offload.ErrIntegrity) {
				t.Fatalf("Open(size %d): untyped error %v", size, err)
			}
			return
		}
		defer rc.Close()
		buf := make([]byte, int(chunk)+1)
		var got []byte
		for {
			n, err := rc.Read(buf)
			got = append(got, buf[:n]...)
			if int64(len(got)) > size || !bytes.HasPrefix(stored, got) {
				t.Fatalf("handed on %d bytes that are not a prefix of the stored %d within the claimed %d", len(got), len(stored), size)
			}
			if err == nil {
				continue
			}
			ok := bytes.Equal(stored, orig) && size == int64(len(orig))
			if errors.Is(err, io.EOF) != ok || !ok && !errors.Is(err, offload.ErrIntegrity) {
				t.Fatalf("stored %d bytes (intact %v), claim %d: ended with %v", len(stored), bytes.Equal(stored, orig), size, err)
			}
			return
		}
	})
}
