package console

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/replay"
)

func (e *env) do(method, path string, body any, hdr map[string]string) (*http.Response, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(e.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.http.URL+path, rd)
	require.NoError(e.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	return res, b
}

// get requires status and decodes the answer into v (if not nil).
func (e *env) get(path string, status int, v any) []byte {
	e.t.Helper()
	res, b := e.do("GET", path, nil, nil)
	require.Equal(e.t, status, res.StatusCode, "GET %s: %s", path, b)
	if status >= 400 {
		require.Equal(e.t, ContentTypeProblem, res.Header.Get("Content-Type"))
		var p Problem
		require.NoError(e.t, json.Unmarshal(b, &p))
		require.Equal(e.t, status, p.Status)
		require.NotEmpty(e.t, p.Detail)
	}
	if v != nil {
		require.NoError(e.t, json.Unmarshal(b, v), string(b))
	}
	return b
}

func (e *env) post(path string, body any, status int, v any) Problem {
	e.t.Helper()
	res, b := e.do("POST", path, body, map[string]string{"Authorization": "Bearer " + e.token})
	require.Equal(e.t, status, res.StatusCode, "POST %s: %s", path, b)
	var p Problem
	if status >= 400 {
		require.NoError(e.t, json.Unmarshal(b, &p))
	} else if v != nil {
		require.NoError(e.t, json.Unmarshal(b, v), string(b))
	}
	return p
}

// eventIDs lists every record the filter q selects, paging with limit.
func (e *env) eventIDs(q string, limit int) []string {
	e.t.Helper()
	var ids []string
	cur := ""
	for range 1000 {
		v, err := url.ParseQuery(q)
		require.NoError(e.t, err)
		v.Set("limit", strconv.Itoa(limit))
		if cur != "" {
			v.Set("cursor", cur)
		}
		var ans listAnswer
		e.get("/api/records?"+v.Encode(), http.StatusOK, &ans)
		for _, r := range ans.Records {
			id := r.EventID
			if id == "" {
				id = "record:" + r.ID
			}
			ids = append(ids, id)
		}
		if ans.Next == "" {
			slices.Sort(ids)
			return ids
		}
		cur = ans.Next
	}
	e.t.Fatal("the list does not end")
	return nil
}

// recordOf finds the record of an event id.
func (e *env) recordOf(eventID string) RecordRef {
	e.t.Helper()
	var ans listAnswer
	e.get("/api/records?limit=500&q="+url.QueryEscape(eventID), http.StatusOK, &ans)
	for _, r := range ans.Records {
		if r.EventID == eventID {
			return RecordRef{Destination: r.Destination, ID: r.ID}
		}
	}
	e.t.Fatalf("no record of %s", eventID)
	return RecordRef{}
}

// recordOfAll finds the record of an event id among replayed ones too.
func (e *env) recordOfAll(eventID string) RecordRef {
	e.t.Helper()
	var ans listAnswer
	e.get("/api/records?limit=500&replayed=true&q="+url.QueryEscape(eventID), http.StatusOK, &ans)
	for _, r := range ans.Records {
		if r.EventID == eventID {
			return RecordRef{Destination: r.Destination, ID: r.ID}
		}
	}
	e.t.Fatalf("no record of %s", eventID)
	return RecordRef{}
}

func itoa(n int) string { return strconv.Itoa(n) }

func recPath(r RecordRef) string {
	return "/api/records/" + url.PathEscape(r.Destination) + "/" + url.PathEscape(r.ID)
}

func allEventIDs() []string {
	var ids []string
	for _, f := range fixtureEvents() {
		ids = append(ids, f.id)
	}
	return ids
}

// TestAPI runs the read API against each real store filled through the
// Processor: filters, paging, records, geometry markers, payloads, repair
// previews, the map and the overview, and the problem details of bad
// requests.
func TestAPI(t *testing.T) {
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t, k, envOptions{readOnly: true})
			var cfg configAnswer
			e.get("/api/config", http.StatusOK, &cfg)
			require.True(t, cfg.ReadOnly)
			require.Equal(t, []string{dlt}, cfg.Destinations)
			require.True(t, cfg.Index.Ready)
			require.Equal(t, len(fixtureEvents()), cfg.Index.Records)

			// Every record, whatever the page size and order.
			want := e.eventIDs("", 500)
			require.Len(t, want, len(fixtureEvents()))
			for _, lim := range []int{1, 2, 3, 7} {
				require.Equal(t, want, e.eventIDs("", lim), "limit %d", lim)
				require.Equal(t, want, e.eventIDs("sort=oldest", lim), "limit %d oldest", lim)
			}
			notJSON := e.eventIDs("class=schema_violation", 10)
			require.Len(t, notJSON, 1)
			require.True(t, strings.HasPrefix(notJSON[0], "evt-"), "an event id derived from the key")
			for _, tc := range []struct {
				q    string
				want []string
			}{
				{"reason=self_intersection", []string{"evt-bowtie", "evt-bowtie-b", "evt-eu-1", "evt-eu-2", "evt-eu-3", hostileID}},
				{"class=crs_mismatch", []string{"evt-3857", "evt-range"}},
				{"epsg=3857", []string{"evt-3857"}},
				{"reason=ring_not_closed,invalid_coordinate", []string{"evt-eu-unclosed", "evt-nan"}},
				{"source_prefix=s3://provider-b/eu/", []string{"evt-eu-1", "evt-eu-2", "evt-eu-3"}},
				{"q=EU-", []string{"evt-eu-1", "evt-eu-2", "evt-eu-3", "evt-eu-unclosed"}},
				// With replayed records too.
				{"q=EU-&replayed=true", []string{"evt-eu-1", "evt-eu-2", "evt-eu-3", "evt-eu-unclosed"}},
				{"source_prefix=s3://provider-b/eu/&replayed=true&sort=oldest", []string{"evt-eu-1", "evt-eu-2", "evt-eu-3"}},
				{"bbox=-10,35,20,60", []string{"evt-eu-1", "evt-eu-2", "evt-eu-3", "evt-eu-unclosed"}},
				{"bbox=-10,35,20,60&reason=self_intersection", []string{"evt-eu-1", "evt-eu-2", "evt-eu-3"}},
				{"stage=parse", notJSON},
				{"since=1h&destination=" + dlt, want},
				{"until=1h", nil},
				{"q=nothing-matches-this", nil},
			} {
				got := e.eventIDs(tc.q, 2)
				w := slices.Clone(tc.want)
				slices.Sort(w)
				if got == nil {
					got = []string{}
				}
				if w == nil {
					w = []string{}
				}
				require.Equal(t, w, got, tc.q)
			}
			for _, bad := range []string{
				"class=bogus", "reason=bogus", "stage=nowhere", "epsg=x", "bbox=1,2,3", "bbox=5,5,1,1", "bbox=NaN,0,1,1",
				"since=yesterday", "limit=0", "limit=100000", "sort=sideways", "cursor=garbage", "unknown=1", "replayed=maybe",
				"destination=" + url.QueryEscape("a\x01b"), "q=" + strings.Repeat("x", 300),
			} {
				e.get("/api/records?"+bad, http.StatusBadRequest, nil)
			}
			e.get("/api/overview?class=bogus", http.StatusBadRequest, nil)
			e.get("/api/map?zoom=99", http.StatusBadRequest, nil)
			e.get("/api/nowhere", http.StatusNotFound, nil)

			// One record: the envelope's fields.
			bow := e.recordOf("evt-bowtie")
			var rec recordAnswer
			e.get(recPath(bow), http.StatusOK, &rec)
			require.Equal(t, "invalid_geometry", rec.Class)
			require.Equal(t, "Self-intersection[10.5 10.5]", rec.Reason)
			require.Equal(t, "s3://provider-a/tiles/7.geojson", rec.SourceURI)
			require.Equal(t, "(10.5 10.5) ring 0 segment 0-1", rec.Where, "where the fault is, in geodlq show's words")
			require.Equal(t, []string{"make-valid"}, rec.Repairs)
			require.NotEmpty(t, rec.IdempotencyKey)
			e.get(recPath(RecordRef{dlt, "999999"}), http.StatusNotFound, nil)
			e.get(recPath(RecordRef{"no-such-dest", bow.ID}), http.StatusNotFound, nil)
			e.get("/api/records/"+url.PathEscape(dlt)+"/"+strings.Repeat("9", 300), http.StatusBadRequest, nil)

			// The geometry, with both crossing segments marked.
			var g geometryAnswer
			e.get(recPath(bow)+"/geometry", http.StatusOK, &g)
			require.Equal(t, "wgs84", g.Display)
			var segs [][][2]float64
			for _, m := range g.Markers {
				if m.Kind == "segment" {
					segs = append(segs, m.Coords)
				}
			}
			require.Equal(t, [][][2]float64{{{10, 10}, {11, 11}}, {{11, 10}, {10, 11}}}, segs, "both crossing segments, the fault's first")
			require.Contains(t, kindsOf(g.Markers), "point")

			e.get(recPath(e.recordOf("evt-eu-unclosed"))+"/geometry", http.StatusOK, &g)
			require.Contains(t, g.Markers, marker{Kind: "closing_segment", Coords: [][2]float64{{9, 46}, {9, 45}},
				Label: "ring 0, the ring is not closed: the missing closing segment from vertex 3 back to vertex 0"})

			e.get(recPath(e.recordOf("evt-nan"))+"/geometry", http.StatusOK, &g)
			require.Equal(t, 1, g.Dropped)
			require.Len(t, g.Markers, 1)
			require.Equal(t, "vertex", g.Markers[0].Kind)
			require.Equal(t, [2]float64{100.5, 0.5}, g.Markers[0].Coords[0], "between the NaN vertex's neighbours")
			require.Contains(t, g.Markers[0].Label, "vertex 2 is NaN")

			e.get(recPath(e.recordOf("evt-range"))+"/geometry", http.StatusOK, &g)
			require.Equal(t, "planar", g.Display, "metres labelled degrees are drawn in their own coordinates")
			require.Equal(t, []marker{{Kind: "vertex", Coords: [][2]float64{{1113194.9, 1118889.9}}, Label: "vertex 0 is out of range: 1113194.9 1118889.9"}}, g.Markers)

			e.get(recPath(e.recordOf("evt-3857"))+"/geometry", http.StatusOK, &g)
			require.Equal(t, "wgs84", g.Display)
			require.Equal(t, 3857, g.ReprojectedFrom)
			require.Contains(t, g.Note, "Reprojected from EPSG:3857")
			require.Contains(t, string(g.Geometry), "-74.0")

			// The payload, restored and verified, and its download.
			var p payloadAnswer
			e.get(recPath(e.recordOf(hostileID))+"/payload", http.StatusOK, &p)
			require.True(t, p.Verified)
			require.Equal(t, fixtureEvents()[9].payload, p.Text)
			sum := sha256.Sum256([]byte(p.Text))
			require.Equal(t, hex.EncodeToString(sum[:]), p.SHA256)
			require.Contains(t, p.Properties, property{Name: "event_id", Value: jsonString(hostileID)})
			res, body := e.do("GET", recPath(e.recordOf(hostileID))+"/payload?download=1", nil, nil)
			require.Equal(t, http.StatusOK, res.StatusCode)
			require.Equal(t, fixtureEvents()[9].payload, string(body))
			require.Equal(t, "application/octet-stream", res.Header.Get("Content-Type"))
			require.Contains(t, res.Header.Get("Content-Disposition"), "attachment")
			e.get(recPath(e.recordOf(notJSON[0]))+"/geometry", http.StatusUnprocessableEntity, nil)

			// Repair previews change nothing and say whether the result passes.
			var rp repairAnswer
			e.get(recPath(bow)+"/repair?method=make-valid", http.StatusOK, &rp)
			require.True(t, rp.OK, rp.Error)
			require.True(t, rp.ValidAfter, rp.ReasonAfter)
			require.Equal(t, "Polygon", rp.TypeBefore)
			require.Equal(t, "MultiPolygon", rp.TypeAfter)
			require.Equal(t, 5, rp.VerticesBefore)
			require.NotNil(t, rp.After)
			e.get(recPath(e.recordOf("evt-3857"))+"/repair?method=reproject", http.StatusOK, &rp)
			require.True(t, rp.OK, rp.Error)
			require.True(t, rp.ValidAfter, rp.ReasonAfter)
			require.Equal(t, "wgs84", rp.After.Display)
			e.get(recPath(e.recordOf("evt-range"))+"/repair?method=reproject", http.StatusOK, &rp)
			require.False(t, rp.OK)
			require.Contains(t, rp.Error, "out of range")
			e.get(recPath(bow)+"/repair?method=magic", http.StatusBadRequest, nil)
			require.Equal(t, want, e.eventIDs("", 500), "previews changed nothing")

			// The map: every placeable record, clustered at low zoom.
			var m mapAnswer
			e.get("/api/map?zoom=1", http.StatusOK, &m)
			require.Equal(t, placedCount(), m.Located)
			require.Equal(t, len(fixtureEvents())-placedCount(), m.Unlocated)
			require.Equal(t, 1, m.Reprojected)
			require.Equal(t, placedCount(), markerTotal(m))
			require.Less(t, len(m.Markers), placedCount(), "clustered at zoom 1")
			e.get("/api/map?zoom=18", http.StatusOK, &m)
			require.Len(t, m.Markers, placedCount(), "one marker per record up close")
			e.get("/api/map?zoom=5&view=-10,35,20,60", http.StatusOK, &m)
			require.Equal(t, 4, m.InView)
			m = mapAnswer{}
			e.get("/api/map?zoom=3&class=crs_mismatch", http.StatusOK, &m)
			require.Equal(t, 1, m.Located)
			require.Equal(t, 1, m.Unlocated)
			require.Equal(t, map[string]int{"out of range for longitude/latitude": 1}, m.WhyNot)

			// The overview.
			// The overview of open records and the one with replayed
			// records (none here) count the same.
			var ov, st overviewAnswer
			e.get("/api/overview?replayed=true", http.StatusOK, &st)
			require.Equal(t, "store", st.Source)
			e.get("/api/overview", http.StatusOK, &ov)
			require.Equal(t, "store", ov.Source)
			for _, pair := range [][2][]keyCount{{ov.ByClass, st.ByClass}, {ov.ByStage, st.ByStage}, {ov.ByEPSG, st.ByEPSG},
				{ov.ByReasonKind, st.ByReasonKind}, {ov.ByDestination, st.ByDestination}} {
				require.Equal(t, pair[1], pair[0])
			}
			require.Equal(t, st.Timeline, ov.Timeline)
			require.Equal(t, len(fixtureEvents()), ov.Open)
			require.Contains(t, ov.ByClass, keyCount{"invalid_geometry", 8})
			require.Contains(t, ov.ByEPSG, keyCount{"3857", 1})
			require.Contains(t, ov.ByReasonKind, keyCount{"self_intersection", 6})
			require.Contains(t, ov.TopPrefixes, keyCount{"s3://provider-b", 4})
			require.NotEmpty(t, ov.Timeline)
			n := 0
			for _, b := range ov.Timeline {
				for _, c := range b.ByClass {
					n += c
				}
			}
			require.Equal(t, len(fixtureEvents()), n)
			ov = overviewAnswer{}
			e.get("/api/overview?source_prefix=s3://provider-b/eu/", http.StatusOK, &ov)
			require.Equal(t, "store", ov.Source)
			require.Equal(t, 3, ov.Open)

			// The page and its assets, and the API document.
			res, body = e.do("GET", "/", nil, nil)
			require.Equal(t, http.StatusOK, res.StatusCode)
			require.Contains(t, string(body), `<script defer src="/assets/app.js"></script>`)
			require.NotContains(t, string(body), "<script>", "no inline script")
			for _, a := range []string{"app.js", "app.css", "basemap.json"} {
				res, _ = e.do("GET", "/assets/"+a, nil, nil)
				require.Equal(t, http.StatusOK, res.StatusCode, a)
			}
			res, _ = e.do("GET", "/assets/..%2fopenapi.json", nil, nil)
			require.Equal(t, http.StatusNotFound, res.StatusCode)
			var doc struct {
				Paths map[string]map[string]any `json:"paths"`
			}
			e.get("/api/openapi.json", http.StatusOK, &doc)
			for _, route := range apiRoutes {
				method, p, _ := strings.Cut(route, " ")
				p = strings.ReplaceAll(p, "{$}", "")
				require.Contains(t, doc.Paths, p, "the OpenAPI document describes %s", route)
				require.Contains(t, doc.Paths[p], strings.ToLower(method), route)
			}
		})
	}
}

