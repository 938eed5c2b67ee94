package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/offload"
)

// lineEvent is an event that fails with an unknown error (no geometry
// check runs) whose LineString geometry is at least size bytes.
func lineEvent(id string, size int) (payload string, geometry []byte) {
	var g strings.Builder
	g.WriteString(`{"type":"LineString","coordinates":[`)
	for i := 0; g.Len() < size; i++ {
		if i > 0 {
			g.WriteByte(',')
		}
		fmt.Fprintf(&g, "[%.12f,%.12f]", 10+float64(i%1000)*1e-3, 45+float64(i/1000)*1e-3)
	}
	g.WriteString(`]}`)
	return `{"event_id":"` + id + `","simulate":"unknown","source_uri":"s3://provider-a/line.geojson","crs":"EPSG:4326","geometry":` + g.String() + `}`,
		[]byte(g.String())
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDownloadIntegrity: a download whose offloaded geometry or payload
// was altered, cut short or extended in the blob store never completes:
// the client's read of the body fails short of its Content-Length, and
// the server logs it. That holds when only the very end can tell (a
// whole payload offloaded and altered hands on all its bytes before its
// hash fails): the last chunk is withheld until the payload verifies. A
// payload too small to have been partly sent is refused with a 422, as
// is one whose blob is gone; an intact one arrives whole, with the size
// and hash it declares.
func TestDownloadIntegrity(t *testing.T) {
	ctx := context.Background()
	bigPayload, bigGeom := lineEvent("evt-line-big", 1<<20) // offloaded at the default 256 KiB
	smallPayload, smallGeom := lineEvent("evt-line-small", 4<<10)
	wholePayload := `{"event_id":"evt-props","simulate":"unknown","crs":"EPSG:4326","properties":{"blob":"` + strings.Repeat("p", 1<<20) +
		`"},"geometry":` + bowtieAt(10, 10) + `}`
	var logs syncBuffer
	e := newEnv(t, sqliteKind(), envOptions{events: []string{bigPayload, smallPayload, wholePayload}, poll: time.Hour,
		blobThreshold: 2 << 10, maxMessageBytes: 256 << 10, logger: slog.New(slog.NewTextHandler(&logs, nil))})
	put := func(t *testing.T, orig []byte, ext string, b []byte) {
		sum := sha256.Sum256(orig)
		key := e.blobs.Key(hex.EncodeToString(sum[:]), ext)
		ok, err := e.blobs.Store().Exists(ctx, key)
		require.NoError(t, err)
		require.True(t, ok, "the blob was offloaded")
		if b == nil {
			require.NoError(t, e.blobs.Store().Delete(ctx, key))
		} else {
			require.NoError(t, e.blobs.Store().Put(ctx, key, bytes.NewReader(b), int64(len(b))))
		}
		t.Cleanup(func() { require.NoError(t, e.blobs.Store().Put(ctx, key, bytes.NewReader(orig), int64(len(orig)))) })
	}
	flip := func(s any) []byte {
		var b []byte
		switch v := s.(type) {
		case string:
			b = []byte(v)
		case []byte:
			b = bytes.Clone(v)
		}
		b[len(b)/2] ^= 1
		return b
	}
	const (
		line  = "evt-line-big"
		small = "evt-line-small"
		whole = "evt-props"
	)
	events := map[string]string{line: bigPayload, small: smallPayload, whole: wholePayload}
	blobs := map[string][]byte{line: bigGeom, small: smallGeom, whole: []byte(wholePayload)}
	exts := map[string]string{line: offload.ExtGeoJSON, small: offload.ExtGeoJSON, whole: offload.ExtJSON}
	for _, tc := range []struct {
		name   string
		id     string
		intact bool
		stored []byte // what the blob store holds instead (nil: deleted)
		status int
	}{
		{"intact, geometry offloaded", line, true, nil, http.StatusOK},
		{"intact, small", small, true, nil, http.StatusOK},
		{"intact, whole payload offloaded", whole, true, nil, http.StatusOK},
		{"geometry tampered", line, false, flip(bigGeom), http.StatusOK},
		{"geometry truncated", line, false, bigGeom[:len(bigGeom)-1], http.StatusOK},
		{"geometry extended", line, false, append(bytes.Clone(bigGeom), ' '), http.StatusOK},
		{"whole payload tampered", whole, false, flip(wholePayload), http.StatusOK},
		{"whole payload extended", whole, false, []byte(wholePayload + "\n"), http.StatusOK},
		{"small geometry tampered", small, false, flip(smallGeom), http.StatusUnprocessableEntity},
		{"geometry missing", line, false, nil, http.StatusUnprocessableEntity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.recordOf(tc.id)
			if !tc.intact {
				put(t, blobs[tc.id], exts[tc.id], tc.stored)
			}
			before := strings.Count(logs.String(), "payload download aborted")
			res, err := http.Get(e.http.URL + recPath(rec) + "/payload?download=1")
			require.NoError(t, err)
			defer res.Body.Close()
			body, rerr := io.ReadAll(res.Body)
			require.Equal(t, tc.status, res.StatusCode, "%s", body)
			switch {
			case tc.status != http.StatusOK:
				require.NoError(t, rerr)
				require.Equal(t, ContentTypeProblem, res.Header.Get("Content-Type"))
				var p Problem
				require.NoError(t, json.Unmarshal(body, &p))
				require.Contains(t, p.Detail, "restoring the payload failed")
			case !tc.intact:
				require.ErrorIs(t, rerr, io.ErrUnexpectedEOF, "the client sees a failed download")
				require.Equal(t, int64(len(events[tc.id])), res.ContentLength)
				require.Less(t, int64(len(body)), res.ContentLength, "the body stops short of its Content-Length")
				require.Eventually(t, func() bool { return strings.Count(logs.String(), "payload download aborted") > before },
					10*time.Second, 10*time.Millisecond, "the abort is logged")
				require.Contains(t, logs.String(), "level=ERROR")
			default:
				require.NoError(t, rerr)
				require.Equal(t, events[tc.id], string(body))
				require.Equal(t, strconv.Itoa(len(body)), res.Header.Get("Content-Length"))
				sum := sha256.Sum256(body)
				require.Equal(t, hex.EncodeToString(sum[:]), res.Header.Get("X-Payload-SHA256"))
				require.Equal(t, before, strings.Count(logs.String(), "payload download aborted"))
			}
		})
	}
}

