package console

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/planar"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/offload"
)

// The map needs every record's position, which no store query gives
// (the store's box query knows fault locations only, in each payload's own
// CRS): the console keeps a small summary of every open record in memory,
// built by one scan at start and kept current by polling, and clusters it
// per request. 100,000 records take about 76 MB, 465 MB when every event
// carries 4 KiB of properties (BenchmarkIndexMemory, docs/console.md).

// summary is what the index keeps of one record.
type summary struct {
	dest, id string
	envelope bool
	eventID  string
	class    string
	stage    string
	kind     string
	epsg     int
	at       time.Time
	source   string
	search   string // folded event id, id, reason, error, attributes: the text filter
	// lon, lat is where the record is drawn (EPSG:4326); located says
	// from what: "fault", "centroid", or "" (not drawn; why says why).
	lon, lat    float64
	my          float64    // lat in Web Mercator, 0 (north) to 1 (south)
	prefix      string     // source's scheme://host
	fault       *orb.Point // the fault location in the payload's coordinates
	located     string
	reprojected int // the EPSG code the point was reprojected from, or 0
	why         string
}

type recKey struct{ dest, id string }

// index is the in-memory summary of the store's open records.
type index struct {
	s *Server

	mu   sync.RWMutex
	recs map[recKey]*summary
	// other holds the records that are not dead letters: events a
	// replay re-injected into the same store (they carry the
	// dlq-replay-of header), waiting in their source topic for the
	// consumer. They are neither shown nor counted as dead letters.
	other map[recKey]struct{}
	// removing, while a rebuild scans the store, collects the records
	// removed meanwhile (replayed or discarded here), which the scan may
	// still have read: the rebuild leaves them out.
	removing map[recKey]struct{}
	// afterScan, in tests, runs between a rebuild's scan and its swap.
	afterScan func()
	ready     bool
	scanned   int
	err       string
	built     time.Time
	gen       uint64 // bumped on every change
}

func newIndex(s *Server) *index {
	return &index{s: s, recs: map[recKey]*summary{}, other: map[recKey]struct{}{}}
}

// reinjected reports whether a record is an event a replay re-injected,
// not a dead letter.
func reinjected(r *broker.Record) bool {
	return r.Message != nil && r.Message.Header(broker.HeaderReplayOf) != ""
}

// maxCentroidVertices bounds the geometries the index computes a planar
// centroid of; larger ones (up to the display budget) are placed at the
// mean of their positions, which is cheaper.
const maxCentroidVertices = 200_000

// summarize builds a record's summary; it never fails: what cannot be
// read is said in why.
func (ix *index) summarize(ctx context.Context, e broker.Entry) *summary {
	r := e.Record
	p := &summary{dest: r.Destination, id: r.ID}
	env := r.Envelope
	if env == nil {
		var err error
		if env, err = envelope.Decode(r.Message.Body); err != nil {
			p.why = "not a dlq.v1 envelope"
			p.search = broker.SearchFold(r.ID)
			return p
		}
	}
	p.envelope = true
	p.eventID, p.class, p.stage = env.EventID, string(env.FailureClass), string(env.FailedStage)
	p.epsg = broker.EPSGOf(env)
	p.at = env.DeadLetteredAt
	x := broker.IndexOfEnvelope(env, 0, nil)
	// A copy: SourceValue's answer is a slice of the attributes (up to
	// broker.MaxAttrsBytes), which the index must not keep alive.
	p.source = strings.Clone(broker.SourceValue(x.Attrs, ix.s.opts.SourcePointer))
	p.prefix = sourcePrefix(p.source)
	if ge := env.GeometryError; ge != nil {
		p.kind = ge.Kind
	}
	// The store's search text (event id, reason, error message, the
	// event's attributes) and the record id.
	p.search = x.Search + broker.SearchFold(r.ID)
	ix.locate(ctx, env, p)
	return p
}

