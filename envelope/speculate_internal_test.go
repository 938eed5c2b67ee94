package envelope

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/jsonscan"
	"github.com/geodlq/geodlq/offload"
)

func TestMemberTokens(t *testing.T) {
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/geometry", []string{"geometry"}},
		{"/feature/geometry", []string{"feature", "geometry"}},
		{"/a~1b/c~0d", []string{"a/b", "c~d"}},
		{"/features/0/geometry", nil},
		{"/features/-", nil},
		{"/a//b", nil},
		{"geometry", nil},
		{"", nil},
	} {
		require.Equal(t, tc.want, memberTokens(tc.path), tc.path)
	}
}

func TestLocateMember(t *testing.T) {
	geom := []string{"geometry"}
	for _, tc := range []struct {
		name, doc string
		path      []string
		want      int // -1: not located
	}{
		{"first", `{"geometry":{"type":"Point"}}`, geom, 12},
		{"after members", `{"id":1,"p":{"geometry":0},"geometry":[1]}`, geom, 38},
		{"whitespace", " \n{ \"id\" : \"x\" ,\t\"geometry\"\r\n:\n {}}", geom, 32},
		{"escaped name", `{"geo\u006detry":{}}`, geom, 17},
		{"nested", `{"id":1,"feature":{"type":"Feature","geometry":null}}`, []string{"feature", "geometry"}, 47},
		{"first of duplicates", `{"geometry":1,"geometry":2}`, geom, 12},
		{"missing", `{"id":1}`, geom, -1},
		{"not an object", `[{"geometry":1}]`, geom, -1},
		{"nested not an object", `{"feature":[1]}`, []string{"feature", "geometry"}, -1},
		{"truncated before", `{"id":"abc`, geom, -1},
		{"truncated after name", `{"geometry":`, geom, -1},
		{"no colon", `{"geometry" 1}`, geom, -1},
		{"no comma", `{"id":1 "geometry":2}`, geom, -1},
		{"empty", ``, geom, -1},
		{"bad escape", `{"geo\x":1,"geometry":2}`, geom, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, locateMember([]byte(tc.doc), tc.path))
		})
	}
}

// TestSpeculateEngages: the speculation runs exactly when it can pay,
// and is handed over only for the geometry it located.
func TestSpeculateEngages(t *testing.T) {
	off, err := offload.New(offload.NewMemStore(), nil)
	require.NoError(t, err)
	b, err := NewBuilder(&BuilderOptions{Offloader: off})
	require.NoError(t, err)
	big := []byte(`{"geometry":[` + strings.Repeat(`[1.5,2.5],`, parallelHashMin/10) + `[0,0]]}`)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))

	sp := b.speculate(big)
	require.NotNil(t, sp, "two cores, an offloader, a large payload")
	require.Nil(t, sp.take(13), "not where the walk found the geometry")
	sp = b.speculate(big)
	put := sp.take(12)
	require.NotNil(t, put)
	ref, err := put.Finish(context.Background(), len(big)-1)
	require.NoError(t, err)
	want, err := off.Put(context.Background(), big[12:len(big)-1], offload.ExtGeoJSON)
	require.NoError(t, err)
	require.Equal(t, want, ref)
	sp.cancel() // after Finish: no effect

	require.Nil(t, b.speculate(big[:100]), "small payload")
	noOff, err := NewBuilder(nil)
	require.NoError(t, err)
	require.Nil(t, noOff.speculate(big), "no offloader")
	indexed, err := NewBuilder(&BuilderOptions{Offloader: off, GeometryPath: "/features/0/geometry"})
	require.NoError(t, err)
	require.Nil(t, indexed.speculate(big), "a path with an index")
	runtime.GOMAXPROCS(1)
	require.Nil(t, b.speculate(big), "one core")
	var nilSpec *speculation
	require.Nil(t, nilSpec.take(12))
	nilSpec.cancel()
}

// FuzzLocateMember: the walk reads untrusted payloads. It never panics,
// and what it locates is never after the value the scan finds (the scan
// takes the last of duplicate names, the walk the first).
func FuzzLocateMember(f *testing.F) {
	for _, s := range []string{
		`{"geometry":{"type":"Point"}}`, `{"id":1,"geometry":[1],"geometry":2}`, `{"feature":{"geometry":null}}`,
		`{"geo\u006detry":1}`, `[{"geometry":1}]`, `{"geometry":`, "{\"a\":" + strings.Repeat("[", 20000),
		`{"a":"\"geometry\":1","geometry":2}`,
	} {
		f.Add([]byte(s))
	}
	paths := []jsonscan.Path{jsonscan.MustCompile("/geometry"), jsonscan.MustCompile("/feature/geometry")}
	tokens := [][]string{{"geometry"}, {"feature", "geometry"}}
	f.Fuzz(func(t *testing.T, data []byte) {
		for i, path := range paths {
			at := locateMember(data, tokens[i])
			if at < -1 || at > len(data) {
				t.Fatalf("locateMember = %d for %d bytes", at, len(data))
			}
			var sp [1]jsonscan.Span
			if err := jsonscan.FindAll(data, []jsonscan.Path{path}, sp[:]); err != nil || !sp[0].Found() || at < 0 {
				continue
			}
			if at > sp[0].Start {
				t.Fatalf("%s: walk found %d, after the scan's %d", path, at, sp[0].Start)
			}
		}
	})
}
