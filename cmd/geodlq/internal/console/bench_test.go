package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
)

// benchRecords is the size of the store the benchmarks run on.
const benchRecords = 100_000

// benchPayloads returns n events a pipeline dead-letters: bowties around
// 200 places, unclosed rings, EPSG:3857 polygons, metres labelled as
// degrees and payloads that are not JSON, from 20 providers.
func benchPayloads(n int) []string {
	r := rand.New(rand.NewPCG(1, 2))
	type place struct{ lon, lat float64 }
	places := make([]place, 200)
	for i := range places {
		places[i] = place{r.Float64()*340 - 170, r.Float64()*130 - 60}
	}
	out := make([]string, n)
	for i := range out {
		p := places[r.IntN(len(places))]
		x, y := p.lon+r.NormFloat64(), p.lat+r.NormFloat64()
		x, y = math.Max(-178, math.Min(178, x)), math.Max(-80, math.Min(80, y))
		id := fmt.Sprintf("evt-%06d", i)
		src := fmt.Sprintf("s3://provider-%02d/tiles/%d.geojson", r.IntN(20), i)
		switch k := r.IntN(100); {
		case k < 70:
			out[i] = evjson(id, src, "EPSG:4326", bowtieAt(x, y))
		case k < 80:
			out[i] = evjson(id, src, "EPSG:4326", fmt.Sprintf(`{"type":"Polygon","coordinates":[[[%g,%g],[%g,%g],[%g,%g],[%g,%g]]]}`, x, y, x+1, y, x+1, y+1, x, y+1))
		case k < 90:
			mx, my := x*20037508.34/180, math.Log(math.Tan((90+y)*math.Pi/360))*20037508.34/math.Pi
			out[i] = evjson(id, src, "EPSG:3857", fmt.Sprintf(`{"type":"Polygon","coordinates":[[[%f,%f],[%f,%f],[%f,%f],[%f,%f],[%f,%f]]]}`,
				mx, my, mx+1000, my+1000, mx+1000, my, mx, my+1000, mx, my))
		case k < 95:
			out[i] = evjson(id, src, "EPSG:4326", fmt.Sprintf(`{"type":"Point","coordinates":[%f,%f]}`, x*111319, y*111319))
		default:
			out[i] = fmt.Sprintf("not JSON %d", i)
		}
	}
	return out
}

// benchStore returns the URL of a SQLite store holding benchRecords
// records filled through the Processor, made once per machine (in the
// temporary directory, renamed into place when complete) and reused.
func benchStore(b *testing.B) string {
	b.Helper()
	path := filepath.Join(os.TempDir(), fmt.Sprintf("geodlq-console-bench-v1-%d.db", benchRecords))
	if _, err := os.Stat(path); err == nil {
		return "sqlite://" + path
	}
	tmp := path + fmt.Sprintf(".%d.tmp", os.Getpid())
	defer os.Remove(tmp)
	s, err := broker.OpenStore(context.Background(), "sqlite://"+tmp, &broker.OpenOptions{Create: true})
	require.NoError(b, err)
	start := time.Now()
	fill(b, s, nil, time.Now().Add(-benchRecords*time.Minute).UTC(), benchPayloads(benchRecords)...)
	require.NoError(b, s.Close())
	b.Logf("filled %d records through the Processor in %v", benchRecords, time.Since(start).Round(time.Second))
	require.NoError(b, os.Rename(tmp, path))
	return "sqlite://" + path
}