// locate places p: the fault location, else the geometry's centroid,
// reprojected to EPSG:4326 when the payload is in another known CRS.
func (ix *index) locate(ctx context.Context, env *envelope.Envelope, p *summary) {
	var pt orb.Point
	switch ge := env.GeometryError; {
	case ge != nil && len(ge.Location) == 2:
		pt, p.located = orb.Point{ge.Location[0], ge.Location[1]}, "fault"
		p.fault = &pt
	case env.Geometry.Missing:
		p.why = "the event has no geometry"
		return
	default:
		data := env.Geometry.Inline
		if env.Geometry.OffloadURI != "" {
			if ix.s.opts.Blobs == nil || env.Geometry.ByteSize > maxDisplayBytes {
				p.why = "the geometry is offloaded (start with --blobs to place it)"
				return
			}
			b, err := ix.s.opts.Blobs.Fetch(ctx, offload.Ref{URI: env.Geometry.OffloadURI, Size: env.Geometry.ByteSize, SHA256: env.Geometry.ContentSHA256})
			if err != nil {
				p.why = "the offloaded geometry cannot be read: " + clip(err.Error(), 200)
				return
			}
			data = b
		}
		c, ok := centroid(data, p.epsg)
		if !ok {
			p.why = "the geometry has no finite position"
			return
		}
		pt, p.located = c, "centroid"
	}
	lon, lat, from, why := ix.s.toWGS84(pt, p.epsg, env)
	if why != "" {
		p.located, p.why = "", why
		return
	}
	p.lon, p.lat, p.reprojected, p.my = lon, lat, from, mercY(lat)
}

// periods are the x periods of the CRSs a geometry may wrap around the
// antimeridian in: longitude/latitude, and Web Mercator metres.
var periods = map[int]float64{0: 360, wgs84: 360, 3857: 2 * math.Pi * 6378137}

// centroid returns the centroid of a GeoJSON geometry in the CRS epsg
// (the mean of its finite positions when the planar centroid is not
// finite, as for a degenerate or self-crossing polygon). A geometry
// written across the antimeridian is first made continuous (see unwrap),
// so that Chukotka's centroid is in Chukotka, not at longitude 0.
func centroid(data []byte, epsg int) (orb.Point, bool) {
	g, err := geojson.ParseGeometry(data, geojson.Limits{MaxVertices: maxDisplayVertices})
	if err != nil || g.Geom == nil {
		return orb.Point{}, false
	}
	if period, ok := periods[epsg]; ok && geojson.CheckFinite(g) == nil {
		g.Geom, _ = unwrapBy(g.Geom, period)
		g.Points = nil
		geojson.Components(g.Geom, func(c geojson.Component) bool {
			g.Points = append(g.Points, c.Points...)
			return true
		})
	}
	if g.Vertices <= maxCentroidVertices && geojson.CheckFinite(g) == nil {
		if c, _ := planar.CentroidArea(g.Geom); finite(c) && (c != orb.Point{} || g.Geom.Bound().Contains(c)) {
			return c, true
		}
	}
	var sx, sy float64
	n := 0
	for _, q := range g.Points {
		if finite(q) {
			sx, sy, n = sx+q[0], sy+q[1], n+1
		}
	}
	if n == 0 {
		return orb.Point{}, false
	}
	return orb.Point{sx / float64(n), sy / float64(n)}, true
}

