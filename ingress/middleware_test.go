package ingress_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/ingress"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// sink is the handler behind the gate: it records what it was given.
type sink struct {
	calls  int
	body   []byte
	length int64
	again  []byte
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.calls++
	s.body, _ = io.ReadAll(r.Body)
	s.length = r.ContentLength
	if r.GetBody != nil {
		rc, _ := r.GetBody()
		s.again, _ = io.ReadAll(rc)
	}
	w.WriteHeader(http.StatusAccepted)
}

func serve(h http.Handler, method, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, "/events", strings.NewReader(body)))
	return rec
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create %s", path)
	require.Equal(t, string(want), string(got))
}

// TestProblemGolden pins the RFC 9457 body of a 400 and a 413 byte for
// byte.
func TestProblemGolden(t *testing.T) {
	s := &sink{}
	h := ingress.Middleware(s, nil)
	bad := event(`"my-bucket/test.geojson"`, `"raster"`, `"EPSG:3857"`,
		`{"type":"Polygon","coordinates":[[[10,10],[20,10],[20,20],[10,20]]]}`)
	rec := serve(h, http.MethodPost, bad)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	golden(t, "problem_400.json", rec.Body.Bytes())

	h = ingress.Middleware(s, &ingress.Options{MaxVertices: 3})
	rec = serve(h, http.MethodPost, event(goodURI, goodMode, "", square))
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
	golden(t, "problem_413_vertices.json", rec.Body.Bytes())
	require.Zero(t, s.calls, "a refused event never reaches the queue")
}

// TestProblemShape checks the RFC 9457 members and the errors extension
// member by member.
func TestProblemShape(t *testing.T) {
	rec := serve(ingress.Middleware(&sink{}, nil), http.MethodPost, event("", goodMode, "", `{"type":"Point","coordinates":[0,NaN]}`))
	require.Equal(t, http.StatusBadRequest, rec.Code)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	require.ElementsMatch(t, []string{"type", "title", "status", "detail", "instance", "errors"}, keys)
	var p ingress.Problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	require.Equal(t, ingress.ProblemTypeInvalid, p.Type)
	require.Equal(t, 400, p.Status)
	require.Equal(t, "/events", p.Instance)
	require.Contains(t, p.Detail, "source_uri is required")
	require.Contains(t, p.Detail, "1 more violation.")
	require.Len(t, p.Errors, 2)
	require.Equal(t, "/source_uri", p.Errors[0].Pointer)
	require.Equal(t, "/geometry/coordinates", p.Errors[1].Pointer)
	require.Equal(t, classify.ClassInvalidGeometry, p.Errors[1].Class, "classes round-trip by name")
	require.Equal(t, &classify.Fault{Part: -1, Ring: -1, Vertex: 0}, p.Errors[1].Fault)
	require.Nil(t, p.Errors[1].Location, "NaN has no JSON form")
}

func TestMiddlewarePassesTheExactBytes(t *testing.T) {
	// Whitespace, member order, escapes, 1.0, a BOM-free UTF-8 name,
	// duplicate members of properties: none of it may change.
	body := "  {\"processing_mode\" : \"vector\",\n\t\"properties\":{\"name\":\"Z\\u00fcrich <&>\",\"name\":\"dup\",\"h\":1.0e0},\r\n" +
		"\"geometry\":{\"coordinates\":[[[0,0],[1,0],[1,1],[0,1],[0,0]]],\"type\":\"Polygon\"},\"source_uri\":\"s3://b/k?v=1&x=2\"}  \n"
	s := &sink{}
	rec := serve(ingress.Middleware(s, nil), http.MethodPost, body)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	require.Equal(t, 1, s.calls)
	require.Equal(t, body, string(s.body))
	require.Equal(t, body, string(s.again), "GetBody replays the same bytes")
	require.Equal(t, int64(len(body)), s.length)
}