// apiRoutes are the API's routes, as registered.
var apiRoutes = []string{
	"GET /api/config", "GET /api/openapi.json", "GET /api/overview", "GET /api/records", "GET /api/records/{dest}/{id}",
	"GET /api/records/{dest}/{id}/geometry", "GET /api/records/{dest}/{id}/payload", "GET /api/records/{dest}/{id}/repair",
	"GET /api/map", "GET /api/events", "GET /api/jobs", "GET /api/jobs/{job}", "POST /api/jobs", "POST /api/jobs/{job}/cancel",
}

func kindsOf(ms []marker) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Kind)
	}
	return out
}

func markerTotal(m mapAnswer) int {
	n := 0
	for _, c := range m.Markers {
		n += c.Count
	}
	return n
}

// TestSecurity proves the guards of the mutating API and the headers of
// every answer.
func TestSecurity(t *testing.T) {
	e := newEnv(t, sqliteKind(), envOptions{})
	bow := e.recordOf("evt-bowtie")
	body := JobRequest{Action: "discard", DryRun: true, Records: []RecordRef{bow}}
	for _, tc := range []struct {
		name   string
		hdr    map[string]string
		status int
	}{
		{"no token", map[string]string{}, http.StatusUnauthorized},
		{"wrong token", map[string]string{"Authorization": "Bearer " + strings.Repeat("x", len(testToken))}, http.StatusUnauthorized},
		{"token as a query is not a token", map[string]string{"Authorization": "Basic " + testToken}, http.StatusUnauthorized},
		{"cross-site", map[string]string{"Authorization": "Bearer " + testToken, "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"foreign origin", map[string]string{"Authorization": "Bearer " + testToken, "Origin": "https://evil.example"}, http.StatusForbidden},
		{"not JSON", map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
		{"foreign host (DNS rebinding)", map[string]string{"Authorization": "Bearer " + testToken, "Host": "evil.example"}, http.StatusMisdirectedRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := json.Marshal(body)
			req, err := http.NewRequest("POST", e.http.URL+"/api/jobs", bytes.NewReader(b))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
				if k == "Host" {
					req.Host = v
				}
			}
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer res.Body.Close()
			require.Equal(t, tc.status, res.StatusCode)
			require.Equal(t, ContentTypeProblem, res.Header.Get("Content-Type"))
		})
	}
	// Nothing happened.
	require.Len(t, e.eventIDs("", 500), len(fixtureEvents()))
	var js struct{ Jobs []Job }
	e.get("/api/jobs", http.StatusOK, &js)
	require.Empty(t, js.Jobs)

	// Every answer carries the headers.
	for _, p := range []string{"/", "/api/config", "/api/nowhere", "/assets/app.js"} {
		res, _ := e.do("GET", p, nil, nil)
		csp := res.Header.Get("Content-Security-Policy")
		require.Contains(t, csp, "script-src 'self';", p)
		require.Contains(t, csp, "default-src 'none'", p)
		require.NotContains(t, csp, "unsafe-inline", p)
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), p)
		require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"), p)
	}

	// A read-only console refuses actions even with a token.
	ro := newEnv(t, sqliteKind(), envOptions{readOnly: true})
	ro.token = testToken
	p := ro.post("/api/jobs", body, http.StatusForbidden, nil)
	require.Contains(t, p.Detail, "read-only")

	// The tile server's origin, and only it, joins img-src.
	csp, err := contentSecurityPolicy("https://tiles.example:8443/{z}/{x}/{y}.png")
	require.NoError(t, err)
	require.Contains(t, csp, "img-src 'self' data: https://tiles.example:8443;")
	for _, bad := range []string{"javascript:alert(1)", "ftp://x/{z}", "/relative/{z}/{x}/{y}.png"} {
		_, err := contentSecurityPolicy(bad)
		require.Error(t, err, bad)
	}
}