func finite(p orb.Point) bool {
	return !math.IsNaN(p[0]) && !math.IsNaN(p[1]) && !math.IsInf(p[0], 0) && !math.IsInf(p[1], 0)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// rebuild scans the whole store and replaces the index.
func (ix *index) rebuild(ctx context.Context) error {
	ix.mu.Lock()
	ix.removing = map[recKey]struct{}{}
	ix.mu.Unlock()
	recs, other := map[recKey]*summary{}, map[recKey]struct{}{}
	n := 0
	err := ix.s.store.ScanAll(ctx, broker.ListOptions{Limit: broker.MaxListLimit}, func(e broker.Entry) error {
		if e.Record == nil {
			return nil
		}
		if reinjected(e.Record) {
			other[recKey{e.Record.Destination, e.Record.ID}] = struct{}{}
			return nil
		}
		p := ix.summarize(ctx, e)
		recs[recKey{p.dest, p.id}] = p
		n++
		if n%1000 == 0 {
			ix.mu.Lock()
			ix.scanned = n
			ix.mu.Unlock()
		}
		return nil
	})
	if ix.afterScan != nil {
		ix.afterScan()
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	removed := ix.removing
	ix.removing = nil
	if err != nil {
		ix.err = err.Error()
		return err
	}
	for k := range removed {
		delete(recs, k)
	}
	ix.recs, ix.other, ix.ready, ix.scanned, ix.err, ix.built = recs, other, true, n, "", time.Now()
	ix.gen++
	return nil
}

// pollNew adds the records written since the last look: it reads newest
// first until a page holds only known records. It returns the new
// summaries, newest first.
func (ix *index) pollNew(ctx context.Context) ([]*summary, error) {
	var fresh []*summary
	var others []recKey
	opts := broker.ListOptions{Descending: true, Limit: 200}
	for range 500 { // at most 100,000 new records per look
		p, err := ix.s.store.List(ctx, opts)
		if err != nil {
			return fresh, err
		}
		known := 0
		var unknown []broker.Entry
		ix.mu.RLock()
		for _, e := range p.Entries {
			if e.Record == nil {
				continue
			}
			k := recKey{e.Record.Destination, e.Record.ID}
			_, isOther := ix.other[k]
			if _, ok := ix.recs[k]; ok || isOther {
				known++
			} else {
				unknown = append(unknown, e)
			}
		}
		ix.mu.RUnlock()
		for _, e := range unknown {
			if reinjected(e.Record) {
				others = append(others, recKey{e.Record.Destination, e.Record.ID})
				continue
			}
			fresh = append(fresh, ix.summarize(ctx, e))
		}
		if known > 0 || p.Next == "" {
			break
		}
		opts.After = p.Next
	}
	if len(fresh) == 0 && len(others) == 0 {
		return nil, nil
	}
	ix.mu.Lock()
	for _, p := range fresh {
		ix.recs[recKey{p.dest, p.id}] = p
	}
	for _, k := range others {
		ix.other[k] = struct{}{}
	}
	ix.gen++
	ix.mu.Unlock()
	return fresh, nil
}

// remove drops records from the index (replayed or discarded here).
func (ix *index) remove(keys []recKey) {
	if len(keys) == 0 {
		return
	}
	ix.mu.Lock()
	for _, k := range keys {
		delete(ix.recs, k)
		if ix.removing != nil {
			ix.removing[k] = struct{}{}
		}
	}
	ix.gen++
	ix.mu.Unlock()
	ix.s.shapeCache.forget(keys)
}

func (ix *index) count() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.recs)
}

// status reports the index's state for /api/config and the page.
type indexStatus struct {
	Ready   bool      `json:"ready"`
	Scanned int       `json:"scanned"`
	Records int       `json:"records"`
	Error   string    `json:"error,omitempty"`
	Built   time.Time `json:"built,omitzero"`
}

func (ix *index) status() indexStatus {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return indexStatus{Ready: ix.ready, Scanned: ix.scanned, Records: len(ix.recs), Error: ix.err, Built: ix.built}
}

// Map clustering: a grid of cells cellPx pixels wide at the request's
// zoom, in Web Mercator, so clusters look the same size everywhere.
const (
	cellPx = 64
	// mergePx is how close two clusters' centres may come, in pixels,
	// before they are drawn as one; maxMergeClusters bounds the merge
	// (quadratic in the clusters in view; a view holds far fewer).
	mergePx          = 40
	maxMergeClusters = 2000
	// maxZoom is the zoom from which every record is its own marker
	// (records at the same place stay together).
	maxZoom = 16
)

// mapCluster is one marker of the map: a single record, or a cluster.
type mapCluster struct {
	Lon   float64        `json:"lon"`
	Lat   float64        `json:"lat"`
	Count int            `json:"count"`
	Class string         `json:"class,omitempty"` // the most frequent class
	By    map[string]int `json:"by_class,omitempty"`
	// Record is set for a single record.
	Record *mapRecord `json:"record,omitempty"`
	// Bounds is minlon,minlat,maxlon,maxlat of a cluster's records.
	Bounds [4]float64 `json:"bounds"`
}