func TestMiddlewareNeverCallsNextOnRefusal(t *testing.T) {
	s := &sink{}
	h := ingress.Middleware(s, &ingress.Options{MaxBytes: 300})
	for _, body := range []string{
		"", "null", "[]", "{", seedEvent[:40],
		event(goodURI, `"raster"`, "", square),
		event(goodURI, goodMode, "", `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1]]]}`),
		event(goodURI, goodMode, "", `{"type":"MultiPoint","coordinates":[`+strings.Repeat("[0,0],", 60)+`[0,0]]}`),
	} {
		rec := serve(h, http.MethodPost, body)
		require.Contains(t, []int{400, 413}, rec.Code, body)
		require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
		var p ingress.Problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
		require.Equal(t, rec.Code, p.Status)
		require.NotEmpty(t, p.Errors)
	}
	require.Zero(t, s.calls)
}

// countingBody fails the test if it is read: the gate must refuse an
// oversized declared Content-Length without reading.
type countingBody struct{ reads int }

func (c *countingBody) Read([]byte) (int, error) { c.reads++; return 0, io.EOF }
func (c *countingBody) Close() error             { return nil }

func TestMiddlewareTooLarge(t *testing.T) {
	s := &sink{}
	h := ingress.Middleware(s, &ingress.Options{MaxBytes: 100})

	// Declared too large: refused before reading.
	cb := &countingBody{}
	req := httptest.NewRequest(http.MethodPost, "/events", nil)
	req.Body, req.ContentLength = cb, 5000
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
	require.Zero(t, cb.reads)
	var p ingress.Problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	require.Equal(t, ingress.ProblemTypeTooLarge, p.Type)
	require.Equal(t, classify.KindByteBudget, p.Errors[0].Kind)

	// Unknown length (chunked) running past the budget: reading stops.
	req = httptest.NewRequest(http.MethodPost, "/events", io.MultiReader(strings.NewReader(strings.Repeat(" ", 1000)), &countingBody{}))
	req.ContentLength = -1
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
	require.Contains(t, rec.Body.String(), "more than 100 bytes")

	// Over a real HTTP connection too.
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/events", "application/json", bytes.NewReader(bytes.Repeat([]byte("x"), 1<<20)))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Zero(t, s.calls)
}

type errBody struct{}

func (errBody) Read([]byte) (int, error) { return 0, errors.New("connection reset by peer") }
func (errBody) Close() error             { return nil }

func TestMiddlewareUnreadableBody(t *testing.T) {
	s := &sink{}
	req := httptest.NewRequest(http.MethodPost, "/events", nil)
	req.Body, req.ContentLength = errBody{}, -1
	rec := httptest.NewRecorder()
	ingress.Middleware(s, nil).ServeHTTP(rec, req)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "connection reset by peer")
	require.Zero(t, s.calls)
}

func TestMiddlewareMethodsAndInstance(t *testing.T) {
	s := &sink{}
	h := ingress.Middleware(s, nil)
	rec := serve(h, http.MethodGet, "")
	require.Equal(t, http.StatusAccepted, rec.Code, "GET is not an event submission")
	require.Equal(t, 1, s.calls)

	h = ingress.Middleware(s, &ingress.Options{
		Methods:            []string{"get"},
		Instance:           func(r *http.Request) string { return "urn:request:" + r.Header.Get("X-Request-Id") },
		ProblemTypeInvalid: "https://example.com/problems/invalid-event",
	})
	rec = serve(h, http.MethodPost, "not even json")
	require.Equal(t, http.StatusAccepted, rec.Code, "POST is not in Methods")
	req := httptest.NewRequest(http.MethodGet, "/events", strings.NewReader("{}"))
	req.Header.Set("X-Request-Id", "42")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	var p ingress.Problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	require.Equal(t, "urn:request:42", p.Instance)
	require.Equal(t, "https://example.com/problems/invalid-event", p.Type)
}
