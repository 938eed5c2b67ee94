package jsonscan_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/jsonscan"
)

func TestSkip(t *testing.T) {
	cases := []struct {
		in   string
		want string // the value's bytes; "" means an error
	}{
		{`  {"a":[1,2,{"b":"]"}]} tail`, `{"a":[1,2,{"b":"]"}]}`},
		{`[]`, `[]`},
		{`{}`, `{}`},
		{`"a\"b\\"x`, `"a\"b\\"`},
		{`"\u00e9\ud83d\ude00"`, `"\u00e9\ud83d\ude00"`},
		{`-0.5e+10,`, `-0.5e+10`},
		{`0]`, `0`},
		{`NaN`, `NaN`},
		{`Infinity`, `Infinity`},
		{`-Infinity`, `-Infinity`},
		{`[NaN,-Infinity,Infinity]`, `[NaN,-Infinity,Infinity]`},
		{`true`, `true`},
		{`false `, `false`},
		{`null`, `null`},
		{"[\"\xff\xfe\"]", "[\"\xff\xfe\"]"},
		{`[[[[[[[[[[[[]]]]]]]]]]]]`, `[[[[[[[[[[[[]]]]]]]]]]]]`},
		{`["Yy_", {"y":"_"}]`, `["Yy_", {"y":"_"}]`},
		// errors
		{``, ``},
		{`   `, ``},
		{`[`, ``},
		{`[1,2`, ``},
		{`[}`, ``},
		{`{]`, ``},
		{`]`, ``},
		{`"abc`, ``},
		{`"a\`, ``},
		{`"\x"`, ``},
		{`"\u12"`, ``},
		{`"\u12g4"`, ``},
		{`tru`, ``},
		{`nul`, ``},
		{`-`, ``},
		{`01`, `0`},
		{`1.`, ``},
		{`1e`, ``},
		{`.5`, ``},
		{`+1`, ``},
		{`-Inf`, ``},
		{`Nan`, ``},
		{`[1,2]]`, `[1,2]`},
		{`{"a":"}"`, ``},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			start, end, err := jsonscan.Skip([]byte(tc.in), 0)
			if tc.want == "" {
				require.Error(t, err)
				require.ErrorIs(t, err, jsonscan.ErrSyntax)
				var se *jsonscan.SyntaxError
				require.True(t, errors.As(err, &se))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, tc.in[start:end])
		})
	}
}

func TestSkipDepth(t *testing.T) {
	deep := strings.Repeat("[", jsonscan.MaxDepth) + strings.Repeat("]", jsonscan.MaxDepth)
	_, end, err := jsonscan.Skip([]byte(deep), 0)
	require.NoError(t, err)
	require.Equal(t, len(deep), end)
	mixed := strings.Repeat(`{"a":[`, 3000) + strings.Repeat("]}", 3000)
	_, end, err = jsonscan.Skip([]byte(mixed), 0)
	require.NoError(t, err)
	require.Equal(t, len(mixed), end)
	tooDeep := "[" + deep + "]"
	_, _, err = jsonscan.Skip([]byte(tooDeep), 0)
	require.ErrorIs(t, err, jsonscan.ErrSyntax)
	// Mismatch below the 64-bit boundary of the bit stack.
	bad := strings.Repeat("[", 70) + "{" + strings.Repeat("]", 71)
	_, _, err = jsonscan.Skip([]byte(bad), 0)
	require.ErrorIs(t, err, jsonscan.ErrSyntax)
}

func TestSkipOffsets(t *testing.T) {
	_, _, err := jsonscan.Skip([]byte("1"), 5)
	require.ErrorIs(t, err, jsonscan.ErrSyntax)
	_, _, err = jsonscan.Skip([]byte("1"), -1)
	require.ErrorIs(t, err, jsonscan.ErrSyntax)
	s, e, err := jsonscan.Skip([]byte(`[1, "x"]`), 3)
	require.NoError(t, err)
	require.Equal(t, 4, s)
	require.Equal(t, 7, e)
}

func TestFind(t *testing.T) {
	doc := `{"type":"Feature","event_id":"e1","geometry":{"type":"Point","coordinates":[1,2]},` +
		`"feature":{"geometry":[1]},"dup":1,"dup":[2],"a/b":3,"m~n":4,"\u0067eo":5,` +
		`"features":[{"geometry":"f0"},{"geometry":"f1"}],"nan":NaN,"ninf":-Infinity,"s":"x\"y"}`
	cases := []struct {
		path string
		want string
		err  error
	}{
		{"", doc, nil},
		{"/geometry", `{"type":"Point","coordinates":[1,2]}`, nil},
		{"/geometry/type", `"Point"`, nil},
		{"/geometry/coordinates/1", `2`, nil},
		{"/feature/geometry", `[1]`, nil},
		{"/event_id", `"e1"`, nil},
		{"/dup", `[2]`, nil},
		{"/dup/0", `2`, nil},
		{"/a~1b", `3`, nil},
		{"/m~0n", `4`, nil},
		{"/geo", `5`, nil},
		{"/features/1/geometry", `"f1"`, nil},
		{"/features/0", `{"geometry":"f0"}`, nil},
		{"/nan", `NaN`, nil},
		{"/ninf", `-Infinity`, nil},
		{"/s", `"x\"y"`, nil},
		{"/missing", "", jsonscan.ErrNotFound},
		{"/event_id/x", "", jsonscan.ErrNotFound},
		{"/features/2", "", jsonscan.ErrNotFound},
		{"/features/01", "", jsonscan.ErrNotFound},
		{"/features/-1", "", jsonscan.ErrNotFound},
		{"/Geometry", "", jsonscan.ErrNotFound},
		{"geometry", "", jsonscan.ErrBadPath},
		{"/a~2", "", jsonscan.ErrBadPath},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			start, end, err := jsonscan.Find([]byte(doc), tc.path)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, doc[start:end])
		})
	}
}

func TestFindDuplicateLastWins(t *testing.T) {
	// The last "feature" has no geometry: not found, like a map decode.
	doc := []byte(`{"feature":{"geometry":1},"feature":{"other":2}}`)
	_, _, err := jsonscan.Find(doc, "/feature/geometry")
	require.ErrorIs(t, err, jsonscan.ErrNotFound)
	var m map[string]map[string]any
	require.NoError(t, json.Unmarshal(doc, &m))
	require.NotContains(t, m["feature"], "geometry")

	doc = []byte(`{"geometry":{"type":"A"},"x":0,"geometry":{"type":"B"}}`)
	s, e, err := jsonscan.Find(doc, "/geometry/type")
	require.NoError(t, err)
	require.Equal(t, `"B"`, string(doc[s:e]))
}

func TestFindSyntaxErrors(t *testing.T) {
	for _, in := range []string{
		``, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1 "b":2}`, `{a:1}`, `{"a":1}}`,
		`{"a":1} x`, `{"a":[1,2}`, `{"geometry":{"type":"Point"]}`, `{"a":01}`, `{"a":tru}`,
		`[1,]`, `{"a":"\q"}`,
	} {
		t.Run(in, func(t *testing.T) {
			_, _, err := jsonscan.Find([]byte(in), "/geometry")
			require.ErrorIs(t, err, jsonscan.ErrSyntax, "%q", in)
		})
	}
}

func TestFindAll(t *testing.T) {
	doc := []byte(` {"event_id":7,"crs":null,"geometry":{"type":"Point"},"feature":{"geometry":2},"crs":"EPSG:3857"} `)
	paths := []jsonscan.Path{
		jsonscan.MustCompile("/geometry"),
		jsonscan.MustCompile("/event_id"),
		jsonscan.MustCompile("/id"),
		jsonscan.MustCompile("/crs"),
		jsonscan.MustCompile("/feature/geometry"),
		jsonscan.MustCompile("/geometry/type"),
		jsonscan.MustCompile(""),
	}
	out := make([]jsonscan.Span, len(paths))
	require.NoError(t, jsonscan.FindAll(doc, paths, out))
	got := make([]string, len(out))
	for i, s := range out {
		if s.Found() {
			got[i] = string(doc[s.Start:s.End])
		} else {
			got[i] = "<none>"
		}
	}
	require.Equal(t, []string{`{"type":"Point"}`, `7`, `<none>`, `"EPSG:3857"`, `2`, `"Point"`, string(bytes.TrimSpace(doc))}, got)
	require.Equal(t, "/feature/geometry", paths[4].String())

	require.Error(t, jsonscan.FindAll(doc, paths, out[:2]))
	_, err := jsonscan.Compile("x")
	require.ErrorIs(t, err, jsonscan.ErrBadPath)
	require.Panics(t, func() { jsonscan.MustCompile("x") })
}

func TestFindAllocs(t *testing.T) {
	doc := []byte(`{"event_id":"e","crs":{"type":"name","properties":{"name":"EPSG:4326"}},"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]},"\u0069d":"x"}`)
	paths := []jsonscan.Path{jsonscan.MustCompile("/geometry"), jsonscan.MustCompile("/crs/properties/name"), jsonscan.MustCompile("/id")}
	out := make([]jsonscan.Span, len(paths))
	allocs := testing.AllocsPerRun(100, func() {
		if err := jsonscan.FindAll(doc, paths, out); err != nil {
			t.Fatal(err)
		}
		if _, _, err := jsonscan.Find(doc, "/geometry/coordinates/0/3"); err != nil {
			t.Fatal(err)
		}
		jsonscan.CountNumberArrays(doc)
	})
	require.Zero(t, allocs)
}

func TestUnquote(t *testing.T) {
	cases := []string{
		`""`, `"abc"`, `"\u00e9"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00"`, `"\ud83dx"`, `"\ud83d\u0041"`,
		`"a\"b\\c\/d\b\f\n\r\t"`, "\"\xff\"", "\"é\"", `"<>&"`, `"\u0000"`, `"\uD83D\uDE00"`,
	}
	for _, in := range cases {
		t.Run(in, func(t *testing.T) {
			var want string
			require.NoError(t, json.Unmarshal([]byte(in), &want))
			got, err := jsonscan.Unquote([]byte(in))
			require.NoError(t, err)
			require.Equal(t, want, got)
			app, err := jsonscan.AppendUnquote([]byte("x"), []byte(in))
			require.NoError(t, err)
			require.Equal(t, "x"+want, string(app))
		})
	}
	for _, in := range []string{``, `"`, `abc`, `"a\"`, `"a"b"`, "\"\x01\"", `"\u12"`, `"\q"`} {
		_, err := jsonscan.Unquote([]byte(in))
		require.ErrorIs(t, err, jsonscan.ErrSyntax, "%q", in)
		_, err = jsonscan.AppendUnquote(nil, []byte(in))
		require.Error(t, err)
	}
}

func TestCountNumberArrays(t *testing.T) {
	cases := []struct {
		in   string
		want int
	}{
		{`{"type":"Point","coordinates":[1,2]}`, 1},
		{`{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`, 5},
		{`{"type":"MultiPoint","coordinates":[ [ -1, 2 ] ,[NaN,Infinity],[-Infinity,0]]}`, 3},
		{`{"type":"X","note":"[1,2] [3,4]","coordinates":[]}`, 0},
		{`{"coordinates":[["a",1]]}`, 0},
		{`[1`, 1},
		{`"[1`, 0},
		{``, 0},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, jsonscan.CountNumberArrays([]byte(tc.in)), tc.in)
	}
}

// coordinates returns a deterministic GeoJSON MultiPolygon event of at
// least size bytes.
func coordinates(size int) []byte {
	var b bytes.Buffer
	b.Grow(size + 1024)
	b.WriteString(`{"event_id":"evt-big","crs":"EPSG:4326","geometry":{"type":"MultiPolygon","coordinates":[`)
	x := uint64(0x9E3779B97F4A7C15)
	first := true
	for b.Len() < size {
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString("[[")
		for k := 0; k < 256; k++ {
			if k > 0 {
				b.WriteByte(',')
			}
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			b.WriteByte('[')
			b.WriteString(strconv.FormatFloat(float64(x%360_000_000)/1e6-180, 'f', 6, 64))
			b.WriteByte(',')
			b.WriteString(strconv.FormatFloat(float64(x>>32%180_000_000)/1e6-90, 'f', 6, 64))
			b.WriteByte(']')
		}
		b.WriteString("]]")
	}
	b.WriteString(`]},"properties":{"name":"big"}}`)
	return b.Bytes()
}

func TestCoordinatesGenerator(t *testing.T) {
	doc := coordinates(1 << 20)
	require.True(t, json.Valid(doc))
	s, e, err := jsonscan.Find(doc, "/geometry")
	require.NoError(t, err)
	var g struct {
		Coordinates [][][][2]float64 `json:"coordinates"`
	}
	require.NoError(t, json.Unmarshal(doc[s:e], &g))
	n := 0
	for _, p := range g.Coordinates {
		for _, r := range p {
			n += len(r)
		}
	}
	require.Equal(t, n, jsonscan.CountNumberArrays(doc[s:e]))
}

const size40MB = 40 << 20

func BenchmarkSkip40MB(b *testing.B) {
	doc := coordinates(size40MB)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := jsonscan.Skip(doc, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFindGeometry40MB(b *testing.B) {
	doc := coordinates(size40MB)
	paths := []jsonscan.Path{jsonscan.MustCompile("/geometry"), jsonscan.MustCompile("/event_id"), jsonscan.MustCompile("/crs")}
	out := make([]jsonscan.Span, len(paths))
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if err := jsonscan.FindAll(doc, paths, out); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCountNumberArrays40MB(b *testing.B) {
	doc := coordinates(size40MB)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		jsonscan.CountNumberArrays(doc)
	}
}

func BenchmarkJSONValid40MB(b *testing.B) {
	doc := coordinates(size40MB)
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		json.Valid(doc)
	}
}

func TestFindAllCount(t *testing.T) {
	docs := []string{
		`{"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]},"x":[[1,2]]}`,
		`{"geometry":{"coordinates":[ [ -1, 2 ] ,[NaN,Infinity]],"note":"[1,2]"}}`,
		`{"geometry":[1,2],"geometry":{"type":"MultiPoint","coordinates":[[1,2],[3,4],[5,6]]}}`,
		`{"geometry":{"type":"MultiPoint","coordinates":[[1,2],[3,4]]},"geometry":null}`,
		`{"geometry":[[1,2],[3,4]]}`,
		`{"other":1}`,
	}
	for _, doc := range docs {
		for _, paths := range [][]jsonscan.Path{
			{jsonscan.MustCompile("/geometry")},
			{jsonscan.MustCompile("/geometry"), jsonscan.MustCompile("/geometry/type"), jsonscan.MustCompile("/id")},
			{jsonscan.MustCompile("/geometry/coordinates/0"), jsonscan.MustCompile("/geometry")},
		} {
			idx := len(paths) - 1
			if paths[0].String() == "/geometry" {
				idx = 0
			}
			out := make([]jsonscan.Span, len(paths))
			n, err := jsonscan.FindAllCount([]byte(doc), paths, out, idx)
			require.NoError(t, err)
			want := 0
			if out[idx].Found() {
				want = jsonscan.CountNumberArrays([]byte(doc)[out[idx].Start:out[idx].End])
			}
			require.Equal(t, want, n, "%s %v", doc, paths)
		}
	}
	big := coordinates(1 << 20)
	paths := []jsonscan.Path{jsonscan.MustCompile("/geometry"), jsonscan.MustCompile("/geometry/type")}
	out := make([]jsonscan.Span, 2)
	n, err := jsonscan.FindAllCount(big, paths, out, 0)
	require.NoError(t, err)
	require.Equal(t, jsonscan.CountNumberArrays(big[out[0].Start:out[0].End]), n)
	_, err = jsonscan.FindAllCount(big, paths, out, 2)
	require.Error(t, err)
	n, err = jsonscan.FindAllCount([]byte(`[[1,2]]`), []jsonscan.Path{jsonscan.MustCompile("")}, out[:1], 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func BenchmarkFindAllCount40MB(b *testing.B) {
	doc := coordinates(size40MB)
	paths := []jsonscan.Path{jsonscan.MustCompile("/geometry"), jsonscan.MustCompile("/geometry/type"), jsonscan.MustCompile("/event_id")}
	out := make([]jsonscan.Span, len(paths))
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := jsonscan.FindAllCount(doc, paths, out, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func TestNumberEnd(t *testing.T) {
	for _, tc := range []struct {
		in   string
		i    int
		end  int
		want bool
	}{
		{"0", 0, 1, true},
		{"-12.5e+3,", 0, 8, true},
		{"[1.25]", 1, 5, true},
		{"0123", 0, 1, true}, // the number is 0; what follows is the caller's
		{"1.", 0, 2, false},
		{"1e", 0, 2, false},
		{"-", 0, 1, false},
		{"-Infinity", 0, 0, false},
		{"Infinity", 0, 0, false},
		{"NaN", 0, 0, false},
		{"+1", 0, 0, false},
		{"", 0, 0, false},
		{"1", 5, 5, false},
		{"1", -1, -1, false},
	} {
		end, ok := jsonscan.NumberEnd([]byte(tc.in), tc.i)
		require.Equal(t, tc.want, ok, "%q at %d", tc.in, tc.i)
		if ok {
			require.Equal(t, tc.end, end, "%q at %d", tc.in, tc.i)
		}
	}
}