type mapRecord struct {
	Destination string `json:"destination"`
	ID          string `json:"id"`
	EventID     string `json:"event_id"`
	Class       string `json:"class"`
	Kind        string `json:"reason_kind,omitempty"`
	Located     string `json:"located"`
	Reprojected int    `json:"reprojected_from,omitempty"`
}

type mapAnswer struct {
	Markers   []mapCluster `json:"markers"`
	InView    int          `json:"in_view"`
	Located   int          `json:"located"`
	Unlocated int          `json:"unlocated"`
	// Reprojected counts the matching records drawn after reprojection.
	Reprojected int            `json:"reprojected"`
	WhyNot      map[string]int `json:"why_not_on_map,omitempty"`
	Index       indexStatus    `json:"index"`
}

func mercY(lat float64) float64 {
	lat = math.Max(-85.05112878, math.Min(85.05112878, lat))
	s := math.Sin(lat * math.Pi / 180)
	return 0.5 - math.Log((1+s)/(1-s))/(4*math.Pi)
}

// clusters answers a map request: the records matching sel inside view at
// zoom, clustered.
func (ix *index) clusters(sel selection, view orb.Bound, zoom int) mapAnswer {
	zoom = max(0, min(zoom, 30))
	cells := math.Exp2(float64(zoom)) * 256 / cellPx // cells across the world
	type acc struct {
		sx, sy float64
		n      int
		by     map[string]int
		first  *summary
		b      orb.Bound
	}
	grid := map[[2]int64]*acc{}
	ans := mapAnswer{WhyNot: map[string]int{}}
	ix.mu.RLock()
	ans.Index = indexStatus{Ready: ix.ready, Scanned: ix.scanned, Records: len(ix.recs), Error: ix.err, Built: ix.built}
	for _, p := range ix.recs {
		if !sel.matchSummary(p) {
			continue
		}
		if p.located == "" {
			ans.Unlocated++
			ans.WhyNot[whyKey(p.why)]++
			continue
		}
		ans.Located++
		if p.reprojected != 0 {
			ans.Reprojected++
		}
		if !view.Contains(orb.Point{p.lon, p.lat}) {
			continue
		}
		ans.InView++
		var k [2]int64
		if zoom >= maxZoom {
			k = [2]int64{int64(math.Float64bits(p.lon)), int64(math.Float64bits(p.lat))}
		} else {
			k = [2]int64{int64(math.Floor((p.lon + 180) / 360 * cells)), int64(math.Floor(p.my * cells))}
		}
		a := grid[k]
		if a == nil {
			a = &acc{by: map[string]int{}, first: p, b: orb.Bound{Min: orb.Point{p.lon, p.lat}, Max: orb.Point{p.lon, p.lat}}}
			grid[k] = a
		}
		a.sx, a.sy, a.n = a.sx+p.lon, a.sy+p.lat, a.n+1
		a.by[p.class]++
		a.b = a.b.Extend(orb.Point{p.lon, p.lat})
	}
	ix.mu.RUnlock()
	// Neighbouring cells' clusters can sit side by side: merge, greedily
	// from the largest, those whose centres are closer than a marker.
	accs := make([]*acc, 0, len(grid))
	for _, a := range grid {
		accs = append(accs, a)
	}
	slices.SortFunc(accs, func(a, b *acc) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return cmpPoint(a.sx/float64(a.n), a.sy/float64(a.n), b.sx/float64(b.n), b.sy/float64(b.n))
	})
	if zoom < maxZoom && len(accs) <= maxMergeClusters {
		world := math.Exp2(float64(zoom)) * 256
		px := func(a *acc) (float64, float64) {
			return (a.sx/float64(a.n) + 180) / 360 * world, mercY(a.sy/float64(a.n)) * world
		}
		merged := accs[:0]
		for _, a := range accs {
			ax, ay := px(a)
			var into *acc
			for _, m := range merged {
				mx, my := px(m)
				if math.Hypot(ax-mx, ay-my) < mergePx {
					into = m
					break
				}
			}
			if into == nil {
				merged = append(merged, a)
				continue
			}
			into.sx, into.sy, into.n = into.sx+a.sx, into.sy+a.sy, into.n+a.n
			for c, k := range a.by {
				into.by[c] += k
			}
			into.b = into.b.Union(a.b)
		}
		accs = merged
	}
	ans.Markers = make([]mapCluster, 0, len(accs))
	for _, a := range accs {
		m := mapCluster{Lon: a.sx / float64(a.n), Lat: a.sy / float64(a.n), Count: a.n,
			Bounds: [4]float64{a.b.Min[0], a.b.Min[1], a.b.Max[0], a.b.Max[1]}}
		best := -1
		for c, n := range a.by {
			if n > best || n == best && c < m.Class {
				m.Class, best = c, n
			}
		}
		if a.n == 1 {
			p := a.first
			m.Lon, m.Lat = p.lon, p.lat
			m.Record = &mapRecord{Destination: p.dest, ID: p.id, EventID: p.eventID, Class: p.class, Kind: p.kind, Located: p.located, Reprojected: p.reprojected}
		} else {
			m.By = a.by
		}
		ans.Markers = append(ans.Markers, m)
	}
	slices.SortFunc(ans.Markers, func(a, b mapCluster) int {
		if c := b.Count - a.Count; c != 0 {
			return c
		}
		if a.Lon != b.Lon {
			if a.Lon < b.Lon {
				return -1
			}
			return 1
		}
		switch {
		case a.Lat < b.Lat:
			return -1
		case a.Lat > b.Lat:
			return 1
		}
		return 0
	})
	return ans
}

