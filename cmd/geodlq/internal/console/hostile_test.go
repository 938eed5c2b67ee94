package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/native"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
)

// TestHostileRecords fills a store with the hostile corpus — every event
// family through the Processor, and every forged envelope written as a
// record — and asks the console for everything about every record: no
// answer is a server error, every failure is a problem details document,
// and the map, overview and list still work.
func TestHostileRecords(t *testing.T) {
	e := newEnv(t, sqliteKind(), envOptions{readOnly: true, events: []string{}})
	ctx := context.Background()
	ws, err := broker.OpenStore(ctx, e.url, nil)
	require.NoError(t, err)
	defer ws.Close()
	checker, err := native.NewChecker(nil)
	require.NoError(t, err)
	defer checker.Close()
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: e.blobs, ResolveEPSG: checker.ResolveEPSG})
	require.NoError(t, err)
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: ws, Builder: b, Policy: classify.Policy{MaxAttempts: 1}})
	require.NoError(t, err)
	n := 0
	for _, f := range corpus.Hostile() {
		if f.Large {
			continue // tens of megabytes each: the corpus's own tests carry them
		}
		data := f.Generate(64 << 10).Data
		switch f.Input {
		case corpus.InputEvent:
			msg := &broker.Message{Body: data, Source: &envelope.Source{System: "kafka", Topic: topic}}
			res, err := proc.Process(ctx, msg, func(ctx context.Context, m *broker.Message) error {
				_, err := checker.CheckEventContext(ctx, m.Body)
				return err
			})
			require.NoError(t, err, f.Name)
			if res.DeadLettered {
				n++
			}
		case corpus.InputEnvelope:
			require.NoError(t, ws.Publish(ctx, dlt, &broker.Message{Body: data}), f.Name)
			n++
		}
	}
	require.Greater(t, n, 50)
	require.Eventually(t, func() bool {
		var ov overviewAnswer
		e.get("/api/overview", http.StatusOK, &ov)
		return ov.Open == n
	}, 30*time.Second, 50*time.Millisecond)

	var rows []row
	cur := ""
	for {
		var ans listAnswer
		e.get("/api/records?limit=37&cursor="+url.QueryEscape(cur), http.StatusOK, &ans)
		rows = append(rows, ans.Records...)
		if ans.Next == "" {
			break
		}
		cur = ans.Next
	}
	require.Len(t, rows, n)
	for _, r := range rows {
		p := recPath(RecordRef{r.Destination, r.ID})
		for _, sub := range []string{"", "/geometry", "/payload", "/payload?download=1", "/repair?method=make-valid", "/repair?method=reproject"} {
			res, body := e.do("GET", p+sub, nil, nil)
			require.Less(t, res.StatusCode, 500, "%s%s (event %q): %s", p, sub, r.EventID, body)
			if res.StatusCode >= 400 {
				require.Equal(t, ContentTypeProblem, res.Header.Get("Content-Type"), p+sub)
			} else if sub != "/payload?download=1" {
				require.True(t, json.Valid(body), p+sub)
			}
		}
	}
	var m mapAnswer
	e.get("/api/map?zoom=18", http.StatusOK, &m)
	require.Equal(t, n, m.Located+m.Unlocated)
	var ov overviewAnswer
	e.get("/api/overview", http.StatusOK, &ov)
	require.Equal(t, n, ov.Open)
	e.get("/api/overview?replayed=true", http.StatusOK, &ov)
	require.Equal(t, n, ov.Open)
	e.get("/api/records?q=a&limit=500", http.StatusOK, nil)
}

// FuzzQuery feeds the query string and cursor parsers arbitrary input:
// they answer or refuse, never panic.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{"class=invalid_geometry&bbox=0,0,1,1", "since=7d&until=1h", "epsg=3857,4326&q=x",
		"cursor=eyJhIjoiMTAiLCJuIjoxMDB9", "bbox=NaN,1,2,3", "cursor=eyJ0IjoxLCJkIjoiZCIsImsiOiIxIiwiaSI6dHJ1ZX0",
		"since=99999999999d", "destination=%00", "reason=self_intersection,,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := url.ParseQuery(s)
		if err != nil {
			return
		}
		if q, err := queryFromURL(v); err == nil {
			if sel, err := q.parse(time.Now(), ""); err == nil {
				_ = sel.match("1", nil)
			}
		}
		_, _ = decodeCursor(v.Get("cursor"))
	})
}

// FuzzDisplay draws arbitrary geometry bytes with an arbitrary fault: an
// answer or an error, never a panic.
func FuzzDisplay(f *testing.F) {
	f.Add([]byte(bowtieAt(0, 0)), 0.5, 0.5, -1, 0, 0, true, "self_intersection", 4326)
	f.Add([]byte(`{"type":"Polygon","coordinates":[[[0,0],[1,0],[NaN,1],[0,1],[0,0]]]}`), 0.0, 0.0, -1, 0, 2, false, "invalid_coordinate", 4326)
	f.Add([]byte(`{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}`), 0.0, 0.0, -1, 0, 0, false, "ring_not_closed", 3857)
	f.Add([]byte(`{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1e300,1]}]}`), 1e300, 1.0, 0, -1, 0, false, "out_of_range", 0)
	c, err := native.NewChecker(nil)
	if err != nil {
		f.Fatal(err)
	}
	defer c.Close()
	s := &Server{checker: c, opts: Options{ExpectedEPSG: 4326}}
	f.Fuzz(func(t *testing.T, geom []byte, x, y float64, part, ring, vertex int, onSeg bool, kind string, epsg int) {
		if epsg < 0 || epsg > 1_000_000 {
			return
		}
		ge := &envelope.GeometryError{Reason: "fuzz", Kind: kind, Location: []float64{x, y},
			Fault: &classify.Fault{Part: part, Ring: ring, Vertex: vertex, OnSegment: onSeg}}
		ans, err := s.display(geom, epsg, &envelope.Envelope{SourceCRS: "EPSG:" + itoa(epsg)}, ge)
		if err == nil {
			require.True(t, json.Valid(ans.Geometry))
		}
	})
}