// BenchmarkConsole measures the console on 100,000 records in SQLite:
//
//   - index: from start to the store counted (once; reported as
//     index-s);
//   - page-load: everything the page fetches to show its first screen
//     (page, script, style, basemap, config, overview, first list page,
//     map markers of the world), six at a time as a browser does;
//   - api: a mix of the requests an operator makes (filtered lists, the
//     next page, map views at several zooms, the overview, records and
//     their geometry), with p50, p95 and p99 latencies;
//   - overview-from-stats: the overview with replayed records (every
//     overview is the store's Stats);
//   - store-list and store-stats: the store's own List (100 newest) and
//     Stats (with a time bucket) that the list and the overview call,
//     the baseline in the same run.
func BenchmarkConsole(b *testing.B) {
	url := benchStore(b)
	ctx := context.Background()
	s, err := broker.OpenStore(ctx, url, &broker.OpenOptions{ReadOnly: true})
	require.NoError(b, err)
	defer s.Close()
	start := time.Now()
	srv, err := New(Options{Store: s, Poll: time.Hour})
	require.NoError(b, err)
	defer srv.Close()
	for !srv.Ready() {
		time.Sleep(10 * time.Millisecond)
	}
	indexTime := time.Since(start)
	require.Equal(b, benchRecords, srv.watch.count())
	hs := httptest.NewServer(srv)
	defer hs.Close()
	get := func(path string) time.Duration {
		t0 := time.Now()
		res, err := http.Get(hs.URL + path)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %s", path, res.Status)
		}
		return time.Since(t0)
	}
	var first listAnswer
	{
		res, err := http.Get(hs.URL + "/api/records?limit=100")
		require.NoError(b, err)
		require.NoError(b, jsonDecode(res.Body, &first))
		res.Body.Close()
		require.Len(b, first.Records, 100)
	}

	b.Run("index", func(b *testing.B) {
		for b.Loop() {
		}
		b.ReportMetric(indexTime.Seconds(), "index-s")
	})

	b.Run("page-load", func(b *testing.B) {
		load := []string{"/", "/assets/app.js", "/assets/app.css", "/assets/basemap.json", "/api/config",
			"/api/overview", "/api/records?limit=100&sort=newest", "/api/map?zoom=2&view=-180,-85,180,85"}
		for b.Loop() {
			var wg sync.WaitGroup
			sem := make(chan struct{}, 6)
			for _, p := range load {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					get(p)
				})
			}
			wg.Wait()
		}
	})

	mix := []string{
		"/api/records?limit=100",
		"/api/records?limit=100&cursor=" + first.Next,
		"/api/records?limit=100&class=crs_mismatch&sort=oldest",
		"/api/records?limit=100&reason=self_intersection&bbox=-20,30,40,70",
		"/api/records?limit=100&source_prefix=s3://provider-07/",
		"/api/records?limit=100&q=evt-0999",
		"/api/map?zoom=2&view=-180,-85,180,85",
		"/api/map?zoom=5&view=-10,35,30,60",
		"/api/map?zoom=9&view=2,48,3,49",
		"/api/map?zoom=3&view=-180,-85,180,85&class=invalid_geometry",
		"/api/overview",
		"/api/overview?class=invalid_geometry",
		recPath(RecordRef{first.Records[0].Destination, first.Records[0].ID}),
		recPath(RecordRef{first.Records[1].Destination, first.Records[1].ID}) + "/geometry",
	}
	b.Run("api", func(b *testing.B) {
		var lat []time.Duration
		i := 0
		for b.Loop() {
			lat = append(lat, get(mix[i%len(mix)]))
			i++
		}
		per := map[string][]time.Duration{}
		for j, d := range lat {
			per[mix[j%len(mix)]] = append(per[mix[j%len(mix)]], d)
		}
		for _, p := range mix {
			ds := per[p]
			slices.Sort(ds)
			if len(ds) > 0 {
				fmt.Fprintf(os.Stderr, "  %-72.72s median %v max %v\n", p, ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
			}
		}
		slices.Sort(lat)
		q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
		b.ReportMetric(q(0.50), "p50-ms")
		b.ReportMetric(q(0.95), "p95-ms")
		b.ReportMetric(q(0.99), "p99-ms")
	})

	b.Run("overview-from-stats", func(b *testing.B) {
		for b.Loop() {
			get("/api/overview?replayed=true")
		}
	})

	b.Run("store-list", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.List(ctx, broker.ListOptions{Descending: true, Limit: 100}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("store-stats", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Stats(ctx, broker.StatsOptions{Bucket: 24 * time.Hour}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func jsonDecode(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }

// BenchmarkPageLoadBrowser loads the console on 100,000 records in
// headless Chromium b.N times, each from navigation until the list and
// the map's markers are shown, and reports the median and worst load.
func BenchmarkPageLoadBrowser(b *testing.B) {
	node, err := exec.LookPath("node")
	if err != nil {
		b.Skip("node is missing")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		b.Skip("chromium is missing")
	}
	url := benchStore(b)
	s, err := broker.OpenStore(context.Background(), url, &broker.OpenOptions{ReadOnly: true})
	require.NoError(b, err)
	defer s.Close()
	srv, err := New(Options{Store: s, Poll: time.Hour})
	require.NoError(b, err)
	defer srv.Close()
	for !srv.Ready() {
		time.Sleep(10 * time.Millisecond)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	n := b.N
	b.ResetTimer()
	cmd := exec.Command(node, filepath.Join("e2e", "load.mjs"))
	cmd.Dir = uiDir
	cmd.Env = append(os.Environ(), "CONSOLE_URL="+hs.URL+"/", "LOADS="+strconv.Itoa(n))
	out, err := cmd.Output()
	require.NoError(b, err)
	b.StopTimer()
	var ms []float64
	require.NoError(b, json.Unmarshal(out, &ms))
	require.Len(b, ms, n)
	slices.Sort(ms)
	b.ReportMetric(ms[len(ms)/2], "median-load-ms")
	b.ReportMetric(ms[len(ms)-1], "max-load-ms")
}

// indexMemRecords is how many records BenchmarkHeldMemory stores.
const indexMemRecords = 2000

// wordsFor are the words the generated properties are made of.
var wordsFor = []string{"parcel", "cadastre", "river", "boundary", "survey", "municipality", "district", "road", "bridge",
	"forest", "wetland", "zoning", "residential", "agricultural", "industrial", "Khartoum", "Omdurman", "Nyala", "Kassala",
	"Port Sudan", "Gedaref", "El Obeid", "Atbara", "Kosti", "Wad Madani", "verified", "pending", "imported", "field", "note"}

// richProperties returns an event's properties of about size bytes of
// JSON: names, an address, tags, codes and free-text notes, as cadastral
// and gazetteer feeds carry them; every value differs.
func richProperties(r *rand.Rand, i, size int) string {
	text := func(n int) string {
		var b []byte
		for len(b) < n {
			if len(b) > 0 {
				b = append(b, ' ')
			}
			b = append(b, wordsFor[r.IntN(len(wordsFor))]...)
		}
		return string(b[:n])
	}
	p := map[string]any{
		"name": text(40), "name_en": text(40), "admin": text(24), "provider": fmt.Sprintf("feed-%02d", r.IntN(20)),
		"parcel_id": fmt.Sprintf("SD-%08d", i), "area_m2": r.Float64() * 1e6, "surveyed": r.IntN(2) == 1,
		"address": map[string]any{"street": text(30), "city": text(16), "postcode": fmt.Sprintf("%05d", r.IntN(99999)), "region": text(20)},
		"tags":    []string{text(12), text(12), text(12), text(12), text(12), text(12)},
	}
	// Free-text notes of up to 300 bytes each fill the rest: many
	// values, each under broker.MaxSummaryText, are what the index keeps
	// most of (a single long value is cut to that).
	b, _ := json.Marshal(p)
	for n := 1; len(b) < size-40; n++ {
		p[fmt.Sprintf("note_%02d", n)] = text(min(300, size-len(b)-30))
		b, _ = json.Marshal(p)
	}
	return string(b)
}

// BenchmarkHeldMemory measures what the console holds per record once it
// has answered the page's requests (the overview, the first list page,
// the map of the world, shapes), when every event carries properties of
// about 4 KiB (and, for comparison, none and 1 KiB): the live heap after
// the requests against the live heap of a console that answered none,
// over a SQLite store of indexMemRecords such records. It reports
// held-B/record, which stays near 0: the console keeps nothing per
// record (it had an in-memory index of about 4.6 KB per such record).
func BenchmarkHeldMemory(b *testing.B) {
	for _, size := range []int{0, 1024, 4096} {
		b.Run(fmt.Sprintf("props=%d", size), func(b *testing.B) { benchHeldMemory(b, size) })
	}
}

func benchHeldMemory(b *testing.B, size int) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, uint64(size)))
	payloads := make([]string, indexMemRecords)
	props := 0
	for i := range payloads {
		pr := "{}"
		if size > 0 {
			pr = richProperties(r, i, size)
		}
		props += len(pr)
		x, y := r.Float64()*340-170, r.Float64()*130-60
		payloads[i] = fmt.Sprintf(`{"event_id":"evt-%06d","source_uri":"s3://provider-%02d/parcels/%d.geojson","crs":"EPSG:4326","properties":%s,"geometry":%s}`,
			i, r.IntN(20), i, pr, bowtieAt(x, y))
	}
	url := "sqlite://" + filepath.Join(b.TempDir(), "dlq.db")
	s, err := broker.OpenStore(ctx, url, &broker.OpenOptions{Create: true})
	require.NoError(b, err)
	defer s.Close()
	fill(b, s, nil, time.Now().Add(-indexMemRecords*time.Minute).UTC(), payloads...)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var perRecord float64
	for b.Loop() {
		b.StopTimer()
		srv, err := New(Options{Store: s, Poll: time.Hour})
		require.NoError(b, err)
		for !srv.Ready() {
			time.Sleep(10 * time.Millisecond)
		}
		hs := httptest.NewServer(srv)
		before := heap()
		b.StartTimer()
		for _, p := range []string{"/api/overview", "/api/records?limit=100", "/api/map?zoom=2&view=-180,-85,180,85",
			"/api/map?zoom=18&q=evt", "/api/shapes?zoom=6&view=-10,35,20,60"} {
			res, err := http.Get(hs.URL + p)
			require.NoError(b, err)
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			require.Equal(b, http.StatusOK, res.StatusCode, p)
		}
		b.StopTimer()
		after := heap()
		perRecord = float64(int64(after)-int64(before)) / indexMemRecords
		runtime.KeepAlive(srv)
		hs.Close()
		require.NoError(b, srv.Close())
		b.StartTimer()
	}
	b.ReportMetric(perRecord, "held-B/record")
	b.ReportMetric(float64(props)/indexMemRecords, "props-B/record")
}