func cmpPoint(ax, ay, bx, by float64) int {
	switch {
	case ax < bx:
		return -1
	case ax > bx:
		return 1
	case ay < by:
		return -1
	case ay > by:
		return 1
	}
	return 0
}

// whyKey turns a why into its bounded category (the detail of a failed
// blob read names the blob).
func whyKey(why string) string {
	if k, _, ok := strings.Cut(why, ": "); ok {
		return k
	}
	return why
}

// overview counts the matching records by destination, class, stage,
// EPSG, reason kind and source prefix, and by class per time bucket (a
// bucket chosen from their time span).
func (ix *index) overview(sel selection) (open int, groups map[groupKey]int, timeline map[timeKey]int, prefixes map[string]int, bucket time.Duration) {
	var matched []*summary
	var lo, hi time.Time
	ix.mu.RLock()
	for _, p := range ix.recs {
		if !sel.matchSummary(p) {
			continue
		}
		matched = append(matched, p)
		if p.envelope && !p.at.IsZero() {
			if lo.IsZero() || p.at.Before(lo) {
				lo = p.at
			}
			if p.at.After(hi) {
				hi = p.at
			}
		}
	}
	ix.mu.RUnlock()
	bucket = bucketFor(hi.Sub(lo))
	groups, timeline, prefixes = map[groupKey]int{}, map[timeKey]int{}, map[string]int{}
	b := bucket.Nanoseconds()
	for _, p := range matched {
		groups[groupKey{p.dest, p.class, p.stage, p.kind, p.epsg}]++
		if p.envelope && !p.at.IsZero() {
			t := p.at.UnixNano()
			timeline[timeKey{t - ((t%b)+b)%b, p.class}]++
		}
		prefixes[p.prefix]++
	}
	return len(matched), groups, timeline, prefixes, bucket
}

// groupKey and timeKey are the overview's counting keys.
type (
	groupKey struct {
		dest, class, stage, kind string
		epsg                     int
	}
	timeKey struct {
		at    int64 // the bucket's start, ns since the epoch
		class string
	}
)