// discardWriter is a ResponseWriter that keeps nothing of the body but
// its length and hash.
type discardWriter struct {
	h      http.Header
	status int
	n      int64
	sum    interface {
		io.Writer
		Sum([]byte) []byte
	}
}

func (d *discardWriter) Header() http.Header { return d.h }
func (d *discardWriter) WriteHeader(status int) {
	if d.status == 0 {
		d.status = status
	}
}

func (d *discardWriter) Write(p []byte) (int, error) {
	d.WriteHeader(http.StatusOK)
	d.n += int64(len(p))
	return d.sum.Write(p)
}

// TestDownloadMemory: downloading a payload of about 24 MB whose
// geometry is offloaded allocates a small fraction of it: the download
// streams from the blob store, verified as it goes, and never holds the
// payload whole. The inline view, which restores it in memory, is
// measured the same way to show the measure sees a whole payload.
func TestDownloadMemory(t *testing.T) {
	payload, _ := lineEvent("evt-line-huge", 24<<20)
	e := newEnv(t, sqliteKind(), envOptions{events: []string{payload}, poll: time.Hour})
	rec := e.recordOf("evt-line-huge")
	var ans recordAnswer
	e.get(recPath(rec), http.StatusOK, &ans)
	require.NotEmpty(t, ans.Geometry.OffloadURI, "the geometry is offloaded")

	serve := func(path string) (*discardWriter, uint64) { return serveMeasured(e.srv, path) }
	w, streamed := serve(recPath(rec) + "/payload?download=1")
	require.Equal(t, http.StatusOK, w.status)
	require.Equal(t, int64(len(payload)), w.n)
	require.Equal(t, ans.PayloadSHA256, hex.EncodeToString(w.sum.Sum(nil)))
	require.Equal(t, ans.PayloadSHA256, w.h.Get("X-Payload-SHA256"))

	v, restored := serve(recPath(rec) + "/payload")
	require.Equal(t, http.StatusOK, v.status)
	t.Logf("payload %d bytes: the download allocated %d bytes, the inline view %d", len(payload), streamed, restored)
	require.Less(t, streamed, uint64(4<<20), "bytes allocated by the download")
	require.Greater(t, restored, uint64(len(payload)), "the measure sees a payload restored whole")
}

// TestListPageMemory: a list page costs the same whatever the size of its
// records (issue 23): sorted by vertices, largest first, 8 records whose
// envelopes hold 2 MB geometries inline are listed without reading their
// bodies; nor a text search, which the index answers.
func TestListPageMemory(t *testing.T) {
	var events []string
	for i := range 8 {
		p, _ := lineEvent(fmt.Sprintf("evt-line-%d", i), 2<<20)
		events = append(events, p)
	}
	e := newEnv(t, sqliteKind(), envOptions{events: events, poll: time.Hour, blobThreshold: 64 << 20})
	for _, path := range []string{"/api/records?sort=-vertices&limit=8", "/api/records?sort=-size&limit=8", "/api/records?limit=8&q=evt-line"} {
		w, alloc := serveMeasured(e.srv, path)
		require.Equal(t, http.StatusOK, w.status, path)
		t.Logf("%s: %d bytes allocated for a page of 8 records of 2 MB", path, alloc)
		require.Less(t, alloc, uint64(2<<20), "%s: bytes allocated for the page", path)
	}
}

// serveMeasured serves a GET of path and returns the response and the
// bytes the request allocated (TotalAlloc, after a collection).
func serveMeasured(srv http.Handler, path string) (*discardWriter, uint64) {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Host = "127.0.0.1"
	w := &discardWriter{h: http.Header{}, sum: sha256.New()}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	srv.ServeHTTP(w, req)
	runtime.ReadMemStats(&after)
	return w, after.TotalAlloc - before.TotalAlloc
}