// consume reads every message of topic in the target store and runs its
// side effect through replay.Once with claims, as the consumer would:
// it returns how many times each event's side effect ran.
func consume(t *testing.T, target *broker.Store, claims replay.Claims) map[string]int {
	t.Helper()
	ctx := context.Background()
	ran := map[string]int{}
	for {
		recs, err := target.Fetch(ctx, topic, broker.Filter{}, 100)
		require.NoError(t, err)
		if len(recs) == 0 {
			return ran
		}
		for _, r := range recs {
			key := r.Message.Header(broker.HeaderIdempotencyKey)
			require.NotEmpty(t, key)
			_, err := replay.Once(ctx, claims, key, time.Minute, func(context.Context) error {
				ran[r.Message.Header(broker.HeaderEventID)]++
				return nil
			})
			require.NoError(t, err)
			require.NoError(t, target.Ack(ctx, r))
		}
	}
}

// waitJob polls a job until it finishes.
func (e *env) waitJob(id string) Job {
	e.t.Helper()
	var j Job
	require.Eventually(e.t, func() bool {
		e.get("/api/jobs/"+id, http.StatusOK, &j)
		return j.State != "running"
	}, 60*time.Second, 20*time.Millisecond)
	return j
}

// TestActions replays and discards through the API on each real store:
// always a dry run first, then its confirmation; the replay re-injects
// once (checked through a claims store), the record leaves the list, and
// neither can be carried out twice.
func TestActions(t *testing.T) {
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t, k, envOptions{})
			bow := e.recordOf("evt-bowtie")

			e.post("/api/jobs", JobRequest{Action: "replay", Repairs: []string{"make-valid"}, Records: []RecordRef{bow}}, http.StatusBadRequest, nil)
			e.post("/api/jobs", JobRequest{Action: "replay", DryRun: true}, http.StatusBadRequest, nil)
			e.post("/api/jobs", JobRequest{Action: "replay", DryRun: true, Repairs: []string{"magic"}, Records: []RecordRef{bow}}, http.StatusBadRequest, nil)
			e.post("/api/jobs", JobRequest{Action: "explode", DryRun: true, Records: []RecordRef{bow}}, http.StatusBadRequest, nil)
			e.post("/api/jobs", map[string]any{"action": "replay", "dry_run": true, "surprise": 1}, http.StatusBadRequest, nil)
			e.post("/api/jobs", JobRequest{Action: "replay", Confirm: "nope"}, http.StatusConflict, nil)

			// Dry run: nothing moves.
			var dry Job
			e.post("/api/jobs", JobRequest{Action: "replay", DryRun: true, Repairs: []string{"make-valid"}, Records: []RecordRef{bow}}, http.StatusAccepted, &dry)
			dry = e.waitJob(dry.ID)
			require.Equal(t, "done", dry.State, dry.Error)
			require.Equal(t, map[string]int{"would_repair": 1}, dry.Counts)
			require.Equal(t, "evt-bowtie", dry.Items[0].EventID)
			require.Contains(t, dry.Items[0].Repair, "make_valid")
			require.Contains(t, e.eventIDs("", 500), "evt-bowtie")
			require.Empty(t, consume(t, e.target, replay.NewMemClaims(nil)))

			// A confirmation with other repairs is refused.
			e.post("/api/jobs", JobRequest{Action: "replay", Confirm: dry.ID}, http.StatusConflict, nil)
			var real Job
			e.post("/api/jobs", JobRequest{Action: "replay", Repairs: []string{"make-valid"}, Confirm: dry.ID}, http.StatusAccepted, &real)
			real = e.waitJob(real.ID)
			require.Equal(t, "done", real.State, real.Error)
			require.Equal(t, map[string]int{"repaired": 1}, real.Counts)
			require.Equal(t, dry.ID, real.Confirms)
			e.post("/api/jobs", JobRequest{Action: "replay", Repairs: []string{"make-valid"}, Confirm: dry.ID}, http.StatusConflict, nil)

			require.NotContains(t, e.eventIDs("", 500), "evt-bowtie", "the record left the list")
			claims := replay.NewMemClaims(nil)
			ran := consume(t, e.target, claims)
			require.Equal(t, map[string]int{"evt-bowtie": 1}, ran, "re-injected once")
			var rec recordAnswer
			e.get(recPath(bow), http.StatusOK, &rec)
			require.Equal(t, 1, claims.Completions(rec.IdempotencyKey))
			require.Equal(t, "replayed", rec.Status)

			// A selection by filter: the dry run shows each record's fate.
			e.post("/api/jobs", JobRequest{Action: "replay", DryRun: true, Filter: &Query{Classes: []string{"nope"}}}, http.StatusBadRequest, nil)
			e.post("/api/jobs", JobRequest{Action: "replay", DryRun: true, Filter: &Query{}, Records: []RecordRef{bow}}, http.StatusBadRequest, nil)
			e.post("/api/jobs", JobRequest{Action: "replay", DryRun: true, Repairs: []string{"make-valid", "reproject"},
				Filter: &Query{Classes: []string{"invalid_geometry", "crs_mismatch"}}}, http.StatusAccepted, &dry)
			dry = e.waitJob(dry.ID)
			require.Equal(t, 9, dry.Selected)
			require.Equal(t, 9, dry.ItemsTotal)
			require.Equal(t, 7, dry.Counts["would_repair"], "five bowties, the unclosed ring and the reprojection: %v", dry.Counts)
			require.Equal(t, 2, dry.Counts["would_fail"], "NaN and out of range: %v", dry.Counts)

			// Discard one record.
			eu := e.recordOf("evt-eu-1")
			e.post("/api/jobs", JobRequest{Action: "discard", DryRun: true, Repairs: []string{"make-valid"}, Records: []RecordRef{eu}}, http.StatusBadRequest, nil)
			e.post("/api/jobs", JobRequest{Action: "discard", DryRun: true, Records: []RecordRef{eu}}, http.StatusAccepted, &dry)
			dry = e.waitJob(dry.ID)
			require.Equal(t, map[string]int{"would_discard": 1}, dry.Counts)
			require.Contains(t, e.eventIDs("", 500), "evt-eu-1")
			e.post("/api/jobs", JobRequest{Action: "replay", Confirm: dry.ID}, http.StatusConflict, nil)
			e.post("/api/jobs", JobRequest{Action: "discard", Confirm: dry.ID}, http.StatusAccepted, &real)
			real = e.waitJob(real.ID)
			require.Equal(t, map[string]int{"discarded": 1}, real.Counts)
			require.NotContains(t, e.eventIDs("", 500), "evt-eu-1")
			e.get(recPath(eu), http.StatusNotFound, nil)
			var m mapAnswer
			e.get("/api/map?zoom=18", http.StatusOK, &m)
			require.Equal(t, placedCount()-2, m.Located, "the map lost the replayed and the discarded record")

			var js struct{ Jobs []Job }
			e.get("/api/jobs", http.StatusOK, &js)
			require.Len(t, js.Jobs, 5)
		})
	}
}

