package jsonscan_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/corpus/nesting"
	"github.com/geodlq/geodlq/internal/jsonscan"
)

// members walks the top-level object of a valid document with
// encoding/json's Decoder and returns the span of each member's value
// (the last one for a duplicate key) and the span of the whole document.
func members(t *testing.T, data []byte) (map[string]jsonscan.Span, jsonscan.Span, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		t.Fatalf("decode valid document: %v", err)
	}
	end := int(dec.InputOffset())
	doc := jsonscan.Span{Start: end - len(raw), End: end}
	if raw[0] != '{' {
		return nil, doc, false
	}
	dec = json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	out := map[string]jsonscan.Span{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		key := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		e := int(dec.InputOffset())
		out[key] = jsonscan.Span{Start: e - len(v), End: e}
	}
	if _, err := dec.Token(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return out, doc, true
}

func escapeToken(key string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}

func FuzzFind(f *testing.F) {
	for _, s := range []string{
		`{"geometry":{"type":"Point","coordinates":[1,2]},"id":1}`,
		`{"a":1,"a":2}`,
		`{"\u0061":1,"a":[{"b":"]"}]}`,
		` [1,2,{"x":"y"}] `,
		`{"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`,
		`{"a":NaN,"b":-Infinity}`,
		`{"k":"\ud83d\ude00 \u00e9 <>&","l":-0,"m":1e400,"n":1.0}`,
		"{\"\xff\":1}",
		`{"a~b/c":{"d":[true,false,null]}}`,
		`"str"`, `12`, `{}`, `[]`, `{"a":{}}`, `[[[[]]]]`,
		`{"a":1}` + "\x00garbage", `{"a":1} ` + "\v", `{"a":1}{"a":2}`,
		strings.Repeat("[", jsonscan.MaxDepth) + strings.Repeat("]", jsonscan.MaxDepth),
		`{"a":` + strings.Repeat("[", jsonscan.MaxDepth) + strings.Repeat("]", jsonscan.MaxDepth) + `}`,
	} {
		f.Add([]byte(s))
	}
	// The hostile corpus, small instances: every family of event and of
	// envelope (nesting in every position, trailing bytes, forgeries).
	for _, seed := range append(corpus.HostileSeeds(corpus.InputEvent), corpus.HostileSeeds(corpus.InputEnvelope)...) {
		f.Add(seed)
	}
	for s := range nesting.Shapes() {
		f.Add(nesting.Build(s, jsonscan.MaxDepth-4, nil))
	}
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Never panic, whatever the input.
		_, _, skipErr := jsonscan.Skip(data, 0)
		_, _, findErr := jsonscan.Find(data, "/a/0/b")
		_ = jsonscan.CountNumberArrays(data)
		for i := 0; i < len(data) && i < 64; i++ {
			if data[i] == '"' {
				_, _ = jsonscan.Unquote(data[i:])
			}
		}
		if !json.Valid(data) {
			return
		}
		// Valid JSON: no error, and the spans agree with encoding/json.
		if skipErr != nil {
			t.Fatalf("Skip rejected valid JSON: %v", skipErr)
		}
		if findErr != nil && !errors.Is(findErr, jsonscan.ErrNotFound) {
			t.Fatalf("Find rejected valid JSON: %v", findErr)
		}
		want, doc, isObj := members(t, data)
		s, e, err := jsonscan.Find(data, "")
		if err != nil || s != doc.Start || e != doc.End {
			t.Fatalf("root span [%d,%d) err %v, want %v", s, e, err, doc)
		}
		if !isObj {
			return
		}
		paths := []jsonscan.Path{}
		keys := []string{}
		for k := range want {
			p, err := jsonscan.Compile("/" + escapeToken(k))
			if err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
			keys = append(keys, k)
			if len(paths) == jsonscan.MaxPaths {
				break
			}
		}
		out := make([]jsonscan.Span, len(paths))
		if err := jsonscan.FindAll(data, paths, out); err != nil {
			t.Fatalf("FindAll: %v", err)
		}
		for p := range paths {
			n, err := jsonscan.FindAllCount(data, paths, out, p)
			if err != nil {
				t.Fatalf("FindAllCount: %v", err)
			}
			if w := jsonscan.CountNumberArrays(data[out[p].Start:out[p].End]); n != w {
				t.Fatalf("FindAllCount for %s = %d, CountNumberArrays says %d", paths[p], n, w)
			}
		}
		for i, k := range keys {
			if out[i] != want[k] {
				t.Fatalf("member %q: span %v, encoding/json says %v", k, out[i], want[k])
			}
			if data[out[i].Start] == '"' {
				var ws string
				if err := json.Unmarshal(data[out[i].Start:out[i].End], &ws); err != nil {
					t.Fatal(err)
				}
				got, err := jsonscan.Unquote(data[out[i].Start:out[i].End])
				if err != nil || got != ws {
					t.Fatalf("Unquote %q = %q, %v; want %q", data[out[i].Start:out[i].End], got, err, ws)
				}
			}
		}
	})
}

func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`"a"`, `"\u00e9"`, `"\ud83d\ude00"`, `"\ud83d"`, "\"\xff\"", `"\n"`, `"\"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := jsonscan.Unquote(data)
		var want string
		werr := json.Unmarshal(data, &want)
		if len(data) == 0 || data[0] != '"' || !bytes.Equal(bytes.TrimSpace(data), data) {
			return // not exactly a string token: json may accept other values
		}
		if (err == nil) != (werr == nil) {
			t.Fatalf("Unquote(%q) err %v, encoding/json err %v", data, err, werr)
		}
		if err == nil && got != want {
			t.Fatalf("Unquote(%q) = %q, want %q", data, got, want)
		}
	})
}