// prefixes counts the matching records by source-URI prefix
// (scheme://host), the top n.
func (ix *index) prefixes(sel selection, n int) []keyCount {
	counts := map[string]int{}
	ix.mu.RLock()
	for _, p := range ix.recs {
		if sel.matchSummary(p) {
			counts[p.prefix]++
		}
	}
	ix.mu.RUnlock()
	return topN(counts, n)
}

// timeSpan returns the earliest and latest dead_lettered_at of the
// matching records.
func (ix *index) timeSpan(sel selection) (lo, hi time.Time) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for _, p := range ix.recs {
		if !p.envelope || p.at.IsZero() || !sel.matchSummary(p) {
			continue
		}
		if lo.IsZero() || p.at.Before(lo) {
			lo = p.at
		}
		if p.at.After(hi) {
			hi = p.at
		}
	}
	return lo, hi
}

// sourcePrefix cuts a source URI after scheme://host; "" is "(none)".
func sourcePrefix(uri string) string {
	if uri == "" {
		return "(none)"
	}
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		if i := strings.IndexByte(uri, '/'); i > 0 {
			return uri[:i]
		}
		return clip(uri, 80)
	}
	host, _, _ := strings.Cut(rest, "/")
	return clip(scheme+"://"+host, 120)
}

type keyCount struct {
	Key   string `json:"key"`
	Count int    `json:"count"`
}

func topN(m map[string]int, n int) []keyCount {
	out := make([]keyCount, 0, len(m))
	for k, v := range m {
		out = append(out, keyCount{k, v})
	}
	slices.SortFunc(out, func(a, b keyCount) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return strings.Compare(a.Key, b.Key)
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// watch keeps the index current until ctx ends: it builds it, then polls
// for new records every interval, and rebuilds it when the store's count
// disagrees with the index (records removed elsewhere, by a CLI replay or
// purge). New records are announced to the page.
func (ix *index) watch(ctx context.Context, every time.Duration) {
	log := ix.s.log
	for {
		if err := ix.rebuild(ctx); err == nil {
			break
		} else if ctx.Err() != nil {
			return
		} else {
			log.WarnContext(ctx, "geodlq serve: building the map index failed; retrying", slog.Any("error", err))
		}
		if !sleep(ctx, 5*every) {
			return
		}
	}
	ix.s.hub.publish(event{Name: "index", Data: ix.status()})
	// The count check reads the store's Stats, which some stores answer
	// by reading their table (a second for 100,000 SQLite records): it
	// runs every five polls at most, and never more than 5% of the time.
	nextCheck := time.Now().Add(5 * every)
	for sleep(ctx, every) {
		fresh, err := ix.pollNew(ctx)
		if err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "geodlq serve: polling for new records failed", slog.Any("error", err))
		}
		if len(fresh) > 0 {
			ix.s.hub.publish(event{Name: "records", Data: ix.s.newRecordsEvent(fresh)})
		}
		if time.Now().Before(nextCheck) {
			continue
		}
		t0 := time.Now()
		total, err := ix.s.openCount(ctx)
		nextCheck = time.Now().Add(max(5*every, 20*time.Since(t0)))
		ix.mu.RLock()
		held := len(ix.recs) + len(ix.other)
		ix.mu.RUnlock()
		if err != nil || total == held {
			continue
		}
		before := ix.count()
		if err := ix.rebuild(ctx); err == nil && ix.count() != before {
			ix.s.hub.publish(event{Name: "changed", Data: map[string]int{"records": ix.count()}})
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// newRecordsEvent describes records that just arrived (at most 20 of
// them in full).
func (s *Server) newRecordsEvent(fresh []*summary) map[string]any {
	var rows []map[string]any
	for _, p := range fresh[:min(len(fresh), 20)] {
		rows = append(rows, map[string]any{"destination": p.dest, "id": p.id, "event_id": p.eventID, "class": p.class})
	}
	return map[string]any{"new": len(fresh), "records": s.index.count(), "latest": rows}
}

// openCount is the number of open (not replayed) records in the store.
func (s *Server) openCount(ctx context.Context) (int, error) {
	counts, err := s.store.Stats(ctx, broker.StatsOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range counts {
		n += c.Pending + c.Leased
	}
	return n, nil
}