// TestLive proves that new dead letters reach a listening page without a
// reload, and that records removed elsewhere leave the map.
func TestLive(t *testing.T) {
	e := newEnv(t, sqliteKind(), envOptions{poll: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", e.http.URL+"/api/events", nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	sc := bufio.NewScanner(res.Body)
	next := func() (string, string) {
		var name, data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				data = line[len("data: "):]
			case line == "" && name != "":
				return name, data
			}
		}
		t.Fatalf("event stream ended: %v", sc.Err())
		return "", ""
	}
	name, _ := next()
	require.Equal(t, "hello", name)

	ws, err := broker.OpenStore(ctx, e.url, nil)
	require.NoError(t, err)
	defer ws.Close()
	fill(t, ws, nil, time.Now().UTC(), evjson("evt-live", "s3://provider-live/1.geojson", "EPSG:4326", bowtieAt(20, 20)))
	for {
		name, data := next()
		if name != "records" {
			continue
		}
		var d struct {
			New    int              `json:"new"`
			Latest []map[string]any `json:"latest"`
		}
		require.NoError(t, json.Unmarshal([]byte(data), &d))
		require.Equal(t, 1, d.New)
		require.Equal(t, "evt-live", d.Latest[0]["event_id"])
		break
	}
	var m mapAnswer
	e.get("/api/map?zoom=18", http.StatusOK, &m)
	require.Equal(t, placedCount()+1, m.Located)

	// Records purged by someone else (the CLI) leave the index.
	live := e.recordOf("evt-live")
	_, err = ws.Purge(ctx, broker.PurgeRequest{Destination: live.Destination, Filter: broker.Filter{IDs: []string{live.ID}}, IncludePending: true})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e.get("/api/map?zoom=18", http.StatusOK, &m)
		return m.Located == placedCount()
	}, 20*time.Second, 50*time.Millisecond)
}
